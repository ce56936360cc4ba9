"""Tests for tfrl.hardware.distribute and the --strategy flags.

Every subprocess of this file (two worker pairs, the equivalence script, a mirrored run and the bad-input
launches; TF's import alone costs ~5 s of CPU each) starts at once, in the module fixture `launches`; each
test waits for the one it checks.

- Flag and TF_CONFIG validation: pure, no TF device touched.
- Mirrored on two logical CPU devices makes the same update as one device, for DQN, A2C and PPO (a subprocess:
  logical devices must be configured before TF initializes).
- Two local worker processes with TF_CONFIG on loopback ports run scripts/train.py and end with identical
  variables; only the chief wrote files (DQN, and a second pair for PPO). Every subprocess has a timeout, so a hang fails instead of blocking.
- An A2C run under mirrored through scripts/train.py checkpoints and exports.
- Bad combinations through scripts/train.py exit with code 2 and write nothing.
"""

import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from absl import flags

from tfrl import agents
from tfrl.agents.dqn.config import DQNConfig
from tfrl.commands.runtime_flags import define_flags, options_from_flags
from tfrl.hardware import distribute
from tfrl.hardware.distribute import ClusterTask, DistributeConfigError
from tfrl.hardware.runtime import Runtime, RuntimeOptions, validate_options
from tfrl.run import training_loop

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
TRAIN = str(REPO_ROOT / "scripts" / "train.py")


def _env(tf_config=None, **extra):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2", **extra)
    env.pop("KERAS_BACKEND", None)
    env.pop("TF_CONFIG", None)
    if tf_config is not None:
        env["TF_CONFIG"] = tf_config
    return env


def _tf_config(addresses, index):
    return json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}})


# --- validation: pure ------------------------------------------------------------------

@pytest.mark.parametrize("options, message", [
    (RuntimeOptions(strategy="horovod"),
     "--strategy: unknown strategy 'horovod'; choose one of default, one_device, mirrored, multi_worker"),
    (RuntimeOptions(strategy="mirrored", cross_device_ops="gloo"), "--cross_device_ops: unknown value 'gloo'"),
    (RuntimeOptions(strategy="multi_worker", collective="mpi"), "--collective: unknown value 'mpi'"),
    (RuntimeOptions(cross_device_ops="nccl"),
     "--cross_device_ops=nccl applies to --strategy=mirrored only (got --strategy=default)"),
    (RuntimeOptions(strategy="mirrored", collective="ring"),
     "--collective=ring applies to --strategy=multi_worker only (got --strategy=mirrored)"),
    (RuntimeOptions(strategy="mirrored", device="cpu:1", logical_cpus=2),
     "--device=cpu:1 cannot be combined with --strategy=mirrored"),
    (RuntimeOptions(strategy="multi_worker"), "--strategy=multi_worker needs the TF_CONFIG environment variable"),
])
def test_bad_strategy_flags_are_rejected_before_tf_starts(options, message, monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(DistributeConfigError, match=re.escape(message)):
        validate_options(options)


def test_strategy_flags_round_trip():
    flag_values = flags.FlagValues()
    define_flags(flag_values)
    flag_values(["prog", "--strategy=mirrored", "--cross_device_ops=hierarchical_copy", "--logical_cpus=2"])
    assert options_from_flags(flag_values) == RuntimeOptions(strategy="mirrored", cross_device_ops="hierarchical_copy",
                                                             logical_cpus=2)
    assert RuntimeOptions().strategy == "default"  # the fast path unless asked


@pytest.mark.parametrize("tf_config, message", [
    ("{not json", "TF_CONFIG is not valid JSON"),
    ('{"cluster": {"worker": ["a:1"]}}', 'TF_CONFIG needs a "cluster" object and a "task" object'),
    ('{"cluster": {"ps": ["a:1"], "worker": ["b:1"]}, "task": {"type": "worker", "index": 0}}',
     "TF_CONFIG: cluster job 'ps' is not supported"),
    ('{"cluster": {"worker": ["a"]}, "task": {"type": "worker", "index": 0}}',
     "TF_CONFIG: cluster job 'worker' must be a non-empty list of \"host:port\" strings, got ['a']"),
    ('{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 2}}',
     "TF_CONFIG: task index 2 is out of range for the 2 'worker' address(es)"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}',
     "TF_CONFIG: task type 'chief' is not a job of the cluster (worker)"),
])
def test_bad_tf_config_is_rejected(tf_config, message):
    with pytest.raises(DistributeConfigError, match=re.escape(message)):
        distribute.parse_tf_config(tf_config)


def test_tf_config_ranks_the_chief_first():
    workers_only = '{"cluster": {"worker": ["a:1", "b:1", "c:1"]}, "task": {"type": "worker", "index": 2}}'
    assert distribute.parse_tf_config(workers_only) == ClusterTask(num_workers=3, rank=2, task="worker:2")
    # With a chief job, the chief is rank 0 and worker i is rank i + 1.
    with_chief = '{"cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"]}, "task": {"type": "%s", "index": %d}}'
    assert distribute.parse_tf_config(with_chief % ("chief", 0)) == ClusterTask(3, 0, "chief:0")
    assert distribute.parse_tf_config(with_chief % ("worker", 0)) == ClusterTask(3, 1, "worker:0")
    assert distribute.parse_tf_config(with_chief % ("worker", 0)).is_chief is False


def test_worker_seeds_differ_and_the_chief_keeps_the_seed():
    def runtime(rank):
        return Runtime(options=RuntimeOptions(), device_name="/device:CPU:0",
                       cluster=ClusterTask(num_workers=3, rank=rank, task=f"worker:{rank}"))
    seeds = [runtime(rank).worker_seed(7) for rank in range(3)]
    assert seeds[0] == 7
    assert len(set(seeds)) == 3


def test_multi_worker_dqn_needs_a_full_batch_at_the_first_train_call():
    two_workers = Runtime(options=RuntimeOptions(), device_name="/device:CPU:0",
                          cluster=ClusterTask(num_workers=2, rank=0, task="worker:0"))
    # 4 envs, first train call at env step max(64, 4) = 64 = 16 vector steps; with n_step = 3 each env has
    # emitted at least 16 - 3 + 1 = 14 transitions: 56 < 64 = batch_size. Enough: 4 * (64 / 4 + 3 - 1) = 72.
    config = DQNConfig(num_envs=4, n_step_return=3, batch_size=64, learning_starts=64)
    with pytest.raises(DistributeConfigError, match="raise learning_starts to at least 72"):
        training_loop.check_runtime(agents.get("dqn"), config, two_workers)
    training_loop.check_runtime(agents.get("dqn"), DQNConfig(num_envs=4, n_step_return=3, batch_size=64, learning_starts=72),
                                two_workers)
    # One process trains whenever its replay is ready: no constraint.
    training_loop.check_runtime(agents.get("dqn"), config, Runtime(options=RuntimeOptions(), device_name="/device:CPU:0"))


# --- mirrored on two logical CPUs == one device -------------------------------------------

_EQUIVALENCE_SCRIPT = """
import dataclasses, json
import numpy as np
import tensorflow as tf
from tfrl.agents.a2c.config import A2CConfig
from tfrl.agents.a2c.learning import A2CLearner
from tfrl.agents.actor_critic.rollout import Rollout
from tfrl.agents.dqn.config import DQNConfig
from tfrl.agents.dqn.learning import DQNLearner, ReplayBatch
from tfrl.agents.ppo.config import PPOConfig
from tfrl.agents.ppo.learning import PPOLearner, minibatch_indices
from tfrl.envs import EnvInfo
from tfrl.hardware import runtime as runtime_lib
from tfrl.hardware.runtime import Runtime, RuntimeOptions

def dqn_train(learner, batch, update_target):
    update = learner.update(ReplayBatch(batch, update_target))
    return update.metrics, update.weights

def ac_train(learner, obs, actions, advantages, returns, log_probs=None, start_env_step=0):
    log_probs = np.zeros(len(obs), np.float32) if log_probs is None else log_probs
    update = learner.update(Rollout(obs, actions, advantages, returns, log_probs, start_env_step))
    return update.metrics, update.weights

mirrored = runtime_lib.apply(RuntimeOptions(logical_cpus=2, strategy="mirrored", cross_device_ops="reduce_to_one"))
single = Runtime(options=dataclasses.replace(mirrored.options, strategy="default", cross_device_ops="auto"),
                 device_name="/device:CPU:0")
# A second MirroredStrategy over the same two CPUs (apply() accepts the same device configuration again).
mirrored_xla = runtime_lib.apply(RuntimeOptions(logical_cpus=2, strategy="mirrored", xla=True,
                                                cross_device_ops="hierarchical_copy"))
one_device = runtime_lib.apply(RuntimeOptions(logical_cpus=2, strategy="one_device", device="cpu:1"))
runtimes = {"single": single, "mirrored": mirrored, "mirrored_xla": mirrored_xla, "one_device": one_device}
try:  # TF has no CPU kernel for NcclAllReduce: refused up front instead of failing at the first step
    runtime_lib.apply(RuntimeOptions(logical_cpus=2, strategy="mirrored", cross_device_ops="nccl"))
    nccl_error = None
except Exception as e:
    nccl_error = f"{type(e).__name__}: {e}"
env = EnvInfo("CartPole-v1", (4,), 2)
rng = np.random.default_rng(0)
k, b = 3, 8  # 3 gradient steps per call on batches of 8: 4 rows per replica
dqn_batch = {"obs": rng.normal(size=(k, b, 4)).astype(np.float32),
             "action": rng.integers(0, 2, size=(k, b)).astype(np.int32),
             "reward": rng.normal(size=(k, b)).astype(np.float32),
             "discount": np.full((k, b), 0.9, np.float32),
             "next_obs": rng.normal(size=(k, b, 4)).astype(np.float32)}
a2c_batch = (rng.normal(size=(8, 4)).astype(np.float32), rng.integers(0, 2, size=8).astype(np.int32),
             rng.normal(size=8).astype(np.float32), rng.normal(size=8).astype(np.float32))
# A clip norm of 0.05 is active (A2C's gradient norm here is above 0.5, see the test), and it must clip the
# mean gradient over both replicas, not each replica's. normalize_advantage must use the whole batch's moments.
dqn_config = DQNConfig(hidden_sizes=(16,), batch_size=b, double_dqn=True, max_grad_norm=0.05, learning_rate=0.01)
a2c_config = A2CConfig(hidden_sizes=(16,), num_envs=2, rollout_length=4, normalize_advantage=True, max_grad_norm=0.05,
                       entropy_coef=0.01, learning_rate=0.01)
# PPO: 16 rows, 2 epochs of 2 minibatches of 8 (4 rows per replica), advantages normalized per minibatch. The clip
# range falls linearly from 0.2 to 0 over 1000 env steps: 0.1 for rollouts that start at env step 500.
ppo_config = PPOConfig(hidden_sizes=(16,), num_envs=2, rollout_length=8, batch_size=8, n_epochs=2, max_grad_norm=0.05,
                       entropy_coef=0.01, learning_rate=0.01, clip_range_schedule="linear", total_env_steps=1000)
ppo_batch = (rng.normal(size=(16, 4)).astype(np.float32), rng.integers(0, 2, size=16).astype(np.int32),
             rng.normal(size=16).astype(np.float32), rng.normal(size=16).astype(np.float32),
             np.log(rng.uniform(0.3, 0.7, size=16)).astype(np.float32))

def train(runtime, reference, rows=slice(None)):
    dqn, a2c = DQNLearner(dqn_config, env, runtime), A2CLearner(a2c_config, env, runtime)
    ppo = PPOLearner(ppo_config, env, runtime, seed=0)
    if reference is not None:  # the same starting point for every runtime
        dqn.online.set_weights(reference["online"]); dqn.target.set_weights(reference["target"])
        a2c.network.set_weights(reference["a2c"]); ppo.network.set_weights(reference["ppo"])
    start = {"online": dqn.online.get_weights(), "target": dqn.target.get_weights(), "a2c": a2c.network.get_weights(),
             "ppo": ppo.network.get_weights()}
    for update_target in (False, True):
        dqn_metrics, dqn_weights = dqn_train(dqn, {key: v[:, rows] for key, v in dqn_batch.items()}, update_target)
    for _ in range(2):
        a2c_metrics, a2c_weights = ac_train(a2c, *(x[rows] for x in a2c_batch))
    ppo_metrics, ppo_weights = {}, []
    if rows == slice(None):  # half of 16 rows is a single minibatch: not the same update
        for _ in range(2):
            ppo_metrics, ppo_weights = ac_train(ppo, *ppo_batch, start_env_step=500)  # clip range 0.1
    return start, {"ppo_metrics": ppo_metrics, "ppo_weights": [w.tolist() for w in ppo_weights],
                   "ppo_steps": int(ppo.optimizer.iterations.numpy()),
                   "dqn_loss": dqn_metrics["loss"], "dqn_weights": [w.tolist() for w in dqn_weights],
                   "gradient_steps": int(dqn.gradient_steps.numpy()), "a2c_metrics": a2c_metrics,
                   "a2c_weights": [w.tolist() for w in a2c_weights],
                   "copies": len(getattr(dqn.online.trainable_variables[0].value, "values", [None])),
                   "device": dqn.online.trainable_variables[0].value.device}

reference, results = train(single, None)
results = {"single": results}
for name in ("mirrored", "mirrored_xla", "one_device"):
    results[name] = train(runtimes[name], reference)[1]
# The pitfall that shapes the replicated step: XLA around a whole step that updates mirrored variables.
mirrored_learner = DQNLearner(dqn_config, env, mirrored)
whole_step = tf.function(mirrored_learner._train_step, jit_compile=True)
try:
    whole_step(*mirrored_learner.rows.pack(dqn_batch, batch_dims=2), tf.constant(False))
    jit_error = None
except Exception as e:
    jit_error = f"{type(e).__name__}: {e}"
# What one replica alone would have done: the first half of each batch.
results["single_half_batch"] = train(single, reference, rows=slice(0, b // 2))[1]

from tfrl.models import numerics

# PPO's NaN advantage goes into a row of the 2nd minibatch step: the flagged step, counted from 1, is 2.
ppo_nan_row = int(minibatch_indices(0, 0, 2, 16, 8)[1][0])

def guard(runtime):  # (tensors, gradient step) of the NonFiniteError a NaN reward/advantage raises, or None
    dqn, a2c = DQNLearner(dqn_config, env, runtime), A2CLearner(a2c_config, env, runtime)
    ppo = PPOLearner(ppo_config, env, runtime, seed=0)
    ppo_advantages = ppo_batch[2].copy()
    ppo_advantages[ppo_nan_row] = np.nan
    batch = {key: v.copy() for key, v in dqn_batch.items()}
    batch["reward"][1, 0] = np.nan  # the 2nd of the call's 3 gradient steps
    advantages = a2c_batch[2].copy()
    advantages[0] = np.nan
    caught = {}
    for name, call in (("dqn", lambda: dqn_train(dqn, batch, False)),
                       ("a2c", lambda: ac_train(a2c, a2c_batch[0], a2c_batch[1], advantages, a2c_batch[3])),
                       ("ppo", lambda: ac_train(ppo, ppo_batch[0], ppo_batch[1], ppo_advantages, *ppo_batch[3:]))):
        try:
            call()
            caught[name] = None
        except numerics.NonFiniteError as e:
            caught[name] = [e.tensors, e.gradient_step]
    return caught

guards = {name: guard(runtimes[name]) for name in ("single", "mirrored")}
print(json.dumps({"replicas": [runtimes[name].strategy.num_replicas_in_sync for name in ("mirrored", "mirrored_xla")],
                  "cross_device_ops": [type(runtimes[name].strategy.extended._cross_device_ops).__name__
                                       for name in ("mirrored", "mirrored_xla")],
                  "nccl_error": nccl_error, "jit_error": jit_error, "results": results, "guards": guards}))
"""


@pytest.fixture(scope="module")
def equivalence(launches):
    returncode, stdout, stderr = launches.result("equivalence")
    assert returncode == 0, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])


def _max_difference(weights_a, weights_b):
    return max(float(np.abs(np.asarray(a) - np.asarray(b)).max()) for a, b in zip(weights_a, weights_b))


# mirrored: --cross_device_ops=reduce_to_one; mirrored_xla: --xla (jit per replica) with hierarchical_copy;
# one_device: the replicated code path with one replica, on CPU:1.
@pytest.mark.parametrize("name, copies", [("mirrored", 2), ("mirrored_xla", 2), ("one_device", 1)])
def test_replicated_step_makes_the_single_device_update(equivalence, name, copies):
    assert equivalence["replicas"] == [2, 2]
    assert equivalence["cross_device_ops"] == ["ReductionToOneDevice", "HierarchicalCopyAllReduce"]
    single, mirrored = equivalence["results"]["single"], equivalence["results"][name]
    assert mirrored["copies"] == copies  # under mirrored, each variable really lives on both logical CPUs
    if name == "one_device":
        assert mirrored["device"].endswith("CPU:1")
    assert mirrored["gradient_steps"] == single["gradient_steps"] == 6
    # float32 sums in a different order: ~1e-7 apart after 6 Adam / 2 RMSprop steps of lr 0.01.
    assert _max_difference(mirrored["dqn_weights"], single["dqn_weights"]) < 1e-5
    assert mirrored["dqn_loss"] == pytest.approx(single["dqn_loss"], rel=1e-5)
    assert _max_difference(mirrored["a2c_weights"], single["a2c_weights"]) < 1e-5
    for key, value in single["a2c_metrics"].items():
        assert mirrored["a2c_metrics"][key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
    # PPO: 2 updates of 2 epochs x 2 minibatches, each minibatch split over the replicas.
    assert mirrored["ppo_steps"] == single["ppo_steps"] == 8
    assert _max_difference(mirrored["ppo_weights"], single["ppo_weights"]) < 1e-5
    assert set(single["ppo_metrics"]) >= {"loss", "approx_kl", "clip_fraction", "grad_norm"}
    assert single["ppo_metrics"]["clip_range"] == pytest.approx(0.1)  # the schedule, at the rollouts' start
    for key, value in single["ppo_metrics"].items():
        assert mirrored["ppo_metrics"][key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


def test_the_numeric_guard_stops_the_replicated_step_as_it_stops_one_device(equivalence):
    # DQN: a NaN reward in the 2nd of 3 gradient steps makes its loss and gradients NaN (on one replica, so the
    # mean over replicas too); Q(s, a) is still finite there. A2C: one NaN advantage, normalized over the batch,
    # makes every advantage, the loss and the gradients NaN at update 1.
    # PPO: the NaN advantage sits in the 2nd minibatch (normalized per minibatch), so step 2 is flagged.
    expected = {"dqn": [["loss", "gradients"], 2], "a2c": [["loss", "gradients"], 1],
                "ppo": [["loss", "gradients"], 2]}
    assert equivalence["guards"] == {"single": expected, "mirrored": expected}


def test_xla_around_the_whole_replicated_step_fails(equivalence):
    """Why --xla compiles only each replica's forward/backward pass under a strategy (if TF lifts this, simplify)."""
    assert equivalence["jit_error"] is not None
    assert "Trying to access resource" in equivalence["jit_error"]
    assert "located in device" in equivalence["jit_error"]


def test_nccl_between_cpus_is_refused(equivalence):
    assert equivalence["nccl_error"] == (
        "DistributeConfigError: --cross_device_ops=nccl all-reduces between GPUs, and none is visible "
        "(CPU:0, CPU:1); use reduce_to_one, hierarchical_copy or auto on CPUs")


def test_the_comparison_tells_one_replica_from_both(equivalence):
    """Had each replica applied only its own shard's gradients, the weights would differ by far more."""
    single, half = equivalence["results"]["single"], equivalence["results"]["single_half_batch"]
    assert single["a2c_metrics"]["grad_norm"] > 0.5  # 10x the clip norm: clipping shaped every update
    assert _max_difference(half["dqn_weights"], single["dqn_weights"]) > 1e-3
    assert _max_difference(half["a2c_weights"], single["a2c_weights"]) > 1e-3


# --- two local workers via scripts/train.py -----------------------------------------------

def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


_DIGEST = re.compile(r"final checkpoint: task=(\S+) variables_sha256=([0-9a-f]{64})")
# DQN with its own replay on each worker: first train call at env step 64, then every 16; 2 gradient steps each.
_WORKER_ARGS = [
    "--agent=dqn", "--env=CartPole-v1", "--strategy=multi_worker", "--preset=none", "--seed=3",
    "--hp=total_env_steps=320", "--hp=hidden_sizes=16", "--hp=learning_starts=64", "--hp=train_period_env_steps=16",
    "--hp=gradient_steps_per_train=2", "--hp=batch_size=32", "--hp=log_interval=160", "--hp=eval_interval=0",
    "--hp=final_eval_episodes=2", "--hp=checkpoint_interval=160", "--hp=target_update_period_env_steps=100",
    "--hp=learning_rate=0.01",
]


@pytest.fixture(scope="module")
def two_workers(launches):
    return launches.root, [launches.result(f"worker{index}") for index in range(2)]


def test_two_workers_end_with_identical_variables(two_workers):
    root, outputs = two_workers
    digests = {}
    for returncode, stdout, stderr in outputs:
        assert returncode == 0, stderr[-3000:]
        (task, digest), = _DIGEST.findall(stdout)
        digests[task] = digest
    assert set(digests) == {"worker:0", "worker:1"}
    assert digests["worker:0"] == digests["worker:1"]
    # The printed digest is that of the chief's final checkpoint on disk (checkpoint 2, at env step 320).
    assert distribute.checkpoint_digest(root / "run0" / "checkpoints" / "ckpt-2") == digests["worker:0"]


def test_two_workers_trained_on_their_own_episodes(two_workers):
    """Same seed flag, but each worker seeds its envs differently: their episode statistics differ."""
    root, outputs = two_workers
    train_logs = [re.findall(r"\[train\] env_step=160 .*", stderr) for _, _, stderr in outputs]
    assert all(len(lines) == 1 for lines in train_logs), train_logs
    returns = [re.search(r"episode_return_mean=(\S+)", lines[0]).group(1) for lines in train_logs]
    gradient_steps = [re.search(r"gradient_steps=(\d+)", lines[0]).group(1) for lines in train_logs]
    # (160 - 64) // 16 + 1 = 7 train calls of 2 gradient steps by env step 160, on both workers.
    assert gradient_steps == ["14", "14"]
    assert returns[0] != returns[1]


def test_only_the_chief_wrote_files(two_workers):
    root, outputs = two_workers
    chief_dir = root / "run0"
    assert {p.name for p in chief_dir.iterdir()} == {"config.json", "metrics.jsonl", "tensorboard", "checkpoints",
                                                     "saved_models", "result.json", ".lock"}
    assert (chief_dir / "saved_models" / "dqn-CartPole-v1" / "1" / "saved_model.pb").exists()
    assert not (root / "run1").exists()  # the worker's --run_dir: never created
    assert not (root / "bad").exists()
    # Nothing else in the workers' working directory (mirrored_a2c: the single-process mirrored run's;
    # ppo_workers: the PPO pair's own working directory).
    assert sorted(p.name for p in root.iterdir() if p.name not in ("mirrored_a2c", "ppo_workers")) == [
        "run0", "tmp0", "tmp1"]
    assert list((root / "tmp1").iterdir()) == []  # the worker's temporary checkpoints are gone
    assert "run_dir=none (not the chief)" in outputs[1][1]
    assert "exported:" in outputs[0][1] and "exported:" not in outputs[1][1]


# PPO: each worker shuffles its own 200-row rollouts; 8 updates of 2 epochs x 4 minibatch steps, all all-reduced.
_PPO_WORKER_ARGS = [
    "--agent=ppo", "--env=CartPole-v1", "--strategy=multi_worker", "--preset=none", "--seed=3",
    "--hp=total_env_steps=1600", "--hp=hidden_sizes=16", "--hp=num_envs=2", "--hp=rollout_length=100",
    "--hp=batch_size=50", "--hp=n_epochs=2", "--hp=log_interval=800", "--hp=eval_interval=0",
    "--hp=final_eval_episodes=2", "--hp=checkpoint_interval=800",
]


def test_two_ppo_workers_end_with_identical_variables_and_only_the_chief_writes(launches):
    outputs = [launches.result(f"ppo_worker{index}") for index in range(2)]
    digests = {}
    for returncode, stdout, stderr in outputs:
        assert returncode == 0, stderr[-3000:]
        (task, digest), = _DIGEST.findall(stdout)
        digests[task] = digest
    assert digests["worker:0"] == digests["worker:1"]
    ppo_root = launches.root / "ppo_workers"
    assert distribute.checkpoint_digest(ppo_root / "run0" / "checkpoints" / "ckpt-2") == digests["worker:0"]
    assert not (ppo_root / "run1").exists() and list((ppo_root / "tmp1").iterdir()) == []
    # Each worker played its own episodes: their first logged training returns differ.
    returns = [re.search(r"\[train\] env_step=800 .*episode_return_mean=(\S+)", stderr).group(1)
               for _, _, stderr in outputs]
    assert returns[0] != returns[1]
    final = json.loads((ppo_root / "run0" / "metrics.jsonl").read_text().splitlines()[-1])
    assert final["kind"] == "final_eval" and (final["updates"], final["gradient_steps"]) == (8, 8 * 2 * 4)


# --- mirrored through scripts/train.py ------------------------------------------------------

_MIRRORED_A2C_ARGS = [
    "--agent=a2c", "--env=CartPole-v1", "--strategy=mirrored", "--logical_cpus=2", "--hp=total_env_steps=160",
    "--hp=hidden_sizes=16", "--hp=num_envs=2", "--hp=rollout_length=4", "--hp=log_interval=80", "--hp=eval_interval=0",
    "--hp=final_eval_episodes=2", "--hp=checkpoint_interval=80",
]


def test_mirrored_a2c_run_checkpoints_and_exports(launches):
    returncode, stdout, stderr = launches.result("mirrored_a2c")
    assert returncode == 0, stderr[-3000:]
    banner = re.sub(r"\n[IWEF] \d\d:\d\d:\d\d {5}", " ", stderr)  # the banner's wrapped lines joined
    assert "strategy: MirroredStrategy, 2 replica(s) in sync, local devices: CPU:0, CPU:1" in banner
    run_dir = launches.root / "mirrored_a2c"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["kind"] == "final_eval" and records[-1]["updates"] == 160 // 8
    assert records[-1]["gradient_steps"] == 160 // 8  # A2C: one optimizer step per update
    assert (run_dir / "saved_models" / "a2c-CartPole-v1" / "1" / "saved_model.pb").exists()
    assert "variables_sha256" not in stdout  # one process: no digest line


# --- bad combinations through scripts/train.py: exit 2, nothing written ---------------------

_BAD_LAUNCHES = [
    # (case, extra arguments, TF_CONFIG or None, what the one error line must contain)
    ("mirrored_on_one_device", ["--strategy=mirrored"], None,
     "--strategy=mirrored needs at least 2 devices, but only CPU:0 is visible"),
    ("batch_not_divisible", ["--strategy=mirrored", "--logical_cpus=2", "--hp=batch_size=33"], None,
     "batch_size = 33 does not split evenly over this worker's 2 replicas; make it a multiple of 2"),
]


@pytest.mark.parametrize("name, message", [(case[0], case[3]) for case in _BAD_LAUNCHES])
def test_bad_combination_exits_2_and_writes_nothing(launches, name, message):
    returncode, _, stderr = launches.result(name)
    assert returncode == 2, stderr[-2000:]
    errors = [line for line in stderr.splitlines() if line.startswith("train.py: error: ")]
    assert len(errors) == 1 and message in errors[0], stderr[-2000:]
    assert "Traceback" not in stderr
    assert not (launches.root / "bad" / name).exists()


# --- all subprocesses at once -------------------------------------------------------------

class _Launches:
    """Subprocesses started together; result(name) waits for one (with a timeout: a hang fails the test)."""

    def __init__(self, root: pathlib.Path):
        self.root = root
        self._processes: dict[str, subprocess.Popen] = {}
        self._results: dict[str, tuple[int, str, str]] = {}

    def start(self, name, args, env, cwd):
        self._processes[name] = subprocess.Popen(args, env=env, cwd=cwd, stdout=subprocess.PIPE,
                                                 stderr=subprocess.PIPE, text=True)

    def result(self, name) -> tuple[int, str, str]:
        if name not in self._results:
            process = self._processes[name]
            try:
                stdout, stderr = process.communicate(timeout=400)
            except subprocess.TimeoutExpired:
                process.kill()
                stdout, stderr = process.communicate()
                pytest.fail(f"{name} did not finish within 400 s (a worker waiting on a collective?): {stderr[-2000:]}")
            self._results[name] = (process.returncode, stdout, stderr)
        return self._results[name]

    def kill_all(self):
        for process in self._processes.values():
            if process.poll() is None:
                process.kill()
                process.communicate()


@pytest.fixture(scope="module")
def launches(tmp_path_factory):
    root = tmp_path_factory.mktemp("distribute")
    launches = _Launches(root)
    # The two workers first: they wait for each other.
    addresses = [f"127.0.0.1:{port}" for port in _free_ports(2)]
    for index in range(2):
        temp_dir = root / f"tmp{index}"  # TMPDIR: where a non-chief worker checkpoints, then deletes
        temp_dir.mkdir()
        launches.start(f"worker{index}", [sys.executable, TRAIN, *_WORKER_ARGS, f"--run_dir={root / f'run{index}'}"],
                       env=_env(_tf_config(addresses, index), TMPDIR=str(temp_dir)), cwd=root)
    ppo_root = root / "ppo_workers"  # apart from the DQN pair's directory, whose listing a test checks
    ppo_root.mkdir()
    ppo_addresses = [f"127.0.0.1:{port}" for port in _free_ports(2)]
    for index in range(2):
        temp_dir = ppo_root / f"tmp{index}"
        temp_dir.mkdir()
        launches.start(f"ppo_worker{index}",
                       [sys.executable, TRAIN, *_PPO_WORKER_ARGS, f"--run_dir={ppo_root / f'run{index}'}"],
                       env=_env(_tf_config(ppo_addresses, index), TMPDIR=str(temp_dir)), cwd=ppo_root)
    launches.start("equivalence", [sys.executable, "-c", textwrap.dedent(_EQUIVALENCE_SCRIPT)], env=_env(),
                   cwd=REPO_ROOT)
    launches.start("mirrored_a2c", [sys.executable, TRAIN, *_MIRRORED_A2C_ARGS, f"--run_dir={root / 'mirrored_a2c'}"],
                   env=_env(), cwd=REPO_ROOT)
    for name, args, tf_config, _ in _BAD_LAUNCHES:
        launches.start(name, [sys.executable, TRAIN, "--agent=dqn", "--env=CartPole-v1", *args,
                              f"--run_dir={root / 'bad' / name}"], env=_env(tf_config), cwd=REPO_ROOT)
    yield launches
    launches.kill_all()

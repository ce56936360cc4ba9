"""tfrl.rollout_actors (--actors): rollouts stepped in Ray actors equal the in-process rollout (one actor), keep
each env's seed (two actors) and report episodes on the run's clock; a training run with one actor is the
in-process run; a killed actor is replaced and the run completes; a driver killed with SIGKILL resumes through a
two-node cluster; bad input is one line. Ray runs locally on 2 CPUs without its dashboard or token, its files
in a short temp dir of the test's own, and is shut down at the end (the two-node cluster's processes are killed,
the temp dirs removed)."""

import contextlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import psutil
import pytest

import tfrl
from tfrl import envs
from tfrl.agents.actor_critic.actor import ActorCriticActor
from tfrl.agents.actor_critic.collection import collect_steps
from tfrl.agents.actor_critic.config import ActorCriticConfig
from tfrl.agents.actor_critic.heads import make_head
from tfrl.agents.actor_critic.networks import make_network
from tfrl.agents.actor_critic.ray_actors import RayRollouts, ShareSetup
from tfrl.agents.actor_critic.rollout import STEP_FIELDS, RolloutStorage
from tfrl.envs.stepping import EnvStepError
from tfrl.errors import UsageError
from tfrl.models import networks, normalization, numpy_networks
from tfrl.models.running_stats import NoNormalization
from tfrl.rollout_actors.pool import shares

import actor_envs

T, N, SEED = 40, 4, 3  # CartPole's episodes end inside 40 steps of a random policy: episodes are reported
TESTS = pathlib.Path(__file__).resolve().parents[1]
REPO_ROOT = TESTS.parent
# A PPO run of a few seconds: 8 rollouts of 4 envs x 32 steps, a small network, no periodic evaluation.
SHORT_PPO = {"total_env_steps": 1024, "num_envs": 4, "rollout_length": 32, "batch_size": 64, "n_epochs": 2,
             "hidden_sizes": (16,), "log_interval": 128, "eval_interval": 0, "final_eval_episodes": 3,
             "checkpoint_interval": 0}


@contextlib.contextmanager
def _ray_temp_dir():
    """A new dir for Ray's files, removed after the block. Not under pytest's tmp dir: Ray puts its sockets ~65
    bytes below it, and AF_UNIX paths end at 107 bytes, which pytest's numbered dirs can pass."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="tfrl-ray-", dir="/tmp" if os.path.isdir("/tmp") else None))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def ray_local():
    import ray  # the test extra installs it

    saved = {name: os.environ.get(name) for name in ("PYTHONPATH", "RAY_AUTH_MODE")}
    # The actors import tests/actor_envs.py; a local test cluster needs no token (none is written to ~/.ray).
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), saved["PYTHONPATH"]]))
    os.environ["RAY_AUTH_MODE"] = "disabled"
    with _ray_temp_dir() as temp_dir:
        ray.init(num_cpus=2, include_dashboard=False, _temp_dir=str(temp_dir), logging_level="ERROR",
                 log_to_driver=False)
        yield ray
        ray.shutdown()
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="module")
def policy():
    """(env info, head, the mirror) of a small actor-critic network for CartPole."""
    env = envs.make_vector_env("CartPole-v1", 1, seed=0)
    info = envs.env_info(env, "CartPole-v1")
    env.close()
    head = make_head(info)
    config = ActorCriticConfig(hidden_sizes=(8,))
    mirror = networks.acting_network(make_network(config, info, head), numpy_networks.NumpyActorCritic)
    return info, head, mirror


def _in_process(info, head, mirror):
    episodes = []
    stepper = envs.VectorStepper(envs.make_vector_env("CartPole-v1", N, seed=SEED, training=True),
                                 on_episode=lambda *episode: episodes.append(episode))
    storage = RolloutStorage(T, N, info.observations.row_shape, head)
    last_value = collect_steps(stepper, ActorCriticActor(mirror, head, seed=SEED), NoNormalization(), head, storage)
    stepper.env.close()
    return storage, last_value, episodes


def _remote(info, head, mirror, actors, obs_normalizer=None):
    episodes = []
    setup = ShareSetup("CartPole-v1", "sync", T, tuple(info.observations.row_shape), "float32", head)
    rollouts = RayRollouts(setup, N, actors, SEED, on_episode=lambda *episode: episodes.append(episode))
    storage = RolloutStorage(T, N, info.observations.row_shape, head)
    try:
        last_value = rollouts.collect(mirror, obs_normalizer or NoNormalization(), storage)
        assert rollouts.env_step == T * N
    finally:
        rollouts.close()
    return storage, last_value, episodes


def test_shares_are_contiguous_and_even():
    assert shares(4, 1) == [(0, 4)] and shares(5, 2) == [(0, 3), (3, 2)] and shares(3, 3) == [(0, 1), (1, 1), (2, 1)]
    with pytest.raises(ValueError, match="actors must be between 1 and num_envs=4, got 5"):
        shares(4, 5)


def test_one_actor_makes_the_in_process_rollout_bit_for_bit(ray_local, policy):
    info, head, mirror = policy
    local, local_last, local_episodes = _in_process(info, head, mirror)
    remote, remote_last, remote_episodes = _remote(info, head, mirror, actors=1)
    for name in STEP_FIELDS:
        np.testing.assert_array_equal(getattr(remote, name), getattr(local, name), err_msg=name)
    np.testing.assert_array_equal(remote_last, local_last)
    assert remote_episodes == local_episodes and len(local_episodes) >= N  # the run's env steps, returns, lengths
    finished = [storage.finish(last, 0.99, 0.95, head, 0) for storage, last in ((local, local_last),
                                                                                   (remote, remote_last))]
    for field in ("obs", "actions", "advantages", "returns", "log_probs"):
        np.testing.assert_array_equal(getattr(finished[1], field), getattr(finished[0], field), err_msg=field)


def test_two_actors_keep_each_envs_seed_and_the_runs_clock(ray_local, policy):
    info, head, mirror = policy
    local, _, _ = _in_process(info, head, mirror)
    remote, last_value, episodes = _remote(info, head, mirror, actors=2)
    np.testing.assert_array_equal(remote.obs[0], local.obs[0])  # env i reset with seed + i in either
    assert last_value.shape == (N,) and np.isfinite(last_value).all()
    assert episodes and all(0 < env_step <= T * N and env_step % N == 0 for env_step, _, _ in episodes)
    assert sum(length for _, _, length in episodes) <= T * N
    # every ended episode is marked done in its env's column, as many as were reported
    assert int(remote.dones.sum()) == len(episodes)


def test_the_learners_statistics_take_in_every_observation_the_actors_counted(ray_local, policy):
    info, head, mirror = policy
    learner = normalization.ObservationNormalizer(normalization.ObservationNormalization((4,), clip=10.0))
    prior = learner.stats.count
    remote, _, _ = _remote(info, head, mirror, actors=2, obs_normalizer=learner)
    assert learner.stats.count == pytest.approx(prior + T * N)  # s_0 .. s_{T-1} of every env, once each
    # The rollout holds observations normalized by the actors' running statistics: roughly standardized.
    assert np.abs(remote.obs.reshape(-1, 4).mean(axis=0)).max() < 0.5


def _train(tmp_path, name, actors, env="CartPole-v1", agent="ppo", **kwargs):
    hp = kwargs.pop("hp", SHORT_PPO if agent == "ppo" else SHORT_OFF_POLICY)
    run = tfrl.train(agent, env, hp=hp, preset="none", run_dir=tmp_path / name, actors=actors,
                     verbose=0, progress_bar=False, **kwargs)
    records = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    return run, records


@pytest.mark.parametrize("vector_mode", ["sync", "envpool"])  # gymnasium's vector env or EnvPool's, in the actor
def test_a_run_with_one_actor_is_the_in_process_run(ray_local, tmp_path, vector_mode):
    _, local = _train(tmp_path, "local", actors=0, vector_mode=vector_mode)
    _, remote = _train(tmp_path, "remote", actors=1, vector_mode=vector_mode)
    learned = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "explained_variance")
    pick = lambda records, kind: [{k: r[k] for k in learned + ("env_step", "return_mean") if k in r}  # noqa: E731
                                  for r in records if r["kind"] == kind]
    assert pick(remote, "train") == pick(local, "train") and len(pick(local, "train")) == 8
    assert pick(remote, "final_eval") == pick(local, "final_eval")
    assert [r for r in remote if r["kind"] == "train"][-1]["actor_restarts"] == 0


# Short off-policy runs whose train calls fall at the same env steps in rounds of actors as in one process
# (learning_starts a multiple of the period, the period of num_envs), so that one actor repeats the run exactly.
SHORT_OFF_POLICY = {"total_env_steps": 1024, "num_envs": 2, "learning_starts": 256, "train_period_env_steps": 64,
                    "gradient_steps_per_train": 8, "batch_size": 32, "hidden_sizes": (16,), "log_interval": 128,
                    "eval_interval": 0, "final_eval_episodes": 3, "checkpoint_interval": 0}


@pytest.mark.parametrize("agent, env", [("dqn", "CartPole-v1"), ("sac", "Pendulum-v1"), ("td3", "Pendulum-v1")])
def test_an_off_policy_run_with_one_actor_is_the_in_process_run(ray_local, tmp_path, agent, env):
    runs = {}
    for actors in (0, 1):
        tfrl.train(agent, env, hp=SHORT_OFF_POLICY, preset="none", run_dir=tmp_path / str(actors), actors=actors,
                   verbose=0, progress_bar=False)
        records = [json.loads(line) for line in (tmp_path / str(actors) / "metrics.jsonl").read_text().splitlines()]
        runs[actors] = [{k: v for k, v in r.items() if k not in _NOT_LEARNED and not k.startswith("actor_")}
                        for r in records if r["kind"] in ("train", "final_eval")]
    assert runs[1] == runs[0] and len(runs[0]) == 9
    assert runs[0][-1]["gradient_steps"] == (1024 - 256) // 64 * 8 + 8  # calls at 256, 320, ..., 1024


_NOT_LEARNED = ("wall_time_s", "env_steps_per_s", "time")


@pytest.mark.parametrize("agent, actor_mode", [("ppo", "sync"), ("dqn", "sync"), ("ppo", "async")])
def test_a_killed_actor_is_replaced_and_the_run_completes(ray_local, tmp_path, agent, actor_mode):
    marker = tmp_path / "killed"
    # Asynchronous updates take what arrives: the other actor alone could make every rollout of a short run in the
    # ~2 s Ray takes to report the death; here it would need ~8 s.
    total, step_seconds = (8192, 0.001) if actor_mode == "async" else (1024, 0.0)
    hp = {**(SHORT_PPO if agent == "ppo" else SHORT_OFF_POLICY), "total_env_steps": total}
    run, records = _train(tmp_path, "run", actors=2, env=actor_envs.dies_once, agent=agent, actor_mode=actor_mode,
                          hp=hp, env_kwargs={"marker": str(marker), "driver_pid": os.getpid(),
                                             "step_seconds": step_seconds})
    assert marker.exists()  # an actor's process was killed at an env's 30th step
    train = [r for r in records if r["kind"] == "train"]
    assert train[-1]["env_step"] == total and train[-1]["actor_restarts"] == 1
    assert run.complete and run.result["env_step"] == total


def test_an_async_run_trains_on_rollouts_of_older_weights_and_logs_their_lag(ray_local, tmp_path):
    run, records = _train(tmp_path, "run", actors=2, actor_mode="async", weight_sync_period=2)
    train = [r for r in records if r["kind"] == "train"]
    assert [r["env_step"] for r in train] == list(range(128, 1025, 128)) and run.complete
    # Each update after the first takes first a rollout submitted before it: acted with weights >= 1 update old.
    # The weights are sent every 2 updates, so the first rollout update 2 takes acted with update 0's: lag 2.
    assert train[0]["policy_lag_max"] == 0 and all(r["policy_lag_max"] >= 1 for r in train[1:])
    assert train[2]["policy_lag_max"] >= 2 and all(0 <= r["policy_lag_mean"] <= r["policy_lag_max"] for r in train)
    assert all(0 <= r["rollouts_waiting"] <= 2 and np.isfinite(r["explained_variance"]) for r in train)
    assert [r for r in records if r["kind"] == "final_eval"]


def test_envs_that_keep_raising_stop_the_run_naming_the_cause(ray_local, tmp_path):
    with pytest.raises(EnvStepError, match=r"rollout actor 0 failed 3 times in a row; the last time RuntimeError: "
                                           r"the simulator crashed"):
        _train(tmp_path, "run", actors=2, env=actor_envs.always_raises, env_kwargs={"driver_pid": os.getpid()})


@pytest.mark.parametrize("kwargs, message", [
    ({"actors": -1}, "--actors must be >= 0"),
    ({"actors": 5}, "--actors=5 is more than num_envs=4"),
    ({"actors": 2, "agent": "dqn", "hp": {"num_envs": 3, "train_period_env_steps": 64}},
     "--actors: train_period_env_steps=64 must be a multiple of num_envs=3"),
    ({"actors": 2, "agent": "dqn", "env": "tfrl/Catch-v0", "hp": {"num_envs": 2}},
     "--actors: this policy's convolutions act through TensorFlow in the learner's process"),
    ({"actors": 2, "actor_mode": "async", "agent": "dqn", "hp": {"num_envs": 2}},
     "--actor_mode=async is A2C's and PPO's"),
    ({"actors": 3, "actor_mode": "async"}, "--actor_mode=async: num_envs=4 must be a multiple of --actors=3"),
    ({"actors": 2, "actor_mode": "async", "hp": {**SHORT_PPO, "lstm_units": 8}}, "a policy with memory"),
    ({"actors": 2, "weight_sync_period": 2}, "--weight_sync_period: synchronous rollouts act with the learner's"),
    ({"actors": 2, "weight_sync_period": 0}, "--weight_sync_period must be >= 1"),
    ({"actors": 2, "actor_mode": "later"}, "--actor_mode must be one of sync, async, got 'later'"),
    ({"actor_mode": "async"}, "--actor_mode and --weight_sync_period are how rollout actors run"),
    ({"actors": 0, "ray_address": "auto"}, "--ray_address is where --actors=N run"),
    ({"actors": 2, "ray_address": "127.0.0.1:1"}, "--ray_address=127.0.0.1:1: nothing answers there"),
    ({"actors": 2, "ray_address": "ray://127.0.0.1:10001"}, "Ray Client addresses"),
    ({"actors": 2, "ray_address": "no-port"}, "expected host:port"),
])
def test_bad_actor_options_are_one_line_and_write_nothing(tmp_path, kwargs, message):
    kwargs = dict(kwargs)
    agent, env, hp = kwargs.pop("agent", "ppo"), kwargs.pop("env", "CartPole-v1"), kwargs.pop("hp", SHORT_PPO)
    with pytest.raises(UsageError, match=message):
        tfrl.train(agent, env, hp=hp, preset="none", run_dir=tmp_path / "run", verbose=0, **kwargs)
    assert not (tmp_path / "run").exists()


def _ray_start(*args, temp_dir):
    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    ray = pathlib.Path(sys.executable).parent / "ray"
    completed = subprocess.run([str(ray), "start", *args, "--num-cpus=1", f"--temp-dir={temp_dir}",
                                "--disable-usage-stats"], capture_output=True, text=True, env=env, timeout=120)
    assert completed.returncode == 0, completed.stderr[-2000:]


def _kill_processes_of(paths):
    """Every process whose command line names one of `paths` (a node's temp dir), and their children."""
    me = os.getpid()
    found = {p for p in psutil.process_iter(["cmdline"]) if p.pid != me
             and any(str(path) in arg for path in paths for arg in (p.info["cmdline"] or []))}
    for process in list(found):
        try:
            found.update(process.children(recursive=True))
        except psutil.Error:
            pass
    for process in found:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(list(found), timeout=20)


@pytest.fixture
def two_nodes():
    """A Ray cluster of two nodes of one CPU each on this machine, each with its own temp dir: (its address, the
    second node's temp dir)."""
    port = 20000 + os.getpid() % 20000
    with _ray_temp_dir() as head_dir, _ray_temp_dir() as node_dir:
        try:
            _ray_start("--head", f"--port={port}", "--include-dashboard=false", temp_dir=head_dir)
            _ray_start(f"--address=127.0.0.1:{port}", temp_dir=node_dir)
            yield f"127.0.0.1:{port}", node_dir
        finally:
            _kill_processes_of([head_dir, node_dir])


def _train_script(run_dir, address, *extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", RAY_AUTH_MODE="disabled",
               PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    args = [sys.executable, str(REPO_ROOT / "scripts" / "train.py"), "--agent=ppo", "--env=CartPole-v1",
            "--preset=none", f"--run_dir={run_dir}", "--actors=2", f"--ray_address={address}",
            "--hp=num_envs=4", "--hp=rollout_length=32", "--hp=batch_size=64", "--hp=n_epochs=2",
            "--hp=hidden_sizes=16", "--hp=total_env_steps=6144", "--hp=log_interval=512",
            "--hp=checkpoint_interval=512", "--hp=eval_interval=0", "--hp=final_eval_episodes=3", *extra]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _signal_after_checkpoint(driver, run_dir, checkpoint: int, signum) -> None:
    deadline = time.monotonic() + 180
    while not list((run_dir / "checkpoints").glob(f"ckpt-{checkpoint}.index")) and driver.poll() is None:
        assert time.monotonic() < deadline, f"no checkpoint {checkpoint} within 180 s"
        time.sleep(0.2)
    assert driver.poll() is None, driver.communicate()[1][-2000:]  # still training: signalled mid-run
    driver.send_signal(signum)


def _actor_processes() -> list:
    """This machine's processes of rollout actors (Ray names a worker's process after its actor class)."""
    return [p for p in psutil.process_iter(["cmdline"]) if any("RolloutWorker" in arg
                                                               for arg in (p.info["cmdline"] or [])[:1])]


def test_a_driver_killed_by_sigkill_resumes_on_a_two_node_cluster(two_nodes, tmp_path):
    address, node_dir = two_nodes
    run_dir = tmp_path / "run"
    driver = _train_script(run_dir, address)
    _signal_after_checkpoint(driver, run_dir, 2, signal.SIGKILL)
    driver.wait()
    killed_at = max(json.loads(line)["env_step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines())
    assert killed_at < 6144
    # SIGTERM: a checkpoint where it stopped, exit 0, and the actors stop with the driver.
    stopped = _train_script(run_dir, address)
    _signal_after_checkpoint(stopped, run_dir, 4, signal.SIGTERM)
    stdout, stderr = stopped.communicate(timeout=120)
    assert stopped.returncode == 0 and "restored checkpoint" in stderr, stderr[-2000:]
    assert "stopped by SIGTERM at env step" in stdout and not (run_dir / "result.json").exists()
    deadline = time.monotonic() + 60
    while _actor_processes():
        assert time.monotonic() < deadline, "rollout actors outlived their driver by 60 s"
        time.sleep(0.5)
    again = _train_script(run_dir, address)
    _, stderr = again.communicate(timeout=300)
    assert again.returncode == 0, stderr[-2000:]
    assert "restored checkpoint" in stderr
    result = json.loads((run_dir / "result.json").read_text())
    assert result["kind"] == "final_eval" and result["env_step"] == 6144
    # Each node has one CPU and each actor takes one: an actor ran on the second node, in a worker it started.
    assert list(node_dir.glob("session_*/logs/worker-*"))


def test_a_wrong_ray_address_is_one_line_from_the_command_line(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    completed = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "train.py"), "--agent=ppo",
                                "--env=CartPole-v1", "--actors=2", "--ray_address=127.0.0.1:1",
                                f"--run_dir={tmp_path / 'run'}"], capture_output=True, text=True, env=env,
                               timeout=120)
    lines = [line for line in completed.stderr.splitlines() if line.strip()]
    assert completed.returncode == 2 and len(lines) == 1, completed.stderr
    assert "--ray_address=127.0.0.1:1: nothing answers there" in lines[0]
    assert not (tmp_path / "run").exists()

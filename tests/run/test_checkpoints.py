"""Tests for tfrl.run.checkpoints: bitwise round trip, crash consistency, and SIGKILL + resume of scripts/train.py.

The in-process tests build a DQNLearner with a LossScaleOptimizer (a Runtime whose
options say mixed_float16, never applied: the networks stay float32, but the
optimizer carries the loss-scale state that must survive a checkpoint).
"""

import contextlib
import dataclasses
import errno
import json
import logging
import os
import pathlib
import random
import re
import resource
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfrl import agents
from tfrl.agents.dqn.config import DQNConfig
from tfrl.agents.dqn.learning import DQNLearner, ReplayBatch
from tfrl.envs import EnvInfo
from tfrl.hardware.runtime import Runtime, RuntimeOptions
from tfrl.models import numerics as numerics_lib
from tfrl.replay import UniformReplay
from tfrl.run import checkpoints, runs, shutdown, training_loop
from tfrl.run.checkpoints import Checkpointer, CheckpointError
from tfrl.run.metrics import read_metrics

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
TRAIN = str(REPO_ROOT / "scripts" / "train.py")
CRASH_POINTS = str(REPO_ROOT / "tests" / "crash_points.py")
INFO = EnvInfo(env_id="CartPole-v1", obs_shape=(4,), num_actions=2)


def _learner() -> DQNLearner:
    config = DQNConfig(hidden_sizes=(16, 16), batch_size=8, replay_capacity=64)
    runtime = Runtime(options=RuntimeOptions(mixed_precision="mixed_float16"), device_name="/device:CPU:0")
    return DQNLearner(config, INFO, runtime)


def _batch(rng, k=2, b=8):
    return {"obs": rng.normal(size=(k, b, 4)).astype(np.float32), "action": rng.integers(0, 2, (k, b), dtype=np.int32),
            "reward": rng.normal(size=(k, b)).astype(np.float32), "discount": np.full((k, b), 0.99, np.float32),
            "next_obs": rng.normal(size=(k, b, 4)).astype(np.float32)}


def _filled_replay(seed: int) -> UniformReplay:
    rng = np.random.default_rng(seed)
    replay = UniformReplay(capacity=64, obs_shape=(4,), seed=seed)
    for _ in range(10):  # 100 transitions into 64 slots: the ring has wrapped, cursor = 36
        replay.add(rng.normal(size=(10, 4)), rng.integers(0, 2, 10), rng.normal(size=10), np.full(10, 0.99),
                   rng.normal(size=(10, 4)))
    replay.sample(8, 3)  # advance the sampling RNG
    return replay


def _all_variables(learner: DQNLearner) -> dict[str, np.ndarray]:
    """By position and name without the model prefix (Keras numbers the models of one process: q_network_1, ...)."""
    named = {f"online/{i}/{v.name}": v for i, v in enumerate(learner.online.weights)}
    named.update({f"target/{i}/{v.name}": v for i, v in enumerate(learner.target.weights)})
    named.update({f"optimizer/{i}/{v.name}": v for i, v in enumerate(learner.optimizer.variables)})
    named["gradient_steps"] = learner.gradient_steps
    return {name: np.array(v.numpy()) for name, v in named.items()}


def _save(checkpointer: Checkpointer, env_step: int, replay: UniformReplay, actor_rng: np.random.Generator) -> int:
    arrays, replay_state = replay.checkpoint_state()
    return checkpointer.save(env_step, {"replay": replay_state, "actor_rng": checkpoints.rng_state(actor_rng),
                                        "note": "x", "nan": float("nan")}, arrays)


def test_round_trip_restores_weights_optimizer_slots_loss_scale_replay_and_rngs_bitwise(tmp_path):
    rng = np.random.default_rng(0)
    learner = _learner()
    for _ in range(3):
        learner.update(ReplayBatch(_batch(rng), update_target=True))
    assert isinstance(learner.optimizer, keras.optimizers.LossScaleOptimizer)
    assert int(learner.optimizer.step_counter.numpy()) == 6  # 3 calls x K=2 finite steps: the loss-scale state
    replay = _filled_replay(seed=1)
    actor_rng = np.random.default_rng(2)
    actor_rng.random(5)
    number = _save(Checkpointer(tmp_path, learner.checkpoint_items()), 1234, replay, actor_rng)

    fresh = _learner()
    saved, before = _all_variables(learner), _all_variables(fresh)
    assert saved.keys() == before.keys()
    for slot in ("momentum", "velocity", "dynamic_scale", "step_counter", "iteration"):  # Adam slots, loss scale
        assert any(slot in name for name in saved), slot
    assert not all(np.array_equal(saved[k], before[k]) for k in saved)  # restoring has something to do
    restored = Checkpointer(tmp_path, fresh.checkpoint_items()).restore_latest()
    assert (restored.number, restored.env_step) == (number, 1234)
    after = _all_variables(fresh)
    for name in saved:
        assert np.array_equal(after[name], saved[name]), name
    assert restored.loop_state["note"] == "x" and np.isnan(restored.loop_state["nan"])

    fresh_replay = UniformReplay(capacity=64, obs_shape=(4,), seed=99)
    fresh_replay.restore_checkpoint_state(restored.arrays, restored.loop_state["replay"])
    for name in ("obs", "action", "reward", "discount", "next_obs"):
        assert np.array_equal(getattr(fresh_replay, name), getattr(replay, name)), name
    assert (fresh_replay.size, fresh_replay.cursor) == (replay.size, replay.cursor) == (64, 36)
    fresh_rng = np.random.default_rng(7)
    checkpoints.set_rng_state(fresh_rng, restored.loop_state["actor_rng"])
    assert np.array_equal(fresh_rng.random(4), actor_rng.random(4))


def test_restored_replay_samples_the_same_batches(tmp_path):
    replay = _filled_replay(seed=3)
    arrays, state = replay.checkpoint_state()
    Checkpointer(tmp_path, {}).save(1, {"replay": state}, arrays)
    restored = Checkpointer(tmp_path, {}).restore_latest()
    copy = UniformReplay(capacity=64, obs_shape=(4,), seed=0)
    copy.restore_checkpoint_state(restored.arrays, restored.loop_state["replay"])
    expected, got = replay.sample(8, 3), copy.sample(8, 3)
    for name in expected:
        assert np.array_equal(expected[name], got[name]), name


def _two_checkpoints(tmp_path):
    """Checkpoints 1 and 2 of one network whose weights differ between them; returns (network, weights at 1)."""
    net = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    step = tf.Variable(0, dtype=tf.int64)
    checkpointer = Checkpointer(tmp_path, {"net": net, "step": step})
    weights_1 = [w.copy() for w in net.get_weights()]
    step.assign(1)
    assert checkpointer.save(100, {"at": 100}, {"a": np.arange(5)}) == 1
    net.set_weights([w + 1.0 for w in weights_1])
    step.assign(2)
    assert checkpointer.save(200, {"at": 200}, {"a": np.arange(6)}) == 2
    return net, step, weights_1


_TF_NOISE = re.compile(r"^(WARNING: All log messages before absl::InitializeLog\(\)|[IWE]0000 00:00:|"
                       r"To enable the following instructions:)")


def _without_tf_noise(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not _TF_NOISE.match(line))


def _truncate(path: pathlib.Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


@pytest.mark.parametrize("damage, bad_file", [
    (lambda d: _truncate(d / "ckpt-2.data-00000-of-00001"), "ckpt-2.data-00000-of-00001"),
    (lambda d: _truncate(d / "ckpt-2.index"), "ckpt-2.index"),
    (lambda d: (d / "ckpt-2.index").unlink(), "ckpt-2.index"),
    (lambda d: _truncate(d / "ckpt-2.npz"), "ckpt-2.npz"),
    (lambda d: (d / "ckpt-2.json").write_text('{"env_step": 2'), "ckpt-2.json"),
], ids=["truncated-data", "truncated-index", "missing-index", "truncated-npz", "cut-json"])
def test_a_damaged_checkpoint_is_reported_and_the_previous_one_is_used(tmp_path, caplog, damage, bad_file):
    net, step, weights_1 = _two_checkpoints(tmp_path)
    damage(tmp_path / "checkpoints")
    step.assign(-1)
    with caplog.at_level(logging.WARNING):
        restored = Checkpointer(tmp_path, {"net": net, "step": step}).restore_latest()
    assert (restored.number, restored.env_step, restored.loop_state) == (1, 100, {"at": 100})
    assert np.array_equal(restored.arrays["a"], np.arange(5))
    assert int(step.numpy()) == 1
    for got, want in zip(net.get_weights(), weights_1):
        assert np.array_equal(got, want)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("checkpoint 2 is unusable" in w and bad_file in w for w in warnings), warnings


def test_an_explicitly_requested_damaged_or_missing_checkpoint_is_an_error(tmp_path):
    net, step, _ = _two_checkpoints(tmp_path)
    _truncate(tmp_path / "checkpoints" / "ckpt-2.data-00000-of-00001")
    checkpointer = Checkpointer(tmp_path, {"net": net, "step": step})
    with pytest.raises(CheckpointError, match="checkpoint 2 is unusable: .*ckpt-2.data-00000-of-00001"):
        checkpointer.restore(2)
    with pytest.raises(CheckpointError, match=r"checkpoint 7 does not exist .*available: 1, 2"):
        checkpointer.restore(7)
    assert checkpointer.restore(1).env_step == 100


def test_all_checkpoints_damaged_is_an_error_not_a_fresh_start(tmp_path):
    net, step, _ = _two_checkpoints(tmp_path)
    for n in (1, 2):
        _truncate(tmp_path / "checkpoints" / f"ckpt-{n}.index")
    with pytest.raises(CheckpointError, match=r"none of the checkpoints \[1, 2\]"):
        Checkpointer(tmp_path, {"net": net, "step": step}).restore_latest()


def test_a_save_interrupted_before_its_commit_leaves_the_previous_checkpoint_and_no_stray_files(tmp_path,
                                                                                                 monkeypatch):
    net, step, _ = _two_checkpoints(tmp_path)
    directory = tmp_path / "checkpoints"

    def interrupted(self, *args, **kwargs):  # a second Ctrl-C arrives after ckpt-3.npz, inside TF's write
        raise KeyboardInterrupt

    checkpointer = Checkpointer(tmp_path, {"net": net, "step": step})
    with monkeypatch.context() as m:
        m.setattr(tf.train.Checkpoint, "write", interrupted)
        with pytest.raises(KeyboardInterrupt):
            checkpointer.save(300, {"at": 300}, {"a": np.arange(7)})
    assert not list(directory.glob("ckpt-3*"))  # what the interrupted save wrote is gone
    assert checkpoints.latest_checkpoint_number(tmp_path) == 2
    assert Checkpointer(tmp_path, {"net": net, "step": step}).restore_latest().number == 2


def test_a_save_killed_before_its_commit_leaves_files_that_are_ignored_then_swept(tmp_path, monkeypatch):
    net, step, _ = _two_checkpoints(tmp_path)
    directory = tmp_path / "checkpoints"
    # What SIGKILL after the TF files, before the JSON, leaves: ckpt-3's npz and TF files, no JSON.
    for suffix in (".index", ".data-00000-of-00001", ".npz"):
        (directory / f"ckpt-3{suffix}").write_bytes((directory / f"ckpt-2{suffix}").read_bytes())
    assert Checkpointer(tmp_path, {"net": net, "step": step}).restore_latest().number == 2
    # The next save never reuses the orphan's number (it cannot overwrite anything), and sweeps it away.
    assert Checkpointer(tmp_path, {"net": net, "step": step}).save(400, {"at": 400}) == 4
    assert not list(directory.glob("ckpt-3*"))


def _fill_the_disk_in_numpy(monkeypatch):
    """np.savez_compressed writes a few bytes, then the disk is full."""
    def savez_compressed(file, **arrays):
        file.write(b"PK\x03\x04 a partial zip")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(np, "savez_compressed", savez_compressed)
    return contextlib.nullcontext()


@contextlib.contextmanager
def _file_size_limit(monkeypatch, limit_bytes=200):
    """A real write failure inside TensorFlow's C++ writer: RLIMIT_FSIZE makes write(2) fail with EFBIG
    (SIGXFSZ ignored), as a full disk makes it fail with ENOSPC."""
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, old_limit[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)


@pytest.mark.parametrize("fail_writes, arrays, reason", [
    (_fill_the_disk_in_numpy, {"a": np.arange(7)}, "No space left on device"),
    # No arrays, and a JSON file under the limit: the first write over it is TF's (the object graph in ckpt-3.index).
    (_file_size_limit, None, "File too large"),
], ids=["disk-full-in-arrays", "write-error-in-tf-files"])
def test_a_failed_write_is_one_clear_error_and_leaves_the_previous_checkpoint(tmp_path, monkeypatch, fail_writes,
                                                                             arrays, reason):
    net, step, _ = _two_checkpoints(tmp_path)
    directory = tmp_path / "checkpoints"
    weights_2 = [w.copy() for w in net.get_weights()]
    checkpointer = Checkpointer(tmp_path, {"net": net, "step": step})
    with monkeypatch.context() as m, fail_writes(m):
        with pytest.raises(checkpoints.CheckpointWriteError) as raised:
            checkpointer.save(300, {"at": 300}, arrays)
    message = str(raised.value)
    assert message.startswith(f"cannot write checkpoint 3 in {directory} (") and reason in message, message
    assert message.endswith("); checkpoint 2 is still the newest") and "function_node" not in message
    if arrays is None:
        assert "[Op:" in message  # raised by a TF op, not by the JSON write before it
    assert not list(directory.glob("ckpt-3*")) and checkpointer.numbers() == [2, 1]  # nothing of 3 is left

    net.set_weights([w * 0 for w in weights_2])
    restored = Checkpointer(tmp_path, {"net": net, "step": step}).restore_latest()
    assert (restored.number, restored.env_step, int(step.numpy())) == (2, 200, 2)
    assert all(np.array_equal(a, b) for a, b in zip(net.get_weights(), weights_2))
    assert checkpointer.save(300, {"at": 300}, arrays) == 3  # with room again, saving goes on


def test_launchers_report_a_run_error_as_one_line_with_its_exit_code(tmp_path):
    code = ("from tfrl import cli, errors\n"
            "def main(argv):\n"
            "    raise errors.RunError('cannot write checkpoint 9 (No space left on device)')\n"
            "cli.run(main)\n")
    script = tmp_path / "launcher.py"
    script.write_text(code)
    completed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                               env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)), timeout=60)
    assert completed.returncode == 1
    assert completed.stderr == "launcher.py: error: cannot write checkpoint 9 (No space left on device)\n"


def test_only_the_newest_keep_checkpoints_remain_with_their_side_files(tmp_path):
    checkpointer = Checkpointer(tmp_path, {"v": tf.Variable(1.0)}, keep=3)
    for env_step in range(1, 6):
        checkpointer.save(env_step * 10, {}, {"a": np.zeros(2)})
    assert checkpointer.numbers() == [5, 4, 3]
    names = {p.name.split(".")[0] for p in (tmp_path / "checkpoints").iterdir() if p.name != "checkpoint"}
    assert names == {"ckpt-3", "ckpt-4", "ckpt-5"}
    assert checkpointer.save(50, {}) == 5  # same env step as the last save: nothing new is written


def test_keep_none_keeps_every_checkpoint(tmp_path):
    checkpointer = Checkpointer(tmp_path, {"v": tf.Variable(1.0)}, keep=None)
    for env_step in range(1, 6):
        checkpointer.save(env_step * 10, {}, {"a": np.zeros(2)})
    assert checkpointer.numbers() == [5, 4, 3, 2, 1]
    assert checkpointer.restore(1, load_arrays=True).env_step == 10


# --- scripts/train.py killed with SIGKILL and resumed ------------------------------------

TOTAL_ENV_STEPS = 3000
TINY_HP = [f"total_env_steps={TOTAL_ENV_STEPS}", "checkpoint_interval=500", "hidden_sizes=16,16",
           "replay_capacity=1000", "batch_size=32", "learning_starts=64", "train_period_env_steps=4", "gradient_steps_per_train=1",
           "target_update_period_env_steps=100", "eval_interval=1000", "eval_episodes=2", "final_eval_episodes=3",
           "log_interval=500"]


class _Run:
    """A scripts/train.py subprocess with its output in files (no pipe to fill up)."""

    def __init__(self, args, tmp_path: pathlib.Path, name: str, pause: tuple[str, pathlib.Path] | None = None):
        """pause: (point, paused file): run through tests/crash_points.py, held at that point."""
        self.stdout_path, self.stderr_path = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2")
        command = [CRASH_POINTS, pause[0], str(pause[1])] if pause else [TRAIN]
        with open(self.stdout_path, "w") as out, open(self.stderr_path, "w") as err:
            self.process = subprocess.Popen([sys.executable, *command, *args], stdout=out, stderr=err, env=env,
                                            cwd=tmp_path)

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def wait_for(self, condition, what: str, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.process.poll() is not None:
                pytest.fail(f"train.py exited ({self.process.returncode}) before {what}:\n{self.stderr()[-3000:]}")
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"timed out waiting for {what}:\n{self.stderr()[-3000:]}")
            time.sleep(0.05)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()


def test_train_killed_with_sigkill_resumes_and_finishes(tmp_path):
    run_dir = tmp_path / "run"
    train_args = ["--agent=dqn", "--env=CartPole-v1", "--preset=none", "--seed=3", f"--run_dir={run_dir}",
                  *[f"--hp={hp}" for hp in TINY_HP]]
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2")

    def latest() -> int:
        return checkpoints.latest_checkpoint_number(run_dir) or 0

    def logs() -> str:  # for failure messages: the runs' stderr and the metrics records
        text = "".join(f"--- {p.name}\n{_without_tf_noise(p.read_text())[-2500:]}\n"
                       for p in sorted(tmp_path.glob("*.err")))
        metrics = run_dir / "metrics.jsonl"
        return text + ("--- metrics.jsonl\n" + metrics.read_text()[-4000:] if metrics.exists() else "")

    # 1. Killed right after its first checkpoint. Meanwhile (once config.json exists), another config in the
    #    same run dir is refused with one line and exit code 2.
    run = _Run(train_args, tmp_path, "1")
    run.wait_for(lambda: (run_dir / "config.json").exists(), "config.json")
    other = subprocess.Popen([sys.executable, TRAIN, *train_args, "--hp=learning_rate=0.5"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    run.wait_for(lambda: latest() >= 1, "the first checkpoint")
    run.kill()
    first = latest()
    _, other_stderr = other.communicate(timeout=120)
    assert other.returncode == 2, other_stderr[-2000:] + logs()
    error = other_stderr.strip().splitlines()[-1]
    assert error.startswith(f"train.py: error: --run_dir {run_dir} holds a run with a different config")
    assert "hparams.learning_rate: 0.5 != 0.00063" in error and "Traceback" not in other_stderr

    # 2. The same command resumes (the run dir holds this config); killed at a random moment after it has
    #    written a checkpoint of its own: maybe while training, evaluating, or writing the next checkpoint.
    #    The moment: after one of its first three checkpoints, plus less than the ~0.2 s between two, so that
    #    it is killed before it ends (a run that finished first would leave nothing to test).
    run = _Run(train_args, tmp_path, "2")
    rng = random.Random()
    killed_after = first + rng.randint(1, 3)
    run.wait_for(lambda: latest() >= killed_after, f"checkpoint {killed_after}")
    delay = rng.uniform(0.0, 0.15)
    time.sleep(delay)
    run.kill()
    assert run.process.returncode == -signal.SIGKILL, "run 2 ended before it was killed\n" + logs()
    assert f"restored checkpoint {first}" in run.stderr(), logs()

    # 3. The newest checkpoint is damaged: --resume reports it, falls back to the previous one, and finishes.
    newest = latest()
    _truncate(run_dir / "checkpoints" / f"ckpt-{newest}.data-00000-of-00001")
    run = _Run(["--resume", f"--run_dir={run_dir}"], tmp_path, "3")
    context = f"run 2 was killed {delay:.2f} s after checkpoint {killed_after}; checkpoint {newest} damaged\n"
    assert run.process.wait(timeout=120) == 0, context + logs()
    stderr = run.stderr()
    assert f"checkpoint {newest} is unusable" in stderr and f"ckpt-{newest}.data-00000-of-00001" in stderr, \
        context + logs()
    assert "final evaluation: env=CartPole-v1" in run.stdout_path.read_text()

    records = read_metrics(run_dir / "metrics.jsonl")
    assert sum(r["kind"] == "resume" for r in records) == 2, context + logs()
    final = [r for r in records if r["kind"] == "final_eval"]
    assert final and final[-1]["env_step"] == TOTAL_ENV_STEPS, context + logs()
    train_steps = [r["env_step"] for r in records if r["kind"] == "train"]
    assert train_steps == list(range(500, TOTAL_ENV_STEPS + 1, 500)), context + logs()  # no orphans, no gaps
    assert [r["env_step"] for r in records if r["kind"] == "eval"] == list(range(1000, TOTAL_ENV_STEPS + 1, 1000)), \
        context + logs()
    assert json.loads((run_dir / "config.json").read_text())["hparams"]["checkpoint_interval"] == 500

    model_dir = run_dir / "saved_models" / "dqn-CartPole-v1"
    version = max(int(p.name) for p in model_dir.iterdir() if p.name.isdigit())
    serving = tf.saved_model.load(str(model_dir / str(version))).signatures["serving_default"]
    outputs = serving(observation=tf.zeros([3, 4]))
    assert outputs["action"].dtype == tf.int64 and outputs["action"].shape == (3,)


# --- the fault matrix: SIGKILL inside each write, SIGTERM, and resume -------------------------

FAULT_TOTAL_ENV_STEPS = 6000
FAULT_HP = [f"total_env_steps={FAULT_TOTAL_ENV_STEPS}", "checkpoint_interval=1000", "hidden_sizes=16,16",
            "replay_capacity=2000", "batch_size=32", "learning_starts=200", "train_period_env_steps=4", "gradient_steps_per_train=1",
            "target_update_period_env_steps=100", "eval_interval=0", "final_eval_episodes=3", "log_interval=500"]


def _file_hashes(directory: pathlib.Path, stem: str) -> dict[str, str]:
    import hashlib
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.glob(stem + ".*"))}


def _paused_run(args, tmp_path, name, point) -> "_Run":
    """A train run held by tests/crash_points.py at `point` (waits until it is there)."""
    paused = tmp_path / f"{name}.paused"
    run = _Run(args, tmp_path, name, (point, paused))
    run.wait_for(paused.exists, f"the pause at {point}", timeout=180)
    return run


def test_sigkill_inside_each_write_and_sigterm_lose_nothing(tmp_path):
    """One run through every fault: each kill leaves the newest committed checkpoint loadable, and the next
    launch of the same command continues from it, to the same end as an undisturbed run."""
    run_dir = tmp_path / "run"
    checkpoint_dir = run_dir / "checkpoints"
    args = ["--agent=dqn", "--env=CartPole-v1", "--preset=none", "--seed=5", f"--run_dir={run_dir}",
            *[f"--hp={hp}" for hp in FAULT_HP]]
    model_dir = run_dir / "saved_models" / "dqn-CartPole-v1"

    # 1. Killed inside checkpoint 2's TF write: its TF files are in place, the state file does not list it yet.
    run = _paused_run(args, tmp_path, "1-tf-write", "checkpoint.tf_files_written:2")
    assert (checkpoint_dir / "ckpt-2.index").exists() and checkpoints.latest_checkpoint_number(run_dir) == 1
    good = _file_hashes(checkpoint_dir, "ckpt-1")
    run.kill()
    assert checkpoints.latest_checkpoint_number(run_dir) == 1
    assert _file_hashes(checkpoint_dir, "ckpt-1") == good

    # 2. Resumed from 1, killed while writing the replay buffer of its first checkpoint (number 3: the orphan
    #    number 2 is never reused) to its temp file.
    run = _paused_run(args, tmp_path, "2-replay-write", "checkpoint.arrays_written:1")
    assert "restored checkpoint 1" in run.stderr()
    assert list(checkpoint_dir.glob("ckpt-3.npz.tmp-*")) and not (checkpoint_dir / "ckpt-3.npz").exists()
    run.kill()
    assert checkpoints.latest_checkpoint_number(run_dir) == 1
    assert _file_hashes(checkpoint_dir, "ckpt-1") == good

    # 3. Resumed from 1 again; SIGTERM once it has logged past the resume: a checkpoint, then exit code 0.
    resumes = lambda: sum(r["kind"] == "resume" for r in read_metrics(run_dir / "metrics.jsonl"))  # noqa: E731
    run = _Run(args, tmp_path, "3-sigterm")
    run.wait_for(lambda: resumes() == 2 and read_metrics(run_dir / "metrics.jsonl")[-1]["kind"] == "train",
                 "a train record after the second resume")
    os.kill(run.process.pid, signal.SIGTERM)
    assert run.process.wait(timeout=120) == 0, _without_tf_noise(run.stderr())[-3000:]
    stopped = re.search(r"^stopped by SIGTERM at env step (\d+): checkpoint (\d+) saved; continue with: "
                        rf"tfrl train --resume --run_dir={re.escape(str(run_dir))}$",
                        run.stdout_path.read_text(), re.M)
    assert stopped, run.stdout_path.read_text()
    stop_step, stop_number = int(stopped.group(1)), int(stopped.group(2))
    assert 1000 < stop_step < FAULT_TOTAL_ENV_STEPS
    assert checkpoints.latest_checkpoint_number(run_dir) == stop_number
    assert json.loads((checkpoint_dir / f"ckpt-{stop_number}.json").read_text())["env_step"] == stop_step
    assert not list(checkpoint_dir.glob("ckpt-2*")) and not list(checkpoint_dir.glob("ckpt-3.npz*"))  # swept
    assert not model_dir.exists()  # stopped early: no final evaluation, no export

    # 4. Resumed from the SIGTERM checkpoint, trains to the end, killed inside the export before its rename.
    run = _paused_run(args, tmp_path, "4-export", "export.before_rename")
    assert f"restored checkpoint {stop_number} (env step {stop_step})" in run.stderr()
    run.kill()
    assert [p.name for p in model_dir.iterdir() if p.name.isdigit()] == []  # a version is complete or absent
    assert list(model_dir.glob(".tmp-*"))  # the unfinished export, under a name TF Serving ignores
    final_number = checkpoints.latest_checkpoint_number(run_dir)
    assert json.loads((checkpoint_dir / f"ckpt-{final_number}.json").read_text())["env_step"] == FAULT_TOTAL_ENV_STEPS

    # 5. The same command once more: nothing left to train; the final evaluation and the export complete.
    run = _Run(args, tmp_path, "5-finish")
    assert run.process.wait(timeout=180) == 0, _without_tf_noise(run.stderr())[-3000:]
    assert f"restored checkpoint {final_number}" in run.stderr()
    assert f"exported: {model_dir / '1'}" in run.stdout_path.read_text()
    serving = tf.saved_model.load(str(model_dir / "1")).signatures["serving_default"]
    assert serving(observation=tf.zeros([2, 4]))["action"].shape == (2,)

    records = read_metrics(run_dir / "metrics.jsonl")
    assert [r["env_step"] for r in records if r["kind"] == "train"] == list(range(500, FAULT_TOTAL_ENV_STEPS + 1, 500))
    # Launches 4 and 5 both evaluated the final policy (4 was killed after it, in the export).
    assert [r["env_step"] for r in records if r["kind"] == "final_eval"] == [FAULT_TOTAL_ENV_STEPS] * 2
    assert records[-1]["kind"] == "final_eval"


# --- the training loops under a diverging step and a stop request (in-process) ------------------

def _loop_case(agent: str, **overrides):
    """(train function, config) of a tiny CartPole run that checkpoints at env step 200, before learning starts."""
    if agent == "dqn":
        config = DQNConfig(total_env_steps=1200, hidden_sizes=(16, 16), batch_size=16, replay_capacity=500,
                           learning_starts=300, train_period_env_steps=4, gradient_steps_per_train=1,
                           target_update_period_env_steps=100,
                           eval_interval=0, final_eval_episodes=1, log_interval=200, checkpoint_interval=200)
    elif agent == "a2c":
        from tfrl.agents.a2c.config import A2CConfig
        config = A2CConfig(total_env_steps=1200, num_envs=4, rollout_length=5, hidden_sizes=(16, 16), eval_interval=0,
                           final_eval_episodes=1, log_interval=200, checkpoint_interval=200)
    else:  # PPO: A2C's rollouts, 2 epochs of 2 minibatches each
        from tfrl.agents.ppo.config import PPOConfig
        config = PPOConfig(total_env_steps=1200, num_envs=4, rollout_length=5, batch_size=10, n_epochs=2,
                           hidden_sizes=(16, 16), eval_interval=0, final_eval_episodes=1, log_interval=200,
                           checkpoint_interval=200)
    def train(config, env_id, seed, runtime, run_dir, progress_bar=False, stop_requested=shutdown.never):
        options = training_loop.LoopOptions(progress_bar=progress_bar, stop_requested=stop_requested)
        return training_loop.train(agents.get(agent), config, env_id, seed, runtime, run_dir, options)

    return train, dataclasses.replace(config, **overrides)


def _snapshot(directory: pathlib.Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.mark.parametrize("agent", ["dqn", "a2c", "ppo"])
def test_a_diverging_loop_stops_naming_the_env_step_and_writes_nothing_after_the_last_good_checkpoint(
        tmp_path, monkeypatch, agent):
    # A step size of 1e30 makes the weights ~1e30 after the first update; the next forward pass overflows.
    # DQN's first update is at env step 300, after checkpoint 1 (200); A2C's and PPO's are every 20 env steps from the
    # start, so they checkpoint after each (finite, if huge) one.
    # PPO takes one minibatch step per update here: its second step of an update would already overflow.
    overrides = {"dqn": {}, "a2c": {"checkpoint_interval": 20},
                 "ppo": {"checkpoint_interval": 20, "n_epochs": 1, "batch_size": 20}}[agent]
    train, config = _loop_case(agent, learning_rate=1e30, **overrides)
    snapshots = []
    save = Checkpointer.save

    def save_and_snapshot(self, *args, **kwargs):
        number = save(self, *args, **kwargs)
        snapshots.append(_snapshot(self.directory))
        return number

    monkeypatch.setattr(Checkpointer, "save", save_and_snapshot)
    runtime = Runtime(options=RuntimeOptions(), device_name="/device:CPU:0")
    with pytest.raises(numerics_lib.NonFiniteError) as raised:
        train(config, "CartPole-v1", 0, runtime, tmp_path, progress_bar=False)
    error = raised.value
    assert error.env_step is not None and error.env_step <= 600, str(error)
    assert len(snapshots) >= 1 and error.last_checkpoint[1] == len(snapshots), str(error)
    assert error.last_checkpoint[0] < error.env_step
    assert str(error).startswith("training diverged: non-finite ")
    assert str(error).endswith(f"at env step {error.env_step} (gradient step {error.gradient_step}); stopped "
                               f"without saving: checkpoint {len(snapshots)} (env step {error.last_checkpoint[0]}) "
                               "is the newest")
    assert _snapshot(tmp_path / "checkpoints") == snapshots[-1]  # byte for byte, and no file added
    assert not (tmp_path / "saved_models").exists()


@pytest.mark.parametrize("agent", ["dqn", "a2c", "ppo"])
def test_a_stop_request_checkpoints_and_the_next_run_continues_from_it(tmp_path, agent):
    train, config = _loop_case(agent)
    runtime = Runtime(options=RuntimeOptions(), device_name="/device:CPU:0")
    polls = []

    def stop_requested() -> bool:  # after the first log (200): DQN polls per vector step, A2C/PPO per rollout
        polls.append(1)
        return len(polls) >= 300 if agent == "dqn" else len(polls) >= 15

    stopped = train(config, "CartPole-v1", 0, runtime, tmp_path, progress_bar=False, stop_requested=stop_requested)
    assert stopped["kind"] == "stopped"
    expected_step = 299 if agent == "dqn" else 14 * 4 * 5  # polls before the stop x env steps per poll
    assert stopped["env_step"] == expected_step
    restored = Checkpointer(tmp_path, {}).restore_latest(load_arrays=False)
    assert (restored.number, restored.env_step) == (stopped["checkpoint"], expected_step)

    final = train(config, "CartPole-v1", 0, runtime, tmp_path, progress_bar=False)
    assert final["kind"] == "final_eval" and final["env_step"] == 1200
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["env_step"] for r in records if r["kind"] == "resume"] == [expected_step]
    assert [r["env_step"] for r in records if r["kind"] == "train"] == list(range(200, 1201, 200))
    if agent != "dqn":
        # The learner's own update counter (PPO's minibatch orders are keyed by it) came back from the
        # checkpoint: 1200 / 20 updates in all, not 1200 / 20 minus the 14 before the stop.
        counters = {name: value for name, value in _newest_checkpoint_values(tmp_path).items()
                    if name.startswith("updates/")}
        assert list(counters.values()) == [60], counters


def _newest_checkpoint_values(run_dir):
    """{name: value} of every tensor of the run's newest TF checkpoint."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(run_dir / "checkpoints")))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


# --- Ctrl-C -------------------------------------------------------------------------------------

def test_a_second_ctrl_c_does_not_wait():
    """The first SIGINT is a stop request the loop answers at its next consistent point; the second raises at once."""
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        stop = shutdown.StopRequest.on_signals()
        assert not stop.requested()
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)  # the handler runs in the main thread at the next bytecode boundary
        assert stop.requested() and stop.signal_name == "SIGINT"
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def test_ctrl_c_stops_an_a2c_run_with_a_checkpoint_and_the_same_command_finishes_it(tmp_path):
    run_dir = tmp_path / "run"
    total = 12_000
    args = ["--agent=a2c", "--env=CartPole-v1", "--preset=none", "--seed=2", f"--run_dir={run_dir}",
            f"--hp=total_env_steps={total}", "--hp=log_interval=400", "--hp=eval_interval=0",
            "--hp=checkpoint_interval=0", "--hp=final_eval_episodes=2", "--export_base_path="]
    run = _Run(args, tmp_path, "ctrl-c")
    run.wait_for(lambda: (run_dir / "metrics.jsonl").exists()
                 and any(r["kind"] == "train" for r in read_metrics(run_dir / "metrics.jsonl")), "a train record")
    os.kill(run.process.pid, signal.SIGINT)
    assert run.process.wait(timeout=120) == 0, _without_tf_noise(run.stderr())[-3000:]
    stopped = re.search(r"^stopped by SIGINT at env step (\d+): checkpoint (\d+) saved",
                        run.stdout_path.read_text(), re.M)
    assert stopped, run.stdout_path.read_text() + _without_tf_noise(run.stderr())[-3000:]
    stop_step, number = int(stopped.group(1)), int(stopped.group(2))
    assert 400 <= stop_step < total
    assert stop_step % 40 == 0  # after a whole update: 8 envs x 5 steps
    assert json.loads((run_dir / "checkpoints" / f"ckpt-{number}.json").read_text())["env_step"] == stop_step

    run = _Run(args, tmp_path, "finish")
    assert run.process.wait(timeout=180) == 0, _without_tf_noise(run.stderr())[-3000:]
    assert f"restored checkpoint {number} (env step {stop_step})" in run.stderr()
    assert f"env_steps={total}" in run.stdout_path.read_text()


def test_a_filesystem_without_flock_trains_unlocked_with_a_warning(tmp_path, monkeypatch):
    """ENOLCK (an NFS mount without lockd) is no reason to refuse to train: no lock, one warning naming why."""
    import fcntl

    from absl import logging as absl_logging

    def no_locks(handle, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    warnings = []
    monkeypatch.setattr(fcntl, "flock", no_locks)
    monkeypatch.setattr(absl_logging, "warning", lambda message, *args: warnings.append(message % args))
    assert runs.lock_for_training(tmp_path) is None
    assert len(warnings) == 1 and os.strerror(errno.ENOLCK) in warnings[0], warnings
    assert "training without the run-dir lock" in warnings[0]


def test_a_second_process_cannot_train_into_a_run_dir_in_use(tmp_path):
    """The second launch exits 2 naming the first one's pid and writes nothing; once the first is killed
    (SIGKILL: no cleanup), the same command resumes at once."""
    run_dir = tmp_path / "run"
    args = ["--agent=dqn", "--env=CartPole-v1", "--preset=none", "--seed=4", f"--run_dir={run_dir}",
            *[f"--hp={hp}" for hp in FAULT_HP]]
    first = _paused_run(args, tmp_path, "first", "checkpoint.arrays_written:2")
    before = {p.name: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}

    second = _Run(args, tmp_path, "second")
    assert second.process.wait(timeout=120) == 2
    message = _without_tf_noise(second.stderr()).strip().splitlines()[-1]
    assert f"is in use by another training process (pid {first.process.pid})" in message, message
    assert {p.name: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before

    first.kill()
    third = _Run(args, tmp_path, "third")
    assert third.process.wait(timeout=180) == 0, _without_tf_noise(third.stderr())[-3000:]
    assert "restored checkpoint 1" in third.stderr()

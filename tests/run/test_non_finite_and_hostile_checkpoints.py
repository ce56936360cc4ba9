"""Hardening of checkpoints, export and replay (issue 28): non-finite numbers in checkpoints, SavedModels and
replay data; Box bounds whose span overflows; a hostile `checkpoints/checkpoint` index; a `checkpoints` path
that is a file."""

import concurrent.futures
import json
import logging
import os
import pathlib
import re
import shutil
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from tfrl import envs
from tfrl.agents.dqn import policy as dqn_policy
from tfrl.agents.dqn.config import DQNConfig
from tfrl.agents.dqn.learning import DQNLearner
from tfrl.errors import UsageError
from tfrl.hardware.runtime import Runtime, RuntimeOptions
from tfrl.models import export, normalization, serving
from tfrl.models.numerics import NonFiniteError
from tfrl.replay import UniformReplay
from tfrl.replay.frames import FrameStackReplay
from tfrl.replay.prioritized import PrioritizedReplay
from tfrl.run import checkpoints
from tfrl.run.checkpoints import Checkpointer

import custom_envs

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
# scripts/train.py, or the module it is moving to
TRAIN = ([str(REPO_ROOT / "scripts" / "train.py")] if (REPO_ROOT / "scripts" / "train.py").exists()
         else ["-m", "tfrl.commands.train"])
_TF_NOISE = re.compile(r"^(WARNING: All log messages before absl::InitializeLog\(\)|[IWE]0000 00:00:|"
                       r"To enable the following instructions:)")


# --- 1. non-finite variables in checkpoints, exports and loaded SavedModels ----------------------

def _four_checkpoints(tmp_path):
    """Checkpoints 1..4 of an observation normalization layer (mean = the number); keep=3 leaves 2, 3, 4."""
    layer = normalization.ObservationNormalization((3,), clip=10.0)
    checkpointer = Checkpointer(tmp_path, {"obs_normalization": layer}, keep=3)
    for number in range(1, 5):
        layer.mean.assign(np.full(3, float(number)))
        checkpointer.save(number * 100, {"at": number * 100}, {"a": np.arange(number, dtype=np.float32)})
    return layer


def test_a_checkpoint_holding_a_nan_variable_is_unusable_and_the_previous_one_is_used(tmp_path, caplog):
    layer = _four_checkpoints(tmp_path)
    # Checkpoint 4's TF files rewritten with a NaN mean (as an older tfrl wrote them): its JSON still matches.
    layer.mean.assign([0.0, np.nan, 0.0])
    tf.train.Checkpoint(obs_normalization=layer).write(str(tmp_path / "checkpoints" / "ckpt-4"))
    with caplog.at_level(logging.WARNING):
        restored = Checkpointer(tmp_path, {"obs_normalization": layer}).restore_latest()
    assert restored.number == 3 and np.array_equal(layer.mean.numpy(), [3.0, 3.0, 3.0])
    assert any("checkpoint 4 is unusable" in r.getMessage() and "obs_normalization/mean" in r.getMessage()
               and "NaN or Inf" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
    with pytest.raises(checkpoints.CheckpointError, match=r"checkpoint 4 is unusable: .*obs_normalization/mean"):
        Checkpointer(tmp_path, {"obs_normalization": layer}).restore(4)


def test_a_checkpoint_holding_nan_arrays_is_unusable(tmp_path, caplog):
    layer = _four_checkpoints(tmp_path)
    directory = tmp_path / "checkpoints"
    np.savez_compressed(directory / "ckpt-4.npz", a=np.array([0, np.nan, 2, 3], np.float32))
    record = json.loads((directory / "ckpt-4.json").read_text())  # as an older tfrl wrote it, checksums right
    record["arrays_sha256"] = checkpoints._file_sha256(directory / "ckpt-4.npz")
    record["checksum"] = checkpoints._record_checksum(record)
    (directory / "ckpt-4.json").write_text(json.dumps(record))
    with caplog.at_level(logging.WARNING):
        assert Checkpointer(tmp_path, {"obs_normalization": layer}).restore_latest().number == 3
    assert any("checkpoint 4 is unusable" in r.getMessage() and "'a'" in r.getMessage()
               and "NaN or Inf" in r.getMessage() for r in caplog.records)


def test_the_checkpointer_refuses_to_save_nan_arrays_or_variables_and_keeps_the_newest_clean(tmp_path):
    layer = _four_checkpoints(tmp_path)
    directory = tmp_path / "checkpoints"
    before = {p.name: p.read_bytes() for p in directory.iterdir() if p.name.startswith("ckpt-")}
    checkpointer = Checkpointer(tmp_path, {"obs_normalization": layer}, keep=3)
    with pytest.raises(NonFiniteError, match=r"non-finite array 'replay/obs' in the state to checkpoint"):
        checkpointer.save(500, {"at": 500}, {"replay/obs": np.array([[0.0, np.inf]], np.float32)})
    layer.mean.assign([np.nan, 0.0, 0.0])
    with pytest.raises(NonFiniteError, match=r"non-finite variable 'obs_normalization/mean' in the state to "
                                             r"checkpoint"):
        checkpointer.save(600, {"at": 600}, {"a": np.zeros(2, np.float32)})
    after = {p.name: p.read_bytes() for p in directory.iterdir() if p.name.startswith("ckpt-")}
    assert after == before  # nothing of the refused checkpoints is left; checkpoints 2..4 untouched
    assert checkpointer.numbers() == [4, 3, 2]


INFO = envs.EnvInfo(env_id="CartPole-v1", obs_shape=(4,), num_actions=2)


def _policy_with_a_nan_weight():
    config = DQNConfig(hidden_sizes=(8, 8), batch_size=8)
    learner = DQNLearner(config, INFO, Runtime(options=RuntimeOptions(), device_name="/device:CPU:0"))
    policy = dqn_policy.serving_policy(config, INFO, q_network=learner.online)
    bias = next(v for v in policy.model.variables if v.path == "torso_1/bias")
    bias.assign(np.where(np.arange(bias.shape[0]) == 3, np.nan, bias.numpy()))
    return policy


def test_export_refuses_a_policy_whose_variables_are_not_finite(tmp_path):
    policy = _policy_with_a_nan_weight()
    with pytest.raises(UsageError, match=r"^refusing to export .*variable 'torso_1/bias' holds NaN or Inf") as raised:
        export.export_saved_model(policy, INFO.obs_shape, tmp_path, "m", {"agent": "dqn"})
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "m").exists()  # refused before anything is written


class _NaNPolicy(tf.Module):
    def __init__(self):
        super().__init__()
        self.weights = tf.Variable([[1.0, np.nan]] * 4, name="policy_weights")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="observation")])
    def serve(self, observation):
        return {"action": tf.argmax(observation @ self.weights, axis=-1)}


def test_loading_a_saved_model_whose_variables_are_not_finite_is_refused(tmp_path):
    module = _NaNPolicy()
    tf.saved_model.save(module, str(tmp_path / "1"), signatures={"serving_default": module.serve})
    with pytest.raises(UsageError, match=r"variable 'policy_weights' holds NaN or Inf") as raised:
        serving.load(tmp_path / "1")
    assert "\n" not in str(raised.value) and str(tmp_path / "1") in str(raised.value)


def test_the_model_server_refuses_a_saved_model_whose_variables_are_not_finite(tmp_path):
    from tfrl.model_server import versions

    module = _NaNPolicy()
    tf.saved_model.save(module, str(tmp_path / "1"), signatures={"serving_default": module.serve})
    with pytest.raises(ValueError, match=r"variable 'policy_weights' holds NaN or Inf"):
        versions.load_saved_model(tmp_path / "1")
    env = dict(os.environ)
    env.pop("KERAS_BACKEND", None)
    completed = subprocess.run([sys.executable, "-m", "tfrl", "serve", "--model_name=m",
                                f"--model_base_path={tmp_path}", "--rest_api_port=0"], capture_output=True, text=True,
                               env=env, timeout=120)
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert "no version under" in completed.stderr and "holds NaN or Inf" in completed.stderr


# --- 2. non-finite transitions are refused as they enter the replay -------------------------------

def _transitions(n=3, obs_dim=2, float_actions=False):
    obs = np.zeros((n, obs_dim), np.float32)
    action = np.zeros((n, 1), np.float32) if float_actions else np.zeros(n, np.int32)
    return {"obs": obs, "action": action, "reward": np.zeros(n, np.float32),
            "discount": np.full(n, 0.99, np.float32), "next_obs": obs.copy()}


_BAD_FIELDS = [("obs", np.nan, "observation"), ("next_obs", np.inf, "next observation"),
               ("reward", -np.inf, "reward"), ("action", np.nan, "action")]


@pytest.mark.parametrize("kind, field, value, named", [
    *[("uniform", *bad) for bad in _BAD_FIELDS],  # SAC's: float actions
    *[("prioritized", *bad) for bad in _BAD_FIELDS if bad[0] != "action"],  # DQN's: integer actions, never NaN
])
def test_a_non_finite_transition_is_refused_as_it_enters_the_replay(kind, field, value, named):
    if kind == "uniform":
        replay = UniformReplay(16, (2,), seed=0, action_shape=(1,), action_dtype=np.float32)
    else:
        replay = PrioritizedReplay(16, (2,), seed=0, alpha=0.6, epsilon=1e-6)
    batch = _transitions(float_actions=kind == "uniform")
    replay.add(**batch)
    batch[field] = batch[field].copy()
    batch[field][1] = value
    with pytest.raises(NonFiniteError, match=rf"^non-finite {named} entering the replay"):
        replay.add(**batch)
    assert replay.size == 3 and np.isfinite(replay.obs).all() and np.isfinite(replay.reward).all()
    if kind == "prioritized":
        assert replay.probabilities().sum() == pytest.approx(1.0) and len(replay.probabilities()) == 3


def test_a_finite_float64_value_that_overflows_float32_is_refused():
    replay = UniformReplay(16, (2,), seed=0)
    batch = _transitions()
    batch["obs"] = np.array([[1e300, 0.0]] * 3)  # float64: stored as float32, it would be inf
    with pytest.raises(NonFiniteError, match="non-finite observation"):
        replay.add(**batch)


def test_the_frame_replay_refuses_a_non_finite_reward_and_takes_uint8_frames_unchecked():
    replay = FrameStackReplay(UniformReplay(64, (), seed=0, obs_dtype=np.int64), (4, 4), stack=2, num_envs=1,
                              n_step=1)
    refs = np.array([0])
    replay.add(refs, np.array([1], np.int32), np.array([0.5], np.float32), np.array([0.99], np.float32), refs)
    with pytest.raises(NonFiniteError, match="non-finite reward entering the replay"):
        replay.add(refs, np.array([1], np.int32), np.array([np.nan], np.float32), np.array([0.99], np.float32), refs)
    assert replay.size == 1


def test_the_error_of_a_non_finite_transition_names_the_env_step_and_the_newest_checkpoint():
    error = NonFiniteError.entering_replay(["next observation"]).at(250, (200, 2))
    assert str(error) == ("non-finite next observation entering the replay at env step 250; stopped without "
                          "saving: checkpoint 2 (env step 200) is the newest")
    assert error.exit_code == 3 and error.env_step == 250


# --- 3. Box action bounds whose span overflows float32 --------------------------------------------

def test_box_action_bounds_whose_span_overflows_float32_are_refused():
    with pytest.raises(envs.EnvIdError, match=r"span .*overflows float32.*RescaleAction"):
        envs.make_vector_env("custom_envs:HugeBoundsCorridor-v0", 1, seed=0)
    # A span just inside float32 is accepted.
    env = gym.vector.SyncVectorEnv([lambda: custom_envs.ContinuousCorridor(-1.5e38, 1.5e38)])
    env.obs_dtype, env.frame_stack = np.dtype(np.float32), 0
    assert envs.env_info(env, "wide").continuous
    env.close()


# --- 4. a crafted `checkpoints/checkpoint` index ---------------------------------------------------

def _index(directory: pathlib.Path, paths: list[str]) -> None:
    """A `checkpoint` index listing `paths`, oldest first, with the timestamps that make TF's CheckpointManager
    consider them for deletion."""
    lines = [f'model_checkpoint_path: "{paths[-1]}"'] + [f'all_model_checkpoint_paths: "{p}"' for p in paths]
    lines += [f"all_model_checkpoint_timestamps: {1000.0 + i}" for i in range(len(paths))]
    lines.append("last_preserved_timestamp: 1.0")
    (directory / "checkpoint").write_text("\n".join(lines) + "\n")


def _saves(tmp_path, layer, *env_steps):
    checkpointer = Checkpointer(tmp_path, {"obs_normalization": layer}, keep=3)
    return [checkpointer.save(step, {"at": step}) for step in env_steps]


def test_an_index_listing_a_path_outside_the_run_deletes_nothing_there(tmp_path):
    layer = _four_checkpoints(tmp_path / "run")
    outside = tmp_path / "outside"
    outside.mkdir()
    victims = [outside / "victim.index", outside / "victim.data-00000-of-00001"]
    for victim in victims:
        victim.write_text("not yours\n")
    directory = tmp_path / "run" / "checkpoints"
    _index(directory, [str(outside / "victim"), "ckpt-2", "ckpt-3", "ckpt-4"])
    _saves(tmp_path / "run", layer, 500, 600)
    assert all(victim.read_text() == "not yours\n" for victim in victims)
    assert checkpoints.complete_numbers(directory) == [6, 5, 4]
    assert tf.train.latest_checkpoint(str(directory)) == str(directory / "ckpt-6")  # the index is ours again


def test_an_index_listing_checkpoints_newest_first_deletes_no_kept_checkpoint(tmp_path):
    layer = _four_checkpoints(tmp_path)
    directory = tmp_path / "checkpoints"
    _index(directory, ["ckpt-4", "ckpt-3", "ckpt-2"])
    assert _saves(tmp_path, layer, 500) == [5]
    for number in (5, 4, 3):
        assert (directory / f"ckpt-{number}.index").exists(), number
        assert Checkpointer(tmp_path, {"obs_normalization": layer}).restore(number).env_step == number * 100


def test_an_index_that_is_not_utf8_is_ignored(tmp_path):
    layer = _four_checkpoints(tmp_path)
    directory = tmp_path / "checkpoints"
    (directory / "checkpoint").write_bytes(b'model_checkpoint_path: "ckpt-\xff\xfe"\n\x80\x81')
    assert _saves(tmp_path, layer, 500, 600) == [5, 6]
    assert checkpoints.complete_numbers(directory) == [6, 5, 4]
    assert Checkpointer(tmp_path, {"obs_normalization": layer}).restore_latest().number == 6


def test_a_symlink_named_like_a_checkpoint_is_removed_but_not_what_it_points_to(tmp_path):
    layer = _four_checkpoints(tmp_path / "run")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept.txt").write_text("not yours\n")
    directory = tmp_path / "run" / "checkpoints"
    (directory / "ckpt-9_temp").symlink_to(outside, target_is_directory=True)
    (directory / "ckpt-9.index").symlink_to(outside / "kept.txt")
    _saves(tmp_path / "run", layer, 500)
    assert (outside / "kept.txt").read_text() == "not yours\n"
    assert not (directory / "ckpt-9_temp").is_symlink() and not (directory / "ckpt-9.index").is_symlink()


# --- 5. a `checkpoints` path that is a regular file -----------------------------------------------

def test_a_checkpoints_path_that_is_a_file_is_one_clear_error(tmp_path):
    (tmp_path / "checkpoints").write_text("not a directory\n")
    pattern = rf"{re.escape(str(tmp_path / 'checkpoints'))} is not a directory"
    with pytest.raises(UsageError, match=pattern):
        checkpoints.latest_checkpoint_number(tmp_path)
    checkpointer = Checkpointer(tmp_path, {"v": tf.Variable(1.0)})
    with pytest.raises(UsageError, match=pattern):
        checkpointer.restore_latest()
    with pytest.raises(UsageError, match=pattern):
        checkpointer.save(100, {})
    assert (tmp_path / "checkpoints").read_text() == "not a directory\n"


# --- end to end: scripts/train.py ------------------------------------------------------------------

SAC_ARGS = [
    "--agent=sac", "--env=custom_envs:NaNCorridor-v0", "--preset=none", "--seed=0", "--export_base_path=",
    "--num_envs=1", "--hp=total_env_steps=1000", "--hp=learning_starts=900", "--hp=hidden_sizes=16,16",
    "--hp=batch_size=16", "--hp=replay_capacity=2000", "--hp=checkpoint_interval=100", "--hp=log_interval=100",
    "--hp=eval_interval=0", "--hp=final_eval_episodes=2",
]


def _launch(args, run_dir, nan_at_step=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "tests"), str(REPO_ROOT)]))  # custom_envs, this tfrl
    env.pop("KERAS_BACKEND", None)
    env.pop(custom_envs.NAN_AT_STEP_VARIABLE, None)
    if nan_at_step is not None:
        env[custom_envs.NAN_AT_STEP_VARIABLE] = str(nan_at_step)
    return subprocess.run([sys.executable, *TRAIN, *args, f"--run_dir={run_dir}"], capture_output=True, text=True,
                          cwd=REPO_ROOT, env=env, timeout=300)


def _error_lines(completed):
    return [line for line in completed.stderr.splitlines() if line.strip() and not _TF_NOISE.match(line)]


def _finite_checkpoint(checkpoint_dir: pathlib.Path, number: int) -> bool:
    reader = tf.train.load_checkpoint(str(checkpoint_dir / f"ckpt-{number}"))
    tensors = [reader.get_tensor(key) for key in reader.get_variable_to_shape_map()]
    with np.load(checkpoint_dir / f"ckpt-{number}.npz") as npz:
        tensors += [npz[name] for name in npz.files]
    return all(np.isfinite(t).all() for t in tensors if np.asarray(t).dtype.kind == "f")


def _files(directory: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file() and p.name != ".lock"}


@pytest.fixture(scope="module")
def nan_run(tmp_path_factory):
    """A SAC run whose env returns a NaN observation at env step 250, before learning starts (900); then, two
    at a time, the same command resumed on a clean env, and on a copy whose `checkpoints` became a file."""
    run_dir = tmp_path_factory.mktemp("nan") / "run"
    first = _launch(SAC_ARGS, run_dir, nan_at_step=250)
    numbers = checkpoints.complete_numbers(run_dir / "checkpoints")  # before the resume adds more
    first_checkpoints = {number: _finite_checkpoint(run_dir / "checkpoints", number) for number in numbers}
    file_run = run_dir.parent / "file_run"
    shutil.copytree(run_dir, file_run)
    shutil.rmtree(file_run / "checkpoints")
    (file_run / "checkpoints").write_text("not a directory\n")
    before = _files(file_run)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        resumed = pool.submit(_launch, ["--resume"], run_dir)
        on_file = pool.submit(_launch, SAC_ARGS, file_run)
        return {"first": first, "first_checkpoints": first_checkpoints, "run_dir": run_dir,
                "resumed": resumed.result(), "on_file": on_file.result(), "file_run": file_run,
                "file_run_before": before}


def test_nan_observations_before_learning_starts_stop_the_run_and_the_newest_checkpoint_is_clean(nan_run):
    first = nan_run["first"]
    assert first.returncode == 3, first.stderr[-3000:]
    assert "Traceback" not in first.stderr
    assert _error_lines(first)[-1].endswith(
        " error: non-finite next observation entering the replay at env step 250; stopped without "
        "saving: checkpoint 2 (env step 200) is the newest")
    assert nan_run["first_checkpoints"] == {2: True, 1: True}  # numbers, and whether all their floats are finite


def test_the_stopped_run_resumes_from_its_clean_checkpoint_on_a_clean_env(nan_run):
    resumed = nan_run["resumed"]
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "restored checkpoint 2 (env step 200)" in resumed.stderr
    result = json.loads((nan_run["run_dir"] / "result.json").read_text())
    assert result["env_step"] == 1000 and np.isfinite(result["return_mean"]), result


def test_a_run_whose_checkpoints_path_is_a_file_is_one_line_and_writes_nothing(nan_run):
    on_file, file_run = nan_run["on_file"], nan_run["file_run"]
    assert on_file.returncode == 2, on_file.stderr[-3000:]
    assert "Traceback" not in on_file.stderr
    # tfrl.run.checkpoints says so, or the launcher before it
    assert re.fullmatch(rf"\S+: error: {re.escape(str(file_run / 'checkpoints'))} is not a directory: .*",
                        _error_lines(on_file)[-1]), _error_lines(on_file)[-1]
    assert _files(file_run) == nan_run["file_run_before"]  # nothing written (.lock aside)

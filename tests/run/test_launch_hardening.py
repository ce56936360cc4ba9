"""Hardening round three, the launcher's side: hand-edited config.json, envs that go wrong mid-run, absurd
thread counts, screen render modes, a checkpoints/ that is a file, and garbage in metrics.jsonl. Each is one
clear line and a non-zero exit, with nothing written or lost."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

import tfrl
from tfrl.errors import UsageError
from tfrl.run import metrics, runs

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests"))
import bad_envs  # noqa: E402  (registers BadFrame-v0)

DQN = {"total_env_steps": 600, "hidden_sizes": "16", "learning_starts": 200, "batch_size": 32, "eval_interval": 0,
       "final_eval_episodes": 2, "checkpoint_interval": 300, "log_interval": 300}


def _tfrl(*args, cwd):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "tests"))
    env.pop("KERAS_BACKEND", None)
    return subprocess.run([sys.executable, "-m", "tfrl", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ": error: " in line]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    run = tfrl.train("dqn", "CartPole-v1", preset="none", hp=DQN, run_dir=tmp_path_factory.mktemp("r") / "run",
                     verbose=0)
    return run.run_dir


@pytest.mark.parametrize("edit, message", [
    (lambda text: text.replace('"agent": "dqn"', '"xla": true, "agent": "dqn"'), "unknown key 'xla'"),
    (lambda text: text.replace('"seed": 0', '"seed": 0, "seed": 5'), "key 'seed' is given twice"),
    (lambda text: text.replace('"num_actions": 2', '"num_actions": "two"'), "'env_info' is not a valid record"),
    (lambda text: text.replace('"obs_shape": [\n      4\n    ]', '"obs_shape": "abcd"'), "'env_info' is not a valid"),
    (lambda text: text.replace('"env_kwargs": {}', '"env_kwargs": [1]'), "'env_kwargs' must be an object"),
    (lambda text: text.replace('"gamma": 0.99', '"gamma": NaN'), "NaN is not a number JSON allows"),
])
def test_a_hand_edited_config_json_is_one_line_for_train_and_evaluate(finished_run, tmp_path, edit, message):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    text = (finished_run / "config.json").read_text()
    edited = edit(text)
    assert edited != text, "the edit must change the file"
    (run_dir / "config.json").write_text(edited)
    with pytest.raises(UsageError, match=message):
        runs.read_config(run_dir)
    for args in (["train", "--resume", f"--run_dir={run_dir}"], ["evaluate", f"--run_dir={run_dir}"]):
        completed = _tfrl(*args, cwd=tmp_path)
        assert completed.returncode == 2 and "Traceback" not in completed.stderr, completed.stderr[-2000:]
        assert len(_error_lines(completed.stderr)) == 1 and message in completed.stderr
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.json"]


@pytest.mark.parametrize("kind", ["shape", "dtype"])
def test_an_image_env_that_returns_a_wrong_frame_mid_episode_stops_with_one_line(tmp_path, kind):
    completed = _tfrl("train", "--agent=dqn", "--env=bad_envs:BadFrame-v0", f"--env_kwargs=kind={kind}",
                      "--preset=none", "--hp=total_env_steps=200", "--hp=learning_starts=100",
                      "--hp=replay_capacity=1000", "--hp=eval_interval=0", "--hp=checkpoint_interval=20",
                      f"--run_dir={tmp_path / 'run'}", cwd=tmp_path)
    assert completed.returncode == 1 and "Traceback" not in completed.stderr, completed.stderr[-3000:]
    (line,) = _error_lines(completed.stderr)
    assert f"the env failed at env step {bad_envs.BAD_STEP - 1} (" in line
    assert "training stopped: checkpoint 1 (env step 20) is the newest" in line


@pytest.mark.parametrize("agent, kind, mask, message", [
    ("ppo", "nan_mask", True, "its action_mask holds values other than 0 and 1 (dtype float32, e.g. [1.0, nan, 0.0])"),
    ("dqn", "nan_mask", True, "its action_mask holds values other than 0 and 1"),
    ("ppo", "new_key", True, "its observation has the keys ['action_mask', 'new', 'x'], its observation space "
                             "['action_mask', 'x']"),
    ("dqn", "new_key", False, "its observation has the keys ['new', 'x'], its observation space ['x']"),  # as given
])
def test_a_dict_env_whose_mask_or_keys_go_wrong_mid_run_stops_training(tmp_path, agent, kind, mask, message):
    from tfrl.errors import RunError

    hp = {"total_env_steps": 256, "eval_interval": 0, "final_eval_episodes": 1, "hidden_sizes": [8]}
    hp.update({"num_envs": 1, "rollout_length": 32, "batch_size": 32} if agent == "ppo" else {"learning_starts": 16})
    with pytest.raises(RunError, match=r"the env failed at env step \d+ \(ValueError: " + re.escape(message)):
        tfrl.train(agent, "bad_envs:ChangingDict-v0", env_kwargs={"kind": kind, "mask": mask}, preset="none", hp=hp,
                   run_dir=tmp_path / "run", export=False, verbose=0)
    assert not (tmp_path / "run" / "result.json").exists()


@pytest.mark.parametrize("args, message", [
    (["--intra_op_threads=100000000000"], "--intra_op_threads: must be in [0, 4096]"),
    (["--inter_op_threads=5000"], "--inter_op_threads: must be in [0, 4096]"),
    (["--env_kwargs=render_mode=human"], "render_mode='human' would open a window"),
])
def test_absurd_threads_and_screen_render_modes_are_refused_before_writing(tmp_path, args, message):
    completed = _tfrl("train", "--agent=dqn", "--env=CartPole-v1", *args, cwd=tmp_path)
    assert completed.returncode == 2 and message in completed.stderr, completed.stderr[-2000:]
    assert len(_error_lines(completed.stderr)) == 1 and list(tmp_path.iterdir()) == []


def test_a_checkpoints_path_that_is_a_file_is_refused_and_nothing_is_lost(finished_run, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text((finished_run / "config.json").read_text())
    (run_dir / "checkpoints").write_text("a file where the checkpoints belong")
    completed = _tfrl("train", "--resume", f"--run_dir={run_dir}", cwd=tmp_path)
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert f"{run_dir / 'checkpoints'} is not a directory" in completed.stderr
    assert (run_dir / "checkpoints").read_text() == "a file where the checkpoints belong"


def test_garbage_in_metrics_jsonl_is_skipped_by_the_reader_and_the_plot(finished_run, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text((finished_run / "config.json").read_text())
    good = (finished_run / "metrics.jsonl").read_bytes()
    garbage = b"\xff\xfe\x00binary\n5\n[1, 2]\n{\"kind\": \"eval\", \"env_step\": \"x\"}\n{\"kind\": \"eval\"}\n"
    (run_dir / "metrics.jsonl").write_bytes(garbage + good + b"\x00\x01\x02")
    assert metrics.read_metrics(run_dir / "metrics.jsonl") == metrics.read_metrics(finished_run / "metrics.jsonl")
    completed = _tfrl("plot", f"--runs={run_dir}", f"--out={tmp_path / 'curve.png'}", cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert (tmp_path / "curve.png").stat().st_size > 1000
    assert "6 line(s) are not metrics records and were skipped" in completed.stderr

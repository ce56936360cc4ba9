"""Tests for scripts/evaluate.py (with a GIF) and scripts/plot.py, run as subprocesses like a user would."""

import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from tfrl.agents.dqn import networks as dqn_networks, policy as dqn_policy
from tfrl.agents.dqn.config import DQNConfig
from tfrl.envs import EnvInfo
from tfrl.models import export

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def _run_scripts(commands, cwd):
    """Runs [script, *args] commands in parallel (the two cores import TensorFlow side by side)."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    processes = [subprocess.Popen([sys.executable, str(REPO_ROOT / "scripts" / script), *args], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env, cwd=cwd) for script, *args in commands]
    results = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=240)
        results.append((process.returncode, stdout, stderr))
    return results


def _export_untrained_cartpole_policy(base_path: pathlib.Path) -> pathlib.Path:
    info = EnvInfo(env_id="CartPole-v1", obs_shape=(4,), num_actions=2)
    config = DQNConfig(hidden_sizes=(8,))
    q_network = dqn_networks.q_network(info.obs_shape, info.num_actions, config.hidden_sizes)
    return export.export_saved_model(dqn_policy.serving_policy(config, info, q_network), info.obs_shape, base_path,
                                     "cartpole", {"agent": "dqn", "env_id": "CartPole-v1"})


def test_evaluate_a_saved_model_records_a_gif_and_rejects_bad_input(tmp_path):
    pytest.importorskip("imageio", reason="the video extra (imageio) is not installed")
    from PIL import Image

    saved_model = _export_untrained_cartpole_policy(tmp_path / "saved_models")
    gif = tmp_path / "episode.gif"
    ok, *errors = _run_scripts([
        ("evaluate.py", f"--saved_model={saved_model}", "--episodes=3", "--seed=4", f"--video={gif}"),
        ("evaluate.py", "--saved_model=no/such/dir"),
        ("evaluate.py", f"--saved_model={tmp_path}"),  # a directory, but no SavedModel
        ("evaluate.py", f"--saved_model={saved_model}", "--video=episode.avi"),
        ("evaluate.py", f"--saved_model={saved_model}", f"--run_dir={tmp_path}"),
        ("evaluate.py", "--episodes=many"),
    ], cwd=tmp_path)

    returncode, stdout, stderr = ok
    assert returncode == 0, stderr[-3000:]
    assert re.search(r"^3 episodes of CartPole-v1 \(seed 4\): return [\d.]+ \+/- [\d.]+, length [\d.]+ \+/- [\d.]+$",
                     stdout, re.M), stdout
    match = re.search(r"video: .*episode\.gif \(one episode, seed 4: return ([\d.]+), length (\d+)\)", stdout)
    assert match, stdout
    with Image.open(gif) as image:  # every 2nd frame of the episode, first and reset frame included
        # Pillow's GIF writer merges a frame identical to the one before it, so this is an upper bound.
        assert image.format == "GIF" and 2 <= image.n_frames <= int(match.group(2)) // 2 + 1
        assert image.size == (300, 200)  # half of gymnasium's 600x400

    expected = ["evaluate.py: error: --saved_model: directory no/such/dir does not exist",
                f"evaluate.py: error: {tmp_path} is not a SavedModel directory",
                "evaluate.py: error: --video: episode.avi must end in .gif or .mp4",
                "evaluate.py: error: give exactly one of --saved_model=DIR and --run_dir=DIR",
                "evaluate.py: error: flag --episodes=many"]
    for (returncode, _, stderr), want in zip(errors, expected):
        assert returncode == 2, stderr[-3000:]
        assert "Traceback" not in stderr
        assert stderr.strip().splitlines()[-1].startswith(want), stderr[-1000:]


def _fake_run(run_dir: pathlib.Path, seed: int, eval_returns: dict[int, float], config: dict | None) -> None:
    run_dir.mkdir(parents=True)
    lines = [{"kind": "train", "env_step": step, "loss": 1.0} for step in eval_returns]
    lines += [{"kind": "eval", "env_step": step, "return_mean": value} for step, value in eval_returns.items()]
    lines.sort(key=lambda r: r["env_step"])
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    if config is not None:
        (run_dir / "config.json").write_text(json.dumps({**config, "seed": seed}))


def test_plot_writes_a_png_of_two_seeds_and_rejects_bad_input(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra (matplotlib) is not installed")
    config = {"agent": "dqn", "env_id": "CartPole-v1", "preset": "dqn-cartpole", "hparams": {"learning_rate": 1e-3}}
    _fake_run(tmp_path / "runs" / "s0", 0, {1000: 10.0, 2000: 50.0, 3000: 120.0}, config)
    _fake_run(tmp_path / "runs" / "s1", 1, {1000: 12.0, 2000: 80.0, 3000: 200.0}, config)
    out = tmp_path / "curve.png"
    ok, *errors = _run_scripts([
        ("plot.py", "--runs=runs/s*", f"--out={out}"),
        ("plot.py", "--runs=runs/nope", "--out=x.png"),
        ("plot.py", "--runs=runs/s0", "--out=curve.svg"),
        ("plot.py", "--out=x.png"),
    ], cwd=tmp_path)

    returncode, stdout, stderr = ok
    assert returncode == 0, stderr[-3000:]
    assert "1 curve(s) from 2 run(s)" in stdout  # the two seeds of one config are one curve
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5_000

    expected = ["plot.py: error: --runs: runs/nope has no metrics.jsonl",
                "plot.py: error: --out: curve.svg must end in .png",
                "plot.py: error: --runs is required"]
    for (returncode, _, stderr), want in zip(errors, expected):
        assert returncode == 2, stderr[-3000:]
        assert "Traceback" not in stderr
        assert stderr.strip().splitlines()[-1].startswith(want), stderr[-1000:]


def test_frames_are_drawn_with_sdl_off_screen(monkeypatch):
    """On a headless machine SDL otherwise probes for a display and prints "XDG_RUNTIME_DIR is invalid or not
    set"; a driver chosen by the user stays."""
    from tfrl.run import evaluation

    monkeypatch.delenv("SDL_VIDEODRIVER", raising=False)
    monkeypatch.setenv("SDL_AUDIODRIVER", "alsa")
    frames = evaluation.render_episode(lambda obs: np.zeros(len(obs), np.int64), "CartPole-v1", seed=0)
    assert next(frames).shape == (400, 600, 3)
    assert os.environ["SDL_VIDEODRIVER"] == "dummy" and os.environ["SDL_AUDIODRIVER"] == "alsa"
    frames.close()


def test_runs_of_other_env_kwargs_are_other_curves(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra (matplotlib) is not installed")
    config = {"agent": "ppo", "env_id": "tfrl/MaskedPick-v0", "preset": "ppo-maskedpick", "hparams": {"n_epochs": 10}}
    curve = {1000: 10.0, 2000: 15.0}
    _fake_run(tmp_path / "runs" / "a0", 0, curve, {**config, "env_kwargs": {}})
    _fake_run(tmp_path / "runs" / "a1", 1, curve, {**config, "env_kwargs": {}})
    _fake_run(tmp_path / "runs" / "b0", 0, curve, {**config, "env_kwargs": {"mask_key": "legal"}})
    [(returncode, stdout, stderr)] = _run_scripts([("plot.py", "--runs=runs/*", "--out=curve.png")], cwd=tmp_path)
    assert returncode == 0, stderr[-3000:]
    assert "2 curve(s) from 3 run(s)" in stdout  # the two seeds of one env together, the other env apart


@pytest.mark.parametrize("command, flag", [("evaluate", "--episodes"), ("export", "--model_name"), ("plot", "--runs"),
                                           ("doctor", "--logical_cpus")])
def test_every_command_s_help_lists_its_own_flags(command, flag):
    completed = subprocess.run([sys.executable, "-m", "tfrl", command, "--help"], capture_output=True, text=True,
                               timeout=120, cwd=pathlib.Path(__file__).resolve().parents[2])
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "\nFlags:\n" in completed.stdout and f"\n  {flag}:" in completed.stdout, completed.stdout[:2000]
    assert "Try --helpfull" not in completed.stdout + completed.stderr

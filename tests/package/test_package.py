"""tfrl as a package: the wheel holds the presets and the commands, and trains from anywhere; the output of a
run (CLI and Python) holds tfrl's lines only, not TensorFlow's or XLA's start-up noise.

The wheel test builds the wheel of this checkout, installs it (without its dependencies) into a fresh venv
that borrows this venv's site-packages for TensorFlow and the rest, and trains from another directory, so
that nothing of the checkout can be imported by accident.
"""

import json
import os
import pathlib
import re
import shutil
import site
import subprocess
import sys
import zipfile

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
TFRL_LINE = re.compile(r"^[IWEF] \d\d:\d\d:\d\d ")  # tfrl.hardware.quiet_logs.SHORT_FORMAT
NATIVE_LINE = re.compile(r"^[IWEF]\d{4} ")  # glog's format, TF's C++ side
XLA_NOISE = ("service.cc", "dump_mlir_util", "device_compiler", "XLA service", "StreamExecutor")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    """The wheel, built from a copy of the package's sources (setuptools builds in the source tree, and would leave
    build/ behind in the checkout, whose stale files a later build would package)."""
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, source / name)
    shutil.copytree(REPO_ROOT / "tfrl", source / "tfrl", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(source)], check=True, capture_output=True, timeout=300)
    (wheel_file,) = out.glob("tfrl-*.whl")
    return wheel_file


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> pathlib.Path:
    """A fresh venv with the wheel installed; TensorFlow and the other dependencies come from this venv."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True, timeout=300)
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # A path line in a .pth file is appended to sys.path after the venv's own site-packages; the .pth files
    # inside it (this checkout's editable install) are not run, so the checkout's tfrl stays out of reach.
    (pathlib.Path(purelib) / "borrowed.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return venv


def test_the_wheel_holds_the_presets_and_the_commands(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(archive.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    presets = {n for n in names if n.startswith("tfrl/presets/") and n.endswith(".json")}
    assert "tfrl/presets/dqn-lunarlander.json" in presets and len(presets) >= 20
    assert "tfrl = tfrl.commands:main" in entry_points and "tfrl-serve = tfrl.commands.serve:run" in entry_points
    assert {f"tfrl/commands/{c}.py" for c in ("train", "evaluate", "export", "doctor", "plot")} <= names


def test_an_installed_wheel_trains_with_a_preset_from_another_directory(installed, tmp_path):
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "KERAS_BACKEND")}
    where = subprocess.run([str(installed / "bin" / "python"), "-c", "import tfrl; print(tfrl.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(installed)), where  # the wheel's tfrl, not the checkout's
    args = ["train", "--agent=dqn", "--env=CartPole-v1", "--hp=total_env_steps=1500", "--hp=learning_starts=500",
            "--hp=eval_interval=750", "--hp=eval_episodes=1", "--hp=final_eval_episodes=2", "--hp=hidden_sizes=16"]
    completed = subprocess.run([str(installed / "bin" / "tfrl"), *args], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    config = json.loads((run_dir / "config.json").read_text())
    assert config["preset"] == "dqn-cartpole" and config["hparams"]["batch_size"] == 64  # the preset's, from the wheel
    assert (run_dir / "result.json").is_file() and "exported:" in completed.stdout
    # python -m tfrl and the Python API find the presets too.
    code = ("import tfrl; run = tfrl.train('ppo', 'CartPole-v1', hp={'total_env_steps': 512, "
            "'eval_interval': 256, 'eval_episodes': 1, 'final_eval_episodes': 2}, run_dir='py-run', verbose=0); print(run.result['kind'])")
    api = subprocess.run([str(installed / "bin" / "python"), "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert api.returncode == 0 and api.stdout.strip() == "final_eval", api.stderr[-3000:]
    assert json.loads((tmp_path / "py-run" / "config.json").read_text())["preset"] == "ppo-cartpole"
    module = subprocess.run([str(installed / "bin" / "python"), "-m", "tfrl", "--help"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert module.returncode == 0 and all(c in module.stdout for c in ("train", "evaluate", "export", "serve",
                                                                          "doctor", "plot"))


def _noise(stderr: str) -> list[str]:
    """The lines of stderr that are not tfrl's own log lines."""
    return [line for line in stderr.splitlines() if line.strip() and not TFRL_LINE.match(line)]


def test_the_headline_run_shows_tfrl_lines_only_xla_start_up_included(tmp_path):
    """The headline preset (XLA on) for its first seconds: past learning_starts, so XLA compiles the train step."""
    env = {key: value for key, value in os.environ.items() if key not in ("TF_CPP_MIN_LOG_LEVEL", "KERAS_BACKEND")}
    completed = subprocess.run([sys.executable, "-m", "tfrl", "train", "--agent=dqn", "--env=LunarLander-v2",
                                "--hp=total_env_steps=5600", "--hp=keep_best_policy=false", "--hp=eval_interval=0",
                                "--hp=final_eval_episodes=1", f"--run_dir={tmp_path / 'run'}"],
                               cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "XLA: on" in completed.stderr and "gradient_steps" in (tmp_path / "run" / "metrics.jsonl").read_text()
    assert _noise(completed.stderr) == [], completed.stderr
    assert not any(word in completed.stderr for word in XLA_NOISE)
    assert all(len(line) <= 80 for line in completed.stderr.splitlines() if "tfrl runtime" in line or "  " in line[11:13])


def test_a_python_run_logs_like_the_cli_once_and_without_tensorflow_noise(tmp_path):
    code = ("import tfrl; tfrl.train('dqn', 'CartPole-v1', hp={'total_env_steps': 1200, 'learning_starts': 400, "
            "'eval_interval': 0, 'keep_best_policy': False, 'final_eval_episodes': 2, 'log_interval': 400}, "
            "run_dir='run', "
            "runtime=tfrl.RuntimeOptions(xla=True))")
    env = {key: value for key, value in os.environ.items() if key not in ("TF_CPP_MIN_LOG_LEVEL", "KERAS_BACKEND")}
    completed = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                               timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert _noise(completed.stderr) == [], completed.stderr
    assert completed.stderr.count("tfrl runtime:") == 1
    assert re.search(r"\[train\] env_step=400 ", completed.stderr) and "[final_eval]" in completed.stderr
    quiet = subprocess.run([sys.executable, "-c", code.replace("run_dir='run'", "run_dir='run2', verbose=0")],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert quiet.returncode == 0 and quiet.stderr.strip() == "", quiet.stderr[-3000:]


def test_the_doctor_shows_no_native_start_up_lines(tmp_path):
    env = {key: value for key, value in os.environ.items() if key not in ("TF_CPP_MIN_LOG_LEVEL", "KERAS_BACKEND")}
    completed = subprocess.run([sys.executable, "-m", "tfrl", "doctor"], cwd=tmp_path, env=env, capture_output=True,
                               text=True, timeout=300)
    assert completed.returncode in (0, 1), completed.stderr[-3000:]
    assert not [line for line in completed.stderr.splitlines() if NATIVE_LINE.match(line)], completed.stderr
    assert not any(word in completed.stderr for word in XLA_NOISE), completed.stderr

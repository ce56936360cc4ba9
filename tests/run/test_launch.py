"""tfrl.run.launch.prepare and the launchers' answers before TensorFlow loads: --help, --hp=help and bad input must
not import it (it takes seconds), so a stand-in `tensorflow` package that refuses to import proves they don't."""

import dataclasses
import os
import pathlib
import subprocess
import sys

import pytest
from absl import logging as absl_logging

from tfrl.errors import UsageError
from tfrl.hardware import runtime_defaults
from tfrl.hardware.runtime import RuntimeOptions
from tfrl.run import launch, runs

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
_CPU = RuntimeOptions(device="cpu")  # the placement decided without asking TensorFlow for GPUs


@pytest.fixture(scope="module")
def no_tensorflow(tmp_path_factory):
    """A PYTHONPATH entry whose `tensorflow` raises ImportError on import (find_spec still finds it)."""
    root = tmp_path_factory.mktemp("no_tf")
    (root / "tensorflow").mkdir()
    (root / "tensorflow" / "__init__.py").write_text("raise ImportError('TensorFlow was imported')\n")
    return root


def _run(script, args, no_tensorflow):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(no_tensorflow), str(REPO_ROOT / "tests")]))
    env.pop("KERAS_BACKEND", None)
    return subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / script), *args], capture_output=True,
                          text=True, cwd=REPO_ROOT, env=env, timeout=120)


@pytest.mark.parametrize("script, args, returncode, expected", [
    ("train.py", ["--help"], 0, "Hardware flags (tfrl.hardware.runtime):"),
    ("train.py", ["--agent=dqn", "--env=LunarLander-v2", "--hp=help"], 0, "DQNConfig hyperparameters (preset dqn-lunarlander)"),
    ("train.py", ["--agent=dqn", "--env=CartPole-v1", "--lerning_rate=1"], 2, "did you mean --hp=learning_rate=...?"),
    ("train.py", ["--agent=dqn", "--env=CartPole-v9"], 2, "unknown environment id 'CartPole-v9'"),
    ("train.py", ["--agent=dqn", "--env=Pendulum-v1"], 2, "--agent=dqn acts in discrete action spaces"),
    ("train.py", ["--agent=dqn", "--env=CartPole-v1", "--preset=nope"], 2, "no preset named 'nope'"),
    ("train.py", ["--agent=dqn", "--env=CartPole-v1", "--hp=batch_size=x"], 2, "is not a valid int"),
    # sac-pendulum's cpu_bfloat16 asks whether a GPU is visible (TF) only once the input passed its checks
    ("train.py", ["--agent=sac", "--env=Pendulum-v1", "--hp=batch_size=x"], 2, "is not a valid int"),
    ("train.py", ["--agent=dqn", "--env=CartPole-v1", "--mixed_precision=fp8"], 2, "--mixed_precision: unknown policy"),
    ("serve.py", ["--help"], 0, "--rest_api_port"),
    ("serve.py", ["--model_name=m"], 2, "--model_name and --model_base_path are required"),
    ("serve.py", ["--model_name=m", "--model_base_path=tfrl/presets", "--graceful_shutdown_timeout_seconds=nan"], 2,
     "--graceful_shutdown_timeout_seconds must be > 0, got nan"),
    ("serve.py", ["--model_name=m", "--model_base_path=tfrl/presets", "--version_labels=a=²"], 2,
     "--version_labels: expected LABEL=VERSION"),
    ("train.py", ["--agent=dqn", "--env=CartPole-v1", "--visible_gpus=²"], 2, "--visible_gpus"),
    # A directory that holds no run: said at once (it took 7 s of TensorFlow's import).
    ("evaluate.py", ["--run_dir=docs"], 2, "docs/config.json does not exist: docs is not a tfrl run directory"),
    ("export.py", ["--run_dir=docs", "--model_name=m"], 2, "docs is not a tfrl run directory"),
])
def test_answers_before_tensorflow_loads(no_tensorflow, script, args, returncode, expected):
    completed = _run(script, args, no_tensorflow)
    assert completed.returncode == returncode, completed.stderr[-2000:]
    assert expected in completed.stdout + completed.stderr
    assert "TensorFlow was imported" not in completed.stderr


def test_serve_help_lists_the_server_flags(no_tensorflow):
    out = _run("serve.py", ["--help"], no_tensorflow).stdout
    for flag in ("--model_name", "--model_base_path", "--rest_api_port", "--max_batch_size", "--version_labels"):
        assert f"\n  {flag}:" in out, flag


def test_a_preset_for_another_env_is_used_with_a_warning(monkeypatch):
    warnings = []
    monkeypatch.setattr(absl_logging, "warning", lambda message, *args: warnings.append(message % args))
    prepared = launch.prepare(launch.TrainRequest(agent="dqn", env="CartPole-v1", preset="dqn-lunarlander"))
    assert prepared.record.preset == "dqn-lunarlander" and prepared.config.total_env_steps == 300_000
    assert warnings == ["preset dqn-lunarlander is for LunarLander-v2, LunarLander-v3, not CartPole-v1: its "
                        "hyperparameters may not suit this env"]


def test_an_env_without_a_preset_trains_the_defaults_with_a_warning_saying_so(monkeypatch):
    warnings = []
    monkeypatch.setattr(absl_logging, "warning", lambda message, *args: warnings.append(message % args))
    prepared = launch.prepare(launch.TrainRequest(agent="dqn", env="FrozenLake-v1", runtime=_CPU))
    assert prepared.record.preset is None and prepared.config.total_env_steps == 100_000
    assert warnings == ["no preset of dqn for FrozenLake-v1: training with DQNConfig's defaults (total_env_steps="
                        "100000, hidden_sizes=[256, 256]); --hp sets any of them, --hp=help lists them"]
    launch.prepare(launch.TrainRequest(agent="dqn", env="FrozenLake-v1", preset="none", runtime=_CPU))
    assert len(warnings) == 1  # asked for: no warning


def test_a_preset_chooses_xla_unless_the_user_did(tmp_path):
    from tfrl.hardware.runtime import RuntimeOptions

    def xla(preset="dqn-lunarlander", **options):
        request = launch.TrainRequest(agent="dqn", env="LunarLander-v2", preset=preset,
                                      runtime=RuntimeOptions(**options))
        return launch.prepare(request).record.runtime.xla

    assert xla() is True  # tfrl/presets/dqn-lunarlander.json: "runtime": {"xla": true}
    assert xla(xla=False) is False and xla(preset="dqn-lunarlander-sb3zoo", xla=True) is True
    assert xla(preset="dqn-lunarlander-sb3zoo") is False and xla(preset="none") is False
    bad = tmp_path / "bad.json"
    bad.write_text('{"agent": "dqn", "env_ids": [], "description": "", "hparams": {}, "runtime": {"device": "gpu"}}')
    with pytest.raises(UsageError, match="runtime must be an object of \\['cpu_bfloat16', 'xla'\\]"):
        xla(preset=str(bad))
    bad.write_text('{"agent": "dqn", "env_ids": [], "description": "", "hparams": {}, "runtime": {"cpu_bfloat16": 1}}')
    with pytest.raises(UsageError, match="set to true or false"):
        xla(preset=str(bad))


@pytest.mark.parametrize("flags, options, expected", [
    (("avx512_bf16",), {"device": "cpu"}, "mixed_bfloat16"),  # tfrl/presets/sac-pendulum.json: cpu_bfloat16
    (("amx_bf16", "avx512_bf16"), {"visible_gpus": ""}, "mixed_bfloat16"),  # auto with no GPU: the CPU
    ((), {"device": "cpu"}, "float32"),  # no bfloat16 instructions
    (("avx512_bf16",), {"device": "gpu"}, "float32"),  # the train step is not on the CPU
    (("avx512_bf16",), {"device": "cpu", "mixed_precision": "float32"}, "float32"),  # the user's flag wins
    ((), {"device": "cpu", "mixed_precision": "mixed_bfloat16"}, "mixed_bfloat16"),
])
def test_a_preset_chooses_bfloat16_on_a_cpu_with_bfloat16_instructions(monkeypatch, flags, options, expected):
    from tfrl.hardware import cpu_features
    from tfrl.hardware.runtime import RuntimeOptions

    monkeypatch.setattr(cpu_features, "bf16_flags", lambda: flags)
    request = launch.TrainRequest(agent="sac", env="Pendulum-v1", runtime=RuntimeOptions(**options))
    assert launch.prepare(request).record.runtime.mixed_precision == expected
    other = launch.TrainRequest(agent="sac", env="Pendulum-v1", preset="none", runtime=RuntimeOptions(**options))
    assert launch.prepare(other).record.runtime.mixed_precision == options.get("mixed_precision", "float32")


def test_xla_is_on_by_default_where_the_train_step_runs_on_a_gpu_and_the_record_says_why(monkeypatch, tmp_path):
    from tfrl.hardware import runtime as runtime_lib
    from tfrl.hardware.runtime import RuntimeOptions

    def record(on_cpu, preset="dqn-cartpole", build="CUDA 12.5/cuDNN 9", **options):
        monkeypatch.setattr(runtime_lib, "trains_on_cpu", lambda _: on_cpu)
        monkeypatch.setattr(runtime_lib, "build_flavour", lambda: build)
        request = launch.TrainRequest(agent="dqn", env="CartPole-v1", preset=preset, runtime=RuntimeOptions(**options))
        return launch.prepare(request).record

    on_gpu = record(on_cpu=False)  # dqn-cartpole says nothing of XLA
    assert on_gpu.runtime.xla is True
    assert on_gpu.runtime_choices["xla"] == "the default where the train step runs on a CUDA GPU; --noxla turns it off"
    rocm = record(on_cpu=False, build="ROCm 6.1")  # XLA on ROCm not measured: off unless asked for
    assert (rocm.runtime.xla, rocm.runtime_choices["xla"]) == (False,
                                                               "the default on a ROCm 6.1 GPU; --xla turns it on")
    on_cpu = record(on_cpu=True)
    assert on_cpu.runtime.xla is False
    assert on_cpu.runtime_choices["xla"] == "the default where the train step runs on a CPU; --xla turns it on"
    assert record(on_cpu=False, xla=False).runtime_choices == {"xla": "--noxla", "mixed_precision": "the default"}
    from_preset = record(on_cpu=True, preset="dqn-lunarlander")  # "runtime": {"xla": true}
    assert (from_preset.runtime.xla, from_preset.runtime_choices["xla"]) == (True, "preset dqn-lunarlander")
    # config.json keeps the choices; they never make two runs differ.
    runs.write_config(tmp_path, on_gpu)
    read = runs.read_config(tmp_path)
    assert read.runtime_choices == on_gpu.runtime_choices
    assert read.differences(dataclasses.replace(on_gpu, runtime_choices={})) == []


def test_a_resumed_run_keeps_its_precision(monkeypatch):
    from tfrl.hardware import cpu_features
    from tfrl.hardware.runtime import RuntimeOptions

    monkeypatch.setattr(cpu_features, "bf16_flags", lambda: ("avx512_bf16",))
    cpu = RuntimeOptions(device="cpu")
    assert runtime_defaults.resolved(cpu, {"xla": False, "mixed_precision": "float32"}).mixed_precision == "float32"
    monkeypatch.setattr(cpu_features, "bf16_flags", lambda: ())  # resumed on a machine without bfloat16
    saved = {"xla": True, "mixed_precision": "mixed_bfloat16"}
    assert runtime_defaults.resolved(cpu, saved) == RuntimeOptions(device="cpu", xla=True,
                                                                 mixed_precision="mixed_bfloat16")


def test_prepare_writes_nothing_and_names_the_first_problem(tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(UsageError, match="--keep_checkpoints must be >= 0"):
        launch.prepare(launch.TrainRequest(agent="dqn", env="CartPole-v1", run_dir=run_dir, keep_checkpoints=-1))
    prepared = launch.prepare(launch.TrainRequest(agent="ppo", env="CartPole-v1", run_dir=run_dir,
                                                  hp={"total_env_steps": 1000}))
    assert prepared.record.env_info == {"env_id": "CartPole-v1", "obs_shape": [4], "num_actions": 2}
    assert not run_dir.exists()

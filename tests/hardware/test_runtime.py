"""Tests for tfrl.hardware.runtime.

TF lets a process configure its devices only until the runtime initializes, so
every test that calls apply() successfully runs in its own Python subprocess,
which prints a JSON summary on its last stdout line. The other tests are pure:
they fail in validation, or stub out tf.config, and never initialize TF here.
"""

import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

from absl import flags
import pytest
import tensorflow as tf

from tfrl import errors
from tfrl.commands import runtime_flags
from tfrl.hardware import precision, runtime
from tfrl.hardware.runtime import RuntimeConfigError, RuntimeOptions

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def _run_in_fresh_process(code: str) -> tuple[dict, str]:
    """Runs `code` in a new interpreter; returns (JSON from its last stdout line, stderr)."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1]), completed.stderr


# --- validate_options: pure, no TF devices touched -------------------------------

@pytest.mark.parametrize("options, message", [
    (RuntimeOptions(device="tpu"),
     "--device: cannot parse 'tpu'; choose one of auto, cpu, cpu:N, gpu, gpu:N"),
    (RuntimeOptions(device="auto:1"), "--device: cannot parse 'auto:1'"),
    (RuntimeOptions(device="gpu:-1"), "--device: cannot parse 'gpu:-1'"),
    (RuntimeOptions(device="GPU"), "--device: cannot parse 'GPU'"),
    (RuntimeOptions(mixed_precision="fp8"),
     "--mixed_precision: unknown policy 'fp8'; choose one of float32, mixed_float16, mixed_bfloat16"),
    (RuntimeOptions(visible_gpus="0,0"), "--visible_gpus: '0,0' lists a GPU twice"),
    (RuntimeOptions(visible_gpus="0,,1"), "--visible_gpus: '' in '0,,1' is not a GPU index"),
    (RuntimeOptions(visible_gpus="-1"), "--visible_gpus: '-1' in '-1' is not a GPU index"),
    (RuntimeOptions(visible_gpus="gpu0"), "--visible_gpus: 'gpu0' in 'gpu0' is not a GPU index"),
    (RuntimeOptions(gpu_memory_limit_mb=0),
     "--gpu_memory_limit_mb: must be a positive number of MiB, got 0"),
    (RuntimeOptions(memory_growth=True, gpu_memory_limit_mb=1024),
     "--memory_growth and --gpu_memory_limit_mb cannot be combined"),
    (RuntimeOptions(intra_op_threads=-1), "--intra_op_threads: must be in [0, 4096] (0 = TF default), got -1"),
    (RuntimeOptions(inter_op_threads=-2), "--inter_op_threads: must be in [0, 4096] (0 = TF default), got -2"),
    (RuntimeOptions(logical_cpus=0), "--logical_cpus: must be >= 1, got 0"),
    (RuntimeOptions(device="cpu:1"),
     "--device=cpu:1 but --logical_cpus=1 makes only CPU:0..CPU:0; raise --logical_cpus to at least 2"),
])
def test_validate_options_rejects_bad_value_naming_the_flag(options, message):
    with pytest.raises(RuntimeConfigError, match=re.escape(message)):
        runtime.validate_options(options)


@pytest.mark.parametrize("options", [
    RuntimeOptions(),
    RuntimeOptions(device="gpu:3", visible_gpus="3,0", memory_growth=True),
    RuntimeOptions(device="cpu:3", logical_cpus=4, visible_gpus="", mixed_precision="mixed_float16"),
    RuntimeOptions(gpu_memory_limit_mb=512, mixed_precision="mixed_bfloat16", xla=True,
                   intra_op_threads=2, inter_op_threads=1),
])
def test_validate_options_accepts_valid_options(options):
    assert runtime.validate_options(options) is None


def test_runtime_config_error_is_a_usage_error():
    # Launchers catch errors.UsageError to print one line and exit 2.
    assert issubclass(RuntimeConfigError, errors.UsageError)
    assert issubclass(errors.UsageError, ValueError)


def test_apply_rejects_cpu_index_beyond_logical_cpus_before_touching_tf():
    with pytest.raises(RuntimeConfigError, match=re.escape("raise --logical_cpus to at least 6")):
        runtime.apply(RuntimeOptions(device="cpu:5", logical_cpus=2))


@pytest.mark.parametrize("policy, expected", [
    ("mixed_float16", True), ("mixed_bfloat16", False), ("float32", False),
])
def test_loss_scaling_needed_only_for_float16(policy, expected):
    assert precision.loss_scaling_needed(policy) is expected


# --- device resolution against stubbed logical devices (GPU cases on a CPU box) ----

@pytest.fixture
def two_fake_gpus(monkeypatch):
    devices = {
        "CPU": [tf.config.LogicalDevice("/device:CPU:0", "CPU")],
        "GPU": [tf.config.LogicalDevice("/device:GPU:0", "GPU"),
                tf.config.LogicalDevice("/device:GPU:1", "GPU")],
    }
    monkeypatch.setattr(tf.config, "list_logical_devices", lambda device_type: devices[device_type])
    return devices


@pytest.mark.parametrize("device, expected", [
    ("auto", "/device:GPU:0"), ("gpu", "/device:GPU:0"), ("gpu:1", "/device:GPU:1"), ("cpu", "/device:CPU:0"),
])
def test_resolve_device_picks_logical_device(two_fake_gpus, device, expected):
    assert runtime._resolve_device(device) == expected


def test_resolve_device_gpu_index_beyond_visible_gpus_names_them(two_fake_gpus):
    two_fake_gpus["GPU"].pop()  # one GPU left
    with pytest.raises(RuntimeConfigError) as raised:
        runtime._resolve_device("gpu:7")
    assert str(raised.value) == "--device=gpu:7 but only 1 GPU is visible (GPU:0)"


# --- apply() in fresh processes --------------------------------------------------

@pytest.fixture(scope="module")
def two_logical_cpus_process():
    """apply(cpu:1, 2 logical CPUs, bfloat16, XLA), then re-apply the same and a conflicting set."""
    return _run_in_fresh_process("""
        import dataclasses, json
        import keras, tensorflow as tf
        from tfrl.hardware import runtime

        options = runtime.RuntimeOptions(
            device="cpu:1", logical_cpus=2, mixed_precision="mixed_bfloat16", xla=True, inter_op_threads=2)
        rt = runtime.apply(options)
        with rt.scope():
            variable = tf.Variable(1.0)
        result = {
            "device_name": rt.device_name,
            "variable_device": variable.device,
            "policy": keras.mixed_precision.global_policy().name,
            "banner": rt.banner(),
            "tf_version": tf.__version__,
            "same_options_again": runtime.apply(options).device_name,
            "banner_with_choices": rt.banner({"xla": "preset dqn-lunarlander", "mixed_precision": "--mixed_precision"}),
            "tf32_default": tf.config.experimental.tensor_float_32_execution_enabled(),
        }
        runtime.apply(dataclasses.replace(options, tf32=False))
        result["tf32_after_notf32"] = tf.config.experimental.tensor_float_32_execution_enabled()
        runtime.apply(options)  # tf32 unset: the process's setting stays (a caller's program may have chosen it)
        result["tf32_after_unset"] = tf.config.experimental.tensor_float_32_execution_enabled()
        for name, changed in (("more_cpus", dataclasses.replace(options, logical_cpus=3)),
                              ("other_threads", dataclasses.replace(options, inter_op_threads=1))):
            try:
                runtime.apply(changed)
                result[name] = None
            except runtime.RuntimeConfigError as error:
                result[name] = str(error)
        print(json.dumps(result))
    """)[0]


def test_apply_places_variable_on_requested_logical_cpu(two_logical_cpus_process):
    assert two_logical_cpus_process["device_name"] == "/device:CPU:1"
    assert two_logical_cpus_process["variable_device"].endswith("/device:CPU:1")


def test_apply_sets_keras_precision_policy(two_logical_cpus_process):
    assert two_logical_cpus_process["policy"] == "mixed_bfloat16"


def test_reapply_with_same_options_is_accepted(two_logical_cpus_process):
    assert two_logical_cpus_process["same_options_again"] == "/device:CPU:1"


def test_reapply_with_different_device_state_raises(two_logical_cpus_process):
    assert two_logical_cpus_process["more_cpus"] == (
        "cannot apply --logical_cpus=3: TensorFlow devices are already initialized with "
        "2 logical CPU(s); call tfrl.hardware.runtime.apply() once per process, before any TF op")
    assert two_logical_cpus_process["other_threads"].startswith(
        "cannot apply --inter_op_threads=1: TensorFlow devices are already initialized "
        "with inter_op_threads=2")


def test_banner_reports_versions_build_placement_precision_xla(two_logical_cpus_process):
    banner = two_logical_cpus_process["banner"]
    tf_version = two_logical_cpus_process["tf_version"]
    assert f"TensorFlow {tf_version}, Keras " in banner
    assert "build: CPU" in banner
    assert "logical devices: CPU:0, CPU:1" in banner
    assert "placement: /device:CPU:1" in banner
    assert "precision: mixed_bfloat16\n" in banner  # no loss scaling for bfloat16
    assert "XLA: on" in banner
    assert "threads: intra-op TF default, inter-op 2" in banner
    assert all(len(line) <= 68 for line in banner.splitlines()), banner  # 80 columns with the log prefix
    assert "TF32" not in banner  # no GPU: nothing to say about it


def test_banner_says_why_xla_and_precision_have_their_values(two_logical_cpus_process):
    banner = two_logical_cpus_process["banner_with_choices"]
    assert "XLA: on (preset dqn-lunarlander)" in " ".join(banner.split())
    assert "precision: mixed_bfloat16 (--mixed_precision)" in banner


def test_notf32_turns_tensorfloat32_off(two_logical_cpus_process):
    assert two_logical_cpus_process["tf32_default"] is True  # TensorFlow's default
    assert two_logical_cpus_process["tf32_after_notf32"] is False
    assert two_logical_cpus_process["tf32_after_unset"] is False


@pytest.fixture(scope="module")
def default_cpu_process():
    """GPU requests on this CPU-only machine, then a successful float16 apply on CPU."""
    result, stderr = _run_in_fresh_process("""
        import json
        import tensorflow as tf
        from tfrl.hardware import runtime
        from tfrl.hardware.runtime import RuntimeOptions

        result = {"physical_gpus": len(tf.config.list_physical_devices("GPU"))}
        for name, options in (("gpu", RuntimeOptions(device="gpu")),
                              ("gpu7", RuntimeOptions(device="gpu:7")),
                              ("visible0", RuntimeOptions(visible_gpus="0"))):
            try:
                runtime.apply(options)
                result[name] = None
            except runtime.RuntimeConfigError as error:
                result[name] = str(error)
        rt = runtime.apply(RuntimeOptions(mixed_precision="mixed_float16"))
        result["auto_device"] = rt.device_name
        result["banner"] = rt.banner()
        print(json.dumps(result))
    """)
    if result["physical_gpus"]:
        pytest.skip("these checks expect a machine without GPUs")
    return result, stderr


def test_device_gpu_without_gpus_errors_clearly(default_cpu_process):
    result, _ = default_cpu_process
    assert result["gpu"] == (
        "--device=gpu but no GPU is visible (TF build: CPU, physical GPUs: 0); "
        "use --device=cpu or --device=auto, or check --visible_gpus")
    assert result["gpu7"].startswith("--device=gpu:7 but no GPU is visible")


def test_visible_gpus_beyond_physical_count_names_the_count(default_cpu_process):
    result, _ = default_cpu_process
    assert result["visible0"] == (
        "--visible_gpus=0 names GPU 0, but this machine has 0 physical GPU(s) (TF build: CPU)")


def test_auto_falls_back_to_cpu_and_float16_on_cpu_warns(default_cpu_process):
    result, stderr = default_cpu_process
    assert result["auto_device"] == "/device:CPU:0"
    assert "precision: mixed_float16 (loss scaling on)" in result["banner"]
    assert "XLA: off" in result["banner"]
    assert "mixed_float16 on /device:CPU:0" in stderr
    assert "without --xla far slower" in stderr  # measured: docs/benchmarks.md, "Precision x XLA"


# --- flags -------------------------------------------------------------------------

def _parse(args: list[str]) -> RuntimeOptions:
    flag_values = flags.FlagValues()
    runtime_flags.define_flags(flag_values)
    flag_values(["launcher", *args])
    return runtime_flags.options_from_flags(flag_values)


def test_flags_default_to_runtime_options_defaults():
    assert _parse([]) == RuntimeOptions()


def test_flags_round_trip_every_option():
    assert _parse([
        "--device=cpu:1", "--visible_gpus=", "--memory_growth", "--mixed_precision=mixed_bfloat16",
        "--xla", "--intra_op_threads=2", "--inter_op_threads=1", "--logical_cpus=2",
    ]) == RuntimeOptions(
        device="cpu:1", visible_gpus="", memory_growth=True, mixed_precision="mixed_bfloat16",
        xla=True, intra_op_threads=2, inter_op_threads=1, logical_cpus=2)
    assert _parse(["--visible_gpus=0,1", "--gpu_memory_limit_mb=512"]) == RuntimeOptions(
        visible_gpus="0,1", gpu_memory_limit_mb=512)


def test_bad_flag_value_reaches_validate_options_not_absl():
    # absl would exit 1 on a bad enum; we want our UsageError (exit 2 in launchers).
    options = _parse(["--mixed_precision=fp8"])
    with pytest.raises(RuntimeConfigError, match="--mixed_precision: unknown policy 'fp8'"):
        runtime.validate_options(options)


def test_a_linux_machine_without_gpu_device_files_trains_on_the_cpu_without_asking_tensorflow(monkeypatch):
    def no_tensorflow(*_):
        raise AssertionError("TensorFlow was asked")

    monkeypatch.setattr(tf.config, "list_physical_devices", no_tensorflow)
    monkeypatch.setattr(runtime, "no_gpu_device_files", lambda: True)
    assert runtime.trains_on_cpu(RuntimeOptions()) is True
    assert runtime.trains_on_cpu(RuntimeOptions(device="gpu")) is False  # asked for: apply() checks it
    monkeypatch.setattr(runtime, "no_gpu_device_files", lambda: False)
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind: ["a GPU"])
    assert runtime.trains_on_cpu(RuntimeOptions()) is False
    assert runtime.trains_on_cpu(RuntimeOptions(visible_gpus="")) is True

"""The doctor's checks: one pure function of Facts per known problem, each finding carrying its fix."""

from __future__ import annotations

import re
from typing import Callable

from tfrl.hardware.doctor.facts import TF_COMPANIONS, TF_DISTRIBUTIONS, Facts, Finding, product_tolerance

# The first ptxas of CUDA 12 without the clamping miscompile that TF 2.21 warns of ("CUDA versions 12.x.y up to and
# including 12.6.2 miscompile certain edge cases around clamping").
PTXAS_FIXED = (12, 6, 3)

# --- checks (pure) ----------------------------------------------------------------------------------


def _version_tuple(version: str | None) -> tuple[int, ...]:
    """"2.21.0" -> (2, 21); "2.16.0rc1" -> (2, 16); None or garbage -> ()."""
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else ()


def _is_gpu_build(facts: Facts, kind: str) -> bool:
    return facts.build_info.get(f"is_{kind}_build") == "True"


def _physical_gpus(facts: Facts) -> list[str]:
    return [name for name in facts.physical_devices if ":GPU:" in name]


def _hides_every_gpu(value: str) -> bool:
    """CUDA/HIP/ROCR *_VISIBLE_DEVICES: empty, or starting with an invalid index such as -1, hides all GPUs."""
    first = value.split(",")[0].strip()
    return first == "" or first.startswith("-")


def check_tensorflow_imports(facts: Facts) -> list[Finding]:
    if facts.tensorflow_error is None:
        return []
    if not any(name in facts.distributions for name in TF_DISTRIBUTIONS):
        fix = "pip install -e '.[cpu]' (or [cuda], [zen]; ROCm: see README, 'Installing TensorFlow')"
    elif facts.unsatisfied_requirements:
        fix = "fix the unmet requirements reported below, e.g. pip install the version each one names"
    else:
        fix = "reinstall the TensorFlow wheel: pip install --force-reinstall <the tensorflow distribution listed>"
    return [Finding("tensorflow_imports", "problem", f"import tensorflow failed: {facts.tensorflow_error}", fix)]


def check_one_tensorflow_distribution(facts: Facts) -> list[Finding]:
    present = [name for name in TF_DISTRIBUTIONS if name in facts.distributions]
    if "tensorflow" in present:
        present = [name for name in present if name not in TF_COMPANIONS]
    if len(present) < 2:
        return []
    listed = ", ".join(f"{name} {facts.distributions[name]}" for name in present)
    return [Finding(
        "one_tensorflow_distribution", "problem",
        f"{len(present)} TensorFlow distributions are installed ({listed}); they overwrite each other's files, "
        "so the build you get depends on install order",
        f"pip uninstall -y {' '.join(present)}, then install the one you want "
        "(pip install -e '.[cpu]', '.[cuda]', '.[zen]', or TF for ROCm from AMD's wheel index)",
    )]


def check_rocm_build_sees_gpu(facts: Facts) -> list[Finding]:
    if not _is_gpu_build(facts, "rocm") or _physical_gpus(facts):
        return []
    if facts.kfd == "absent":
        cause = "/dev/kfd does not exist: the amdgpu kernel driver is not loaded (or this is a container " \
                "started without --device=/dev/kfd --device=/dev/dri)"
    elif facts.kfd == "no access":
        cause = "/dev/kfd exists but this user cannot open it: add the user to the render and video groups " \
                "(sudo usermod -aG render,video $USER, then log in again)"
    else:
        cause = "run rocminfo: if it lists no gfx agent, the kernel driver and the ROCm user space do not match " \
                "(check the ROCm compatibility matrix for your kernel); a consumer GPU may need HSA_OVERRIDE_GFX_VERSION"
    return [Finding(
        "rocm_build_sees_gpu", "problem",
        f"this TensorFlow is a ROCm build ({facts.build_flavour}) but no GPU is visible, so everything runs "
        "on the CPU, 2-3x slower or worse for deep RL",
        cause,
    )]


def check_cuda_build_sees_gpu(facts: Facts) -> list[Finding]:
    if not _is_gpu_build(facts, "cuda") or _physical_gpus(facts):
        return []
    return [Finding(
        "cuda_build_sees_gpu", "problem",
        f"this TensorFlow is a CUDA build ({facts.build_flavour}) but no GPU is visible; it runs on the CPU",
        "with an NVIDIA GPU: check nvidia-smi, then pip install 'tensorflow[and-cuda]' (it brings the CUDA "
        "libraries TF needs); without one: pip uninstall -y tensorflow && pip install -e '.[cpu]'",
    )]


def check_visible_devices_hide_gpus(facts: Facts) -> list[Finding]:
    findings = []
    relevant = {"CUDA_VISIBLE_DEVICES": _is_gpu_build(facts, "cuda") or _is_gpu_build(facts, "rocm"),
                "HIP_VISIBLE_DEVICES": _is_gpu_build(facts, "rocm"),
                "ROCR_VISIBLE_DEVICES": _is_gpu_build(facts, "rocm")}
    for name, matters in relevant.items():
        value = facts.environment.get(name)
        if matters and value is not None and _hides_every_gpu(value):
            findings.append(Finding(
                "visible_devices_hide_gpus", "problem",
                f"{name}={value!r} hides every GPU from this {facts.build_flavour} build",
                f"unset {name} (or list the GPU indices to use, e.g. {name}=0); to choose GPUs per run, "
                "use --visible_gpus instead",
            ))
    return findings


def check_keras_3_with_tf_2_16_or_newer(facts: Facts) -> list[Finding]:
    findings = []
    tf_version = facts.tf_version or next(
        (facts.distributions[name] for name in TF_DISTRIBUTIONS if name in facts.distributions), None)
    if tf_version is not None and _version_tuple(tf_version) and _version_tuple(tf_version) < (2, 16):
        findings.append(Finding(
            "keras_3_with_tf_2_16_or_newer", "problem",
            f"TensorFlow {tf_version} is older than 2.16: its tf.keras is Keras 2, tfrl needs Keras 3",
            "pip install -e '.[cpu]' (TF 2.16+); ROCm: tensorflow-rocm on PyPI stops at 2.14, install TF 2.16+ "
            "for ROCm from AMD's wheel index (README, 'Installing TensorFlow')",
        ))
    keras_version = facts.keras_version or facts.distributions.get("keras")
    if keras_version is not None and _version_tuple(keras_version) and _version_tuple(keras_version) < (3, 0):
        findings.append(Finding(
            "keras_3_with_tf_2_16_or_newer", "problem",
            f"Keras {keras_version} is Keras 2; tfrl's networks and optimizers are Keras 3",
            "pip install 'keras>=3' (with TensorFlow 2.16 or newer)",
        ))
    if facts.environment.get("TF_USE_LEGACY_KERAS") not in (None, "", "0") and "tf-keras" in facts.distributions:
        findings.append(Finding(
            "keras_3_with_tf_2_16_or_newer", "note",
            f"TF_USE_LEGACY_KERAS={facts.environment['TF_USE_LEGACY_KERAS']} makes tf.keras the Keras 2 of tf-keras; "
            "tfrl imports Keras 3 directly, so Keras objects from tf.keras code will not mix with tfrl's",
            "unset TF_USE_LEGACY_KERAS unless other code in this process needs Keras 2",
        ))
    return findings


def check_keras_backend_is_tensorflow(facts: Facts) -> list[Finding]:
    backend = facts.environment.get("KERAS_BACKEND")
    if backend in (None, "tensorflow"):
        return []
    return [Finding(
        "keras_backend_is_tensorflow", "problem",
        f"KERAS_BACKEND={backend!r}: tfrl's train steps are tf.functions and need the TensorFlow backend",
        "unset KERAS_BACKEND or set KERAS_BACKEND=tensorflow",
    )]


def check_zentf_matches_tf(facts: Facts) -> list[Finding]:
    if facts.zentf is None or facts.zentf.built_for_tf is None or facts.tf_version is None:
        return []
    if _version_tuple(facts.zentf.built_for_tf) == _version_tuple(facts.tf_version):
        return []
    return [Finding(
        "zentf_matches_tf", "problem",
        f"{facts.zentf.distribution} {facts.zentf.version} was built for TensorFlow {facts.zentf.built_for_tf}, "
        f"but TensorFlow {facts.tf_version} is installed; a plugin built for another TF version may fail "
        "to load or crash",
        f"pip install 'tensorflow-cpu=={facts.zentf.built_for_tf}', or the zentf release built for "
        f"TF {facts.tf_version} (pip index versions zentf)",
    )]


def check_zentf_enabled(facts: Facts) -> list[Finding]:
    """zentf ships switched off: its kernels run only with TF_ENABLE_ZENDNN_OPTS=1 (AMD's setup script)."""
    if facts.zentf is None:
        return []
    findings = []
    if facts.zentf.plugin_library is None:
        findings.append(Finding(
            "zentf_enabled", "problem",
            f"{facts.zentf.distribution} {facts.zentf.version} is installed but tensorflow-plugins/"
            "libamdcpu_plugin.so is missing, so TF loads nothing from it",
            f"pip install --force-reinstall --no-deps {facts.zentf.distribution}=={facts.zentf.version}",
        ))
    zendnn, onednn = facts.environment.get("TF_ENABLE_ZENDNN_OPTS"), facts.environment.get("TF_ENABLE_ONEDNN_OPTS")
    if (zendnn or "").strip().lower() not in ("1", "true") or (onednn or "").strip().lower() not in ("0", "false"):
        findings.append(Finding(
            "zentf_enabled", "problem",
            f"zentf is installed but not switched on (TF_ENABLE_ZENDNN_OPTS={zendnn or 'unset'}, "
            f"TF_ENABLE_ONEDNN_OPTS={onednn or 'unset'}): TF runs its own oneDNN kernels",
            "export TF_ENABLE_ZENDNN_OPTS=1 TF_ENABLE_ONEDNN_OPTS=0 (docs/troubleshooting.md lists the optional "
            "OMP_NUM_THREADS / ZENDNNL_MATMUL_ALGO tuning)",
        ))
    return findings


def check_zentf_on_amd_cpu(facts: Facts) -> list[Finding]:
    if facts.zentf is None or facts.cpu_vendor in (None, "AuthenticAMD"):
        return []
    return [Finding(
        "zentf_on_amd_cpu", "note",
        f"zentf targets AMD EPYC (Zen) CPUs; this CPU reports {facts.cpu_vendor} ({facts.cpu_model})",
        "none needed; measure with and without it (docs/benchmarks.md, 'zentf') before relying on it here",
    )]


def check_cnn_precision_on_cpu(facts: Facts) -> list[Finding]:
    """Image (CNN) agents on a machine without GPUs whose CPU has bfloat16 instructions: the fastest correct
    options measured (docs/benchmarks.md). Elsewhere the defaults (float32, no XLA) are already the ones."""
    if facts.tensorflow_error or not facts.cpu_bf16 or any("GPU" in device for device in facts.physical_devices):
        return []
    return [Finding(
        "cnn_precision_on_cpu", "note",
        f"this CPU has bfloat16 instructions ({', '.join(facts.cpu_bf16)}): image agents (CNN torsos) train "
        "fastest here with --mixed_precision=mixed_bfloat16 and without --xla (XLA's CPU convolutions are many "
        "times slower)",
        "none needed for vector observations; for images, pass --mixed_precision=mixed_bfloat16 "
        "(docs/benchmarks.md, the CNN train step)",
    )]


# Requirement pins known to be wrong but harmless while TF itself imports and computes: (holder, required).
_KNOWN_HARMLESS_PINS = {
    ("zentf", "numpy"): "zentf 2.21.0.0 pins numpy==1.26.4, but TF 2.21's ml_dtypes needs numpy>=2; TF and zentf "
                        "run with numpy 2 (docs/troubleshooting.md)",
}


def check_requirements_met(facts: Facts) -> list[Finding]:
    findings = []
    stack_works = facts.tensorflow_error is None and facts.xla_compiles is not False
    for unmet in facts.unsatisfied_requirements:
        known = _KNOWN_HARMLESS_PINS.get((unmet.holder, unmet.name))
        if known and stack_works:
            findings.append(Finding("requirements_met", "note", str(unmet), f"keep it: {known}"))
        else:
            findings.append(Finding("requirements_met", "problem", str(unmet), f"pip install '{unmet.requirement}'"))
    return findings


def check_xla_compiles(facts: Facts) -> list[Finding]:
    if facts.xla_compiles is not False:
        return []
    return [Finding(
        "xla_compiles", "problem",
        f"XLA could not compile a small function: {facts.xla_error}",
        "train with --noxla (XLA is on by default on GPUs); on GPUs, XLA needs ptxas >= 12.6.3 (CUDA: see the "
        "ptxas finding) or the ROCm device libraries on the library path",
    )]


def _matmul_error_finding(timing, facts: Facts) -> Finding | None:
    if timing.relative_error is None:  # facts from before relative errors were measured: the old absolute bound
        wrong = timing.max_abs_error is not None and timing.max_abs_error > 1e-3 * timing.size
        measured = f"{timing.max_abs_error:.3g} from NumPy" if wrong else ""
    else:
        limit = product_tolerance(timing.device, timing.size, facts.tf32_enabled)
        wrong = timing.relative_error > limit
        measured = (f"{timing.relative_error:.3g} relative to NumPy's float64 product (rounding allows {limit:.3g}"
                    f"{' with TF32' if facts.tf32_enabled and ':GPU:' in timing.device else ''})")
    if not wrong:
        return None
    return Finding("matmul_runs_on_every_device", "problem",
                   f"a {timing.size}x{timing.size} matmul on {timing.device} is off by {measured}",
                   "the device computes wrong results: do not train on it; update its driver")


def check_matmul_runs_on_every_device(facts: Facts) -> list[Finding]:
    failed = [Finding(
        "matmul_runs_on_every_device", "problem",
        f"a {timing.size}x{timing.size} matmul failed on {timing.device}: {timing.error}",
        "avoid this device (--device, --visible_gpus); on a GPU, compare the driver and runtime versions "
        "with the build's (see 'build' above)",
    ) for timing in facts.matmul if timing.error is not None]
    wrong = [_matmul_error_finding(timing, facts) for timing in facts.matmul if timing.error is None]
    return failed + [finding for finding in wrong if finding is not None]


def check_tf32_on_gpus(facts: Facts) -> list[Finding]:
    """TensorFloat-32 is no fault, but it makes float32 on a GPU less exact than on a CPU: say so, and the switch."""
    if not facts.tf32_enabled or not _physical_gpus(facts):
        return []
    return [Finding(
        "tf32_on_gpus", "note",
        "TensorFloat-32 is on (TensorFlow's default): on NVIDIA GPUs from Ampere on, float32 matmuls and "
        "convolutions round their inputs to 10 mantissa bits (relative errors near 1e-3 instead of 1e-7)",
        "none needed for training; --notf32 (tfrl train, evaluate) computes in full float32",
    )]


def _version_numbers(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def check_ptxas(facts: Facts) -> list[Finding]:
    """XLA (on by default on GPUs) assembles its GPU kernels with CUDA's ptxas."""
    if not _is_gpu_build(facts, "cuda") or not _physical_gpus(facts):
        return []
    if facts.ptxas is None:
        return [Finding(
            "ptxas", "note",
            "no ptxas found (XLA_FLAGS' --xla_gpu_cuda_data_dir, the nvidia-cuda-nvcc-cu12 wheel, PATH): XLA, on "
            "by default on GPUs, needs it to compile for the GPU",
            "pip install 'nvidia-cuda-nvcc-cu12>=12.6.85', or put CUDA's bin/ on PATH (docs/hardware.md)",
        )]
    version = _version_numbers(facts.ptxas.version or "")
    if not version or version[0] != 12 or version >= PTXAS_FIXED:
        return []
    return [Finding(
        "ptxas", "problem",
        f"ptxas {facts.ptxas.version} ({facts.ptxas.path}) is a CUDA 12 release before 12.6.3, which miscompile "
        "certain edge cases around clamping (TensorFlow warns of it); XLA, on by default on GPUs, compiles "
        "tfrl's train steps with it",
        "pip install 'nvidia-cuda-nvcc-cu12>=12.6.85' (TF pins 12.5.82; the newer ptxas works with it: "
        "docs/hardware.md), or point XLA_FLAGS=--xla_gpu_cuda_data_dir=DIR at a CUDA of 12.6.3 or newer (its "
        "DIR/bin/ptxas comes first)",
    )]


CHECKS: tuple[Callable[[Facts], list[Finding]], ...] = (
    check_tensorflow_imports,
    check_one_tensorflow_distribution,
    check_requirements_met,
    check_keras_3_with_tf_2_16_or_newer,
    check_keras_backend_is_tensorflow,
    check_visible_devices_hide_gpus,
    check_rocm_build_sees_gpu,
    check_cuda_build_sees_gpu,
    check_zentf_matches_tf,
    check_zentf_enabled,
    check_zentf_on_amd_cpu,
    check_cnn_precision_on_cpu,
    check_xla_compiles,
    check_matmul_runs_on_every_device,
    check_tf32_on_gpus,
    check_ptxas,
)


def diagnose(facts: Facts) -> list[Finding]:
    return [finding for check in CHECKS for finding in check(facts)]


def healthy(findings: list[Finding]) -> bool:
    return not any(finding.severity == "problem" for finding in findings)

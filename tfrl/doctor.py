"""The doctor: gathers facts about this machine's TensorFlow install, then judges them.

    facts = gather_facts(logical_cpus=1)        # imports TF, times a matmul per device, compiles with XLA
    findings = diagnose(facts)                  # pure: one small check function per known problem
    print(format_report(facts, findings))       # or to_json(facts, findings)

Gathering never raises for a broken install (a failed TensorFlow import is a fact
too), and it imports TensorFlow only inside gather_facts, so this module loads
where TF does not. Every check is a pure function of `Facts`, so each can be
tested with fabricated facts (a ROCm build with no GPU, two TF wheels, ...).

A finding is a "problem" (scripts/doctor.py exits 1) or a "note" (worth knowing,
not wrong: the process still exits 0). Each carries the fix.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import platform
import re
import shutil
import statistics
import time
from typing import Callable, Mapping

from tfrl import cpu_features

# Every PyPI distribution that ships the `tensorflow` package: two of them in one environment
# overwrite each other's files, and which one wins depends on install order.
TF_DISTRIBUTIONS = (
    "tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-rocm", "tensorflow-intel",
    "tensorflow-macos", "tensorflow-cpu-aws", "intel-tensorflow", "tf-nightly", "tf-nightly-cpu",
)
# `tensorflow` itself depends on these on some platforms (Windows, older macOS): not a conflict.
TF_COMPANIONS = frozenset({"tensorflow-intel", "tensorflow-macos"})
ZENTF_DISTRIBUTIONS = ("zentf", "zentf-weekly")
# The distributions the doctor reports, and whose requirements it checks against what is installed.
STACK_DISTRIBUTIONS = (*TF_DISTRIBUTIONS, *ZENTF_DISTRIBUTIONS, "keras", "tf-keras", "ml-dtypes", "numpy",
                       "tensorboard", "gymnasium", "tfrl")

# Always reported (None when unset), so that --json has stable keys.
ENVIRONMENT_VARIABLES = (
    "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "TF_FORCE_GPU_ALLOW_GROWTH",
    "HSA_OVERRIDE_GFX_VERSION", "MIOPEN_USER_DB_PATH", "MIOPEN_CUSTOM_CACHE_DIR", "KERAS_BACKEND",
    "TF_USE_LEGACY_KERAS", "TF_ENABLE_ONEDNN_OPTS", "TF_ENABLE_ZENDNN_OPTS", "TF_XLA_FLAGS", "XLA_FLAGS",
    "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS", "OMP_DYNAMIC", "OMP_PROC_BIND",
    "OMP_WAIT_POLICY", "GOMP_CPU_AFFINITY", "TF_CPP_MIN_LOG_LEVEL",
)
# Reported too when set: other MIOpen (ROCm kernels' cache), ZenDNN and OpenMP/KMP knobs.
ENVIRONMENT_PREFIXES = ("MIOPEN_", "ZENDNN", "ZEN_", "USE_ZENDNN", "OMP_", "KMP_")

MATMUL_SIZE = 256  # n of the timed n x n @ n x n float32 matmul: 2 n^3 = 33.6 MFLOP
MATMUL_REPEATS = 30


@dataclasses.dataclass(frozen=True)
class MatmulTiming:
    """A float32 n x n @ n x n matmul on one logical device."""

    device: str  # logical device, e.g. "/device:CPU:0"
    size: int  # n
    median_ms: float | None  # wall time of one matmul (median of MATMUL_REPEATS), including the copy to host
    gflops: float | None  # 2 n^3 / median time
    max_abs_error: float | None  # against NumPy's float64 product of the same inputs
    error: str | None  # first line of the exception, if the matmul failed


@dataclasses.dataclass(frozen=True)
class ZentfFacts:
    """AMD's ZenDNN plugin. It adds no device type: it registers CPU kernels and a graph optimizer."""

    distribution: str  # "zentf" or "zentf-weekly"
    version: str
    built_for_tf: str | None  # the TF version it was built against (zentf/_build_info.py), None = unknown
    plugin_library: str | None  # tensorflow-plugins/libamdcpu_plugin.so that TF loads at import; None = missing


@dataclasses.dataclass(frozen=True)
class UnmetRequirement:
    """An installed distribution's requirement that the installed version of another does not meet."""

    holder: str  # e.g. "zentf"
    holder_version: str  # "2.21.0.0"
    requirement: str  # as declared, without markers: "numpy==1.26.4"
    name: str  # the required distribution, normalized: "numpy"
    installed: str | None  # its installed version; None = not installed

    def __str__(self) -> str:
        found = f"installed: {self.name} {self.installed}" if self.installed else f"{self.name} is not installed"
        return f"{self.holder} {self.holder_version} requires {self.requirement}; {found}"


@dataclasses.dataclass(frozen=True)
class Facts:
    """What gather_facts found. Plain data: JSON-serializable through dataclasses.asdict."""

    python_version: str
    cpu_vendor: str | None  # /proc/cpuinfo vendor_id: "GenuineIntel", "AuthenticAMD"; None = unknown
    cpu_model: str | None  # /proc/cpuinfo model name
    distributions: dict[str, str]  # installed STACK_DISTRIBUTIONS -> version
    unsatisfied_requirements: tuple[UnmetRequirement, ...]
    tensorflow_error: str | None  # why `import tensorflow` failed; None = it imported
    tf_version: str | None
    keras_version: str | None
    build_flavour: str | None  # tfrl.runtime.build_flavour(): "CPU", "CUDA 12.5/cuDNN 9", "ROCm 6.1"
    build_info: dict[str, str]  # tf.sysconfig.get_build_info(), values as strings
    physical_devices: tuple[str, ...]
    logical_devices: tuple[str, ...]
    pluggable_devices: tuple[str, ...]  # tfrl.runtime.pluggable_devices()
    zentf: ZentfFacts | None  # None = not installed
    xla_compiles: bool | None  # a small jit_compile'd function ran and matched; None = not tried (no TF)
    xla_error: str | None
    matmul: tuple[MatmulTiming, ...]  # one per logical device
    environment: dict[str, str | None]
    gpu_tools: dict[str, str | None]  # rocminfo, nvidia-smi: path on PATH, None = absent
    kfd: str  # /dev/kfd, the ROCm kernel driver's device: "ok", "absent" or "no access"
    cpu_bf16: tuple[str, ...] = ()  # the CPU's bfloat16 instruction flags (tfrl.cpu_features.bf16_flags())


@dataclasses.dataclass(frozen=True)
class Finding:
    check: str  # name of the check function without "check_"
    severity: str  # "problem" (exit 1) or "note"
    message: str
    fix: str


# --- gathering (impure) -----------------------------------------------------------------------------


def _normalize(name: str) -> str:
    """PEP 503 name: "tensorflow_cpu" -> "tensorflow-cpu"."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_distributions() -> dict[str, str]:
    """Every installed distribution, normalized name -> version (first found on sys.path wins, like import)."""
    found: dict[str, str] = {}
    for distribution in importlib.metadata.distributions():
        name = distribution.metadata["Name"]
        if name:
            found.setdefault(_normalize(name), distribution.version)
    return found


def unsatisfied_requirements(installed: dict[str, str],
                             of: tuple[str, ...] = STACK_DISTRIBUTIONS) -> list[UnmetRequirement]:
    """Requirements of the installed `of` distributions that the installed versions do not meet."""
    from packaging.requirements import Requirement
    from packaging.version import InvalidVersion

    unmet = []
    for holder in of:
        if holder not in installed:
            continue
        for line in importlib.metadata.requires(holder) or ():
            requirement = Requirement(line)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue  # an extra's requirement, or another platform's
            name = _normalize(requirement.name)
            have = installed.get(name)
            try:
                satisfied = have is not None and requirement.specifier.contains(have, prereleases=True)
            except InvalidVersion:
                continue
            if not satisfied:
                requirement.marker = None
                unmet.append(UnmetRequirement(holder, installed[holder], str(requirement), name, have))
    return unmet


def _cpu_identity() -> tuple[str | None, str | None]:
    """(vendor_id, model name) from /proc/cpuinfo; (None, platform.processor()) elsewhere."""
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return None, platform.processor() or None
    fields = dict(re.findall(r"^(vendor_id|model name)\s*:\s*(.*)$", text, re.MULTILINE))
    return fields.get("vendor_id"), fields.get("model name")


def _relevant_environment(environment: Mapping[str, str]) -> dict[str, str | None]:
    values = {name: environment.get(name) for name in ENVIRONMENT_VARIABLES}
    for name in sorted(environment):
        if name.startswith(ENVIRONMENT_PREFIXES):
            values.setdefault(name, environment[name])
    return values


def _kfd_state() -> str:
    kfd = pathlib.Path("/dev/kfd")
    if not kfd.exists():
        return "absent"
    return "ok" if os.access(kfd, os.R_OK | os.W_OK) else "no access"


def _zentf_facts(installed: dict[str, str]) -> ZentfFacts | None:
    """Read without importing zentf (its __init__ imports TF and warns)."""
    distribution = next((name for name in ZENTF_DISTRIBUTIONS if name in installed), None)
    if distribution is None:
        return None
    built_for, plugin = None, None
    spec = importlib.util.find_spec("zentf")
    if spec is not None and spec.submodule_search_locations:
        package_dir = pathlib.Path(next(iter(spec.submodule_search_locations)))
        build_info = package_dir / "_build_info.py"
        if build_info.exists():
            for node in ast.parse(build_info.read_text()).body:
                if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                        and any(getattr(t, "id", None) == "__tf_version__" for t in node.targets)):
                    built_for = str(node.value.value)
        library = package_dir.parent / "tensorflow-plugins" / "libamdcpu_plugin.so"
        plugin = str(library) if library.exists() else None
    return ZentfFacts(distribution, installed[distribution], built_for, plugin)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def _try_xla(tf) -> tuple[bool, str | None]:
    """Compiles a small dense layer with XLA and compares it with the same function without XLA."""
    x = tf.reshape(tf.range(24, dtype=tf.float32) / 24.0, (4, 6))
    w = tf.reshape(tf.range(18, dtype=tf.float32) / 18.0 - 0.5, (6, 3))

    def layer(x, w):
        return tf.nn.relu(tf.matmul(x, w) + 0.1)

    try:
        compiled = tf.function(layer, jit_compile=True)(x, w).numpy()
    except Exception as error:  # XLA reports missing kernels, ptxas or ROCm-device-lib problems as many types
        return False, _first_line(error)
    expected = layer(x, w).numpy()
    if not (abs(compiled - expected) <= 1e-5).all():
        return False, f"jit_compile result differs from the uncompiled one by {abs(compiled - expected).max():.3g}"
    return True, None


def _time_matmul(tf, device: str, size: int) -> MatmulTiming:
    import numpy as np

    rng = np.random.default_rng(0)
    a_host, b_host = (rng.standard_normal((size, size)).astype(np.float32) for _ in range(2))
    try:
        with tf.device(device):
            a, b = tf.constant(a_host), tf.constant(b_host)
            matmul = tf.function(tf.matmul)
            product = matmul(a, b).numpy()  # trace, warm up, check
            times = []
            for _ in range(MATMUL_REPEATS):
                start = time.perf_counter()
                matmul(a, b).numpy()  # .numpy() waits for the device
                times.append(time.perf_counter() - start)
    except Exception as error:  # a broken GPU runtime fails here with a variety of error types
        return MatmulTiming(device, size, None, None, None, _first_line(error))
    median = statistics.median(times)
    error = float(np.abs(product - a_host.astype(np.float64) @ b_host.astype(np.float64)).max())
    return MatmulTiming(device, size, median * 1e3, 2 * size**3 / median / 1e9, error, None)


def gather_facts(logical_cpus: int = 1, matmul_size: int = MATMUL_SIZE,
                 environment: Mapping[str, str] | None = None) -> Facts:
    """Everything the checks look at. Imports TensorFlow and initializes its devices (once per process).

    logical_cpus > 1 splits the CPU into logical devices (tfrl.runtime), each timed separately.
    environment: the user's variables to report and judge (default os.environ); scripts/doctor.py passes a
    copy taken before `import tfrl` sets KERAS_BACKEND.
    """
    installed = installed_distributions()
    facts = dict(
        python_version=platform.python_version(),
        cpu_vendor=None, cpu_model=None,
        distributions={name: installed[name] for name in STACK_DISTRIBUTIONS if name in installed},
        unsatisfied_requirements=tuple(unsatisfied_requirements(installed)),
        tensorflow_error=None, tf_version=None, keras_version=None, build_flavour=None, build_info={},
        physical_devices=(), logical_devices=(), pluggable_devices=(),
        zentf=_zentf_facts(installed), xla_compiles=None, xla_error=None, matmul=(),
        environment=_relevant_environment(os.environ if environment is None else environment),
        gpu_tools={tool: shutil.which(tool) for tool in ("rocminfo", "rocm-smi", "nvidia-smi")},
        kfd=_kfd_state(),
    )
    facts["cpu_vendor"], facts["cpu_model"] = _cpu_identity()
    facts["cpu_bf16"] = cpu_features.bf16_flags()
    try:
        import tensorflow as tf
        import keras
    except Exception as error:  # a broken install raises ImportError, SystemError, AttributeError, ...
        facts["tensorflow_error"] = _first_line(error)
        return Facts(**facts)

    from tfrl import runtime

    # Memory growth: the doctor should not reserve a shared GPU's memory. Raises RuntimeConfigError for a bad
    # logical_cpus, before any device is touched.
    runtime.apply(runtime.RuntimeOptions(memory_growth=True, logical_cpus=logical_cpus))
    facts.update(
        tf_version=tf.__version__, keras_version=keras.__version__, build_flavour=runtime.build_flavour(),
        build_info={key: str(value) for key, value in tf.sysconfig.get_build_info().items()},
        physical_devices=tuple(d.name for d in tf.config.list_physical_devices()),
        logical_devices=tuple(d.name for d in tf.config.list_logical_devices()),
        pluggable_devices=tuple(runtime.pluggable_devices()),
    )
    facts["xla_compiles"], facts["xla_error"] = _try_xla(tf)
    facts["matmul"] = tuple(_time_matmul(tf, name, matmul_size) for name in facts["logical_devices"])
    return Facts(**facts)


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
        "train without --xla (it is off by default); on GPUs, XLA needs ptxas (CUDA) or the ROCm device "
        "libraries on the library path",
    )]


def check_matmul_runs_on_every_device(facts: Facts) -> list[Finding]:
    return [Finding(
        "matmul_runs_on_every_device", "problem",
        f"a {timing.size}x{timing.size} matmul failed on {timing.device}: {timing.error}",
        "avoid this device (--device, --visible_gpus); on a GPU, compare the driver and runtime versions "
        "with the build's (see 'build' above)",
    ) for timing in facts.matmul if timing.error is not None] + [Finding(
        "matmul_runs_on_every_device", "problem",
        f"a {timing.size}x{timing.size} matmul on {timing.device} is off by {timing.max_abs_error:.3g} from NumPy",
        "the device computes wrong results: do not train on it; update its driver",
    ) for timing in facts.matmul
        if timing.max_abs_error is not None and timing.max_abs_error > 1e-3 * timing.size]


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
)


def diagnose(facts: Facts) -> list[Finding]:
    return [finding for check in CHECKS for finding in check(facts)]


def healthy(findings: list[Finding]) -> bool:
    return not any(finding.severity == "problem" for finding in findings)


# --- reporting ------------------------------------------------------------------------------------


def to_json(facts: Facts, findings: list[Finding]) -> str:
    """{"healthy": bool, "findings": [...], "facts": {...}}: keys are Facts' and Finding's field names."""
    return json.dumps({"healthy": healthy(findings), "findings": [dataclasses.asdict(f) for f in findings],
                       "facts": dataclasses.asdict(facts)}, indent=2, sort_keys=True)


def format_report(facts: Facts, findings: list[Finding]) -> str:
    lines = ["tfrl doctor",
             f"  Python {facts.python_version}; CPU: {facts.cpu_model or '?'} ({facts.cpu_vendor or '?'})",
             "  installed: " + (", ".join(f"{n} {v}" for n, v in facts.distributions.items()) or "nothing relevant")]
    if facts.tensorflow_error is None:
        lines += [
            f"  TensorFlow {facts.tf_version}, Keras {facts.keras_version}, "
            f"KERAS_BACKEND={facts.environment.get('KERAS_BACKEND') or 'tensorflow (default)'}",
            f"  build: {facts.build_flavour} ({', '.join(f'{k}={v}' for k, v in facts.build_info.items())})",
            f"  physical devices: {', '.join(facts.physical_devices)}",
            f"  logical devices: {', '.join(facts.logical_devices)}",
            f"  pluggable devices: {', '.join(facts.pluggable_devices) or 'none'}",
        ]
    else:
        lines.append(f"  TensorFlow: import failed ({facts.tensorflow_error})")
    if facts.zentf is not None:
        lines.append(f"  zentf: {facts.zentf.distribution} {facts.zentf.version}, built for TF "
                     f"{facts.zentf.built_for_tf or '?'}, plugin {facts.zentf.plugin_library or 'MISSING'}")
    if facts.xla_compiles is not None:
        lines.append("  XLA: compiles and runs a small function" if facts.xla_compiles
                     else f"  XLA: FAILED ({facts.xla_error})")
    for timing in facts.matmul:
        lines.append(
            f"  matmul {timing.size}x{timing.size} float32 on {timing.device}: "
            + (f"FAILED ({timing.error})" if timing.error else
               f"{timing.median_ms:.3f} ms ({timing.gflops:.1f} GFLOP/s), max |error| vs NumPy {timing.max_abs_error:.2g}"))
    tools = ", ".join(f"{tool}={path or 'absent'}" for tool, path in facts.gpu_tools.items())
    lines.append(f"  GPU tools: {tools}; /dev/kfd: {facts.kfd}")
    lines.append("  environment:")
    lines += [f"    {name}={value}" for name, value in facts.environment.items() if value is not None]
    unset = [name for name, value in facts.environment.items() if value is None]
    if unset:
        lines.append(f"    unset: {' '.join(unset)}")
    problems = sum(f.severity == "problem" for f in findings)
    notes = len(findings) - problems
    verdict = "healthy" if healthy(findings) else "PROBLEMS FOUND"
    lines.append(f"verdict: {verdict} ({problems} problem{'s' * (problems != 1)}, {notes} note{'s' * (notes != 1)})")
    for finding in findings:
        lines += [f"  {finding.severity} [{finding.check}]: {finding.message}", f"    fix: {finding.fix}"]
    return "\n".join(lines)

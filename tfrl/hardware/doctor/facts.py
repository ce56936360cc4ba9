"""What the doctor knows about this machine (Facts and their parts, Finding) and how it finds out: gather_facts
imports TensorFlow, times a matmul per device and compiles with XLA, and never raises for a broken install (a
failed import is a fact too)."""

from __future__ import annotations

import ast
import dataclasses
import importlib.metadata
import importlib.util
import os
import pathlib
import platform
import re
import shutil
import statistics
import subprocess
import time
from typing import Mapping

from tfrl.hardware import cpu_features

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
# Declared requirements of TensorFlow's wheels that running it does not need, so not reported when missing:
# libclang serves TF's build and code generators, and GPU bundles built without a package index leave it out.
NOT_NEEDED_TO_RUN = frozenset({"libclang"})


def product_tolerance(device: str, length: int, tf32: bool | None) -> float:
    """The largest relative error (|error| / (|A| @ |B|)) that rounding allows a float32 product of `length`-term
    dot products on `device`: each input rounded once (to TensorFloat-32's 10 mantissa bits on a GPU with TF32 on:
    unit 2**-11; else float32's 2**-24) and each of the sums, with a margin of 4. A device computing wrong
    results misses it by orders of magnitude."""
    inputs = 2.0**-11 if tf32 and ":GPU:" in device else 2.0**-24
    return 4 * (2 * inputs + length * 2.0**-24)


@dataclasses.dataclass(frozen=True)
class MatmulTiming:
    """A float32 n x n @ n x n matmul on one logical device."""

    device: str  # logical device, e.g. "/device:CPU:0"
    size: int  # n
    median_ms: float | None  # wall time of one matmul (median of MATMUL_REPEATS), including the copy to host
    gflops: float | None  # 2 n^3 / median time
    max_abs_error: float | None  # against NumPy's float64 product of the same inputs
    error: str | None  # first line of the exception, if the matmul failed
    # max over entries of |error| / (|A| @ |B|): what rounding bounds (checks.product_tolerance), whatever the
    # size of the numbers
    relative_error: float | None = None


@dataclasses.dataclass(frozen=True)
class ZentfFacts:
    """AMD's ZenDNN plugin. It adds no device type: it registers CPU kernels and a graph optimizer."""

    distribution: str  # "zentf" or "zentf-weekly"
    version: str
    built_for_tf: str | None  # the TF version it was built against (zentf/_build_info.py), None = unknown
    plugin_library: str | None  # tensorflow-plugins/libamdcpu_plugin.so that TF loads at import; None = missing


@dataclasses.dataclass(frozen=True)
class Ptxas:
    """CUDA's PTX assembler, which XLA runs to compile for NVIDIA GPUs."""

    path: str
    version: str | None  # "12.5.82" (from `ptxas --version`); None = it did not say


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
    build_flavour: str | None  # tfrl.hardware.runtime.build_flavour(): "CPU", "CUDA 12.5/cuDNN 9", "ROCm 6.1"
    build_info: dict[str, str]  # tf.sysconfig.get_build_info(), values as strings
    physical_devices: tuple[str, ...]
    logical_devices: tuple[str, ...]
    pluggable_devices: tuple[str, ...]  # tfrl.hardware.runtime.pluggable_devices()
    zentf: ZentfFacts | None  # None = not installed
    xla_compiles: bool | None  # a small jit_compile'd function ran and matched; None = not tried (no TF)
    xla_error: str | None
    matmul: tuple[MatmulTiming, ...]  # one per logical device
    environment: dict[str, str | None]
    gpu_tools: dict[str, str | None]  # rocminfo, nvidia-smi: path on PATH, None = absent
    kfd: str  # /dev/kfd, the ROCm kernel driver's device: "ok", "absent" or "no access"
    cpu_bf16: tuple[str, ...] = ()  # the CPU's bfloat16 instruction flags (tfrl.hardware.cpu_features.bf16_flags())
    tf32_enabled: bool | None = None  # TensorFloat-32 for float32 matmuls on GPUs; None = not asked (no TF)
    ptxas: Ptxas | None = None  # the ptxas XLA would find; None = none found, or not a CUDA build


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
            if name in NOT_NEEDED_TO_RUN:
                continue
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


def _try_xla(tf, devices: tuple[str, ...], tf32: bool) -> tuple[bool, str | None]:
    """Compiles a small dense layer with XLA on each logical device; both it and the uncompiled layer must match
    NumPy's float64 result within what rounding allows there (checks.product_tolerance)."""
    import numpy as np

    x_host = (np.arange(24, dtype=np.float32) / 24.0).reshape(4, 6)
    w_host = (np.arange(18, dtype=np.float32) / 18.0 - 0.5).reshape(6, 3)
    expected = np.maximum(x_host.astype(np.float64) @ w_host + 0.1, 0.0)
    scale = np.abs(x_host).astype(np.float64) @ np.abs(w_host) + 0.1  # what the rounding errors scale with

    def layer(x, w):
        return tf.nn.relu(tf.matmul(x, w) + 0.1)

    for device in devices:
        try:
            with tf.device(device):
                x, w = tf.constant(x_host), tf.constant(w_host)
                results = {"compiled": tf.function(layer, jit_compile=True)(x, w).numpy(),
                           "uncompiled": layer(x, w).numpy()}
        except Exception as error:  # XLA reports missing kernels, ptxas or ROCm-device-lib problems as many types
            return False, f"on {device}: {_first_line(error)}"
        limit = product_tolerance(device, 6, tf32)
        for name, result in results.items():
            relative = float((np.abs(result - expected) / scale).max())
            if relative > limit:
                return False, (f"on {device}: the {name} result is off by {relative:.3g} relative to NumPy's "
                               f"float64 one (rounding allows {limit:.3g})")
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
    error = np.abs(product - a_host.astype(np.float64) @ b_host.astype(np.float64))
    relative = float((error / (np.abs(a_host).astype(np.float64) @ np.abs(b_host))).max())
    return MatmulTiming(device, size, median * 1e3, 2 * size**3 / median / 1e9, float(error.max()), None, relative)


def find_ptxas(environment: Mapping[str, str]) -> Ptxas | None:
    """The first ptxas of: XLA_FLAGS' --xla_gpu_cuda_data_dir, the nvidia-cuda-nvcc-cu12 wheel, PATH."""
    candidates = []
    data_dir = re.search(r"--xla_gpu_cuda_data_dir=(\S+)", environment.get("XLA_FLAGS") or "")
    if data_dir:
        candidates.append(pathlib.Path(data_dir.group(1)) / "bin" / "ptxas")
    nvcc = importlib.util.find_spec("nvidia.cuda_nvcc") if importlib.util.find_spec("nvidia") else None
    if nvcc is not None and nvcc.submodule_search_locations:
        candidates += [pathlib.Path(location) / "bin" / "ptxas" for location in nvcc.submodule_search_locations]
    on_path = shutil.which("ptxas", path=environment.get("PATH"))
    candidates += [pathlib.Path(on_path)] if on_path else []
    path = next((candidate for candidate in candidates if candidate.is_file()), None)
    if path is None:
        return None
    try:
        output = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        output = ""
    version = re.search(r"V(\d+\.\d+\.\d+)", output)
    return Ptxas(str(path), version.group(1) if version else None)


def gather_facts(logical_cpus: int = 1, matmul_size: int = MATMUL_SIZE,
                 environment: Mapping[str, str] | None = None) -> Facts:
    """Everything the checks look at. Imports TensorFlow and initializes its devices (once per process).

    logical_cpus > 1 splits the CPU into logical devices (tfrl.hardware.runtime), each timed separately.
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

    from tfrl.hardware import runtime

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
    facts["tf32_enabled"] = bool(tf.config.experimental.tensor_float_32_execution_enabled())
    facts["xla_compiles"], facts["xla_error"] = _try_xla(tf, facts["logical_devices"], facts["tf32_enabled"])
    if facts["build_info"].get("is_cuda_build") == "True":
        facts["ptxas"] = find_ptxas(os.environ if environment is None else environment)
    facts["matmul"] = tuple(_time_matmul(tf, name, matmul_size) for name in facts["logical_devices"])
    return Facts(**facts)

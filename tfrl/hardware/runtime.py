"""Global TensorFlow hardware state: devices, GPU memory, precision, threads.

A launcher calls `apply(options_from_flags())` once, before any TF op; nothing
else in tfrl touches `tf.config` or the Keras precision policy. TF freezes its
device configuration when the runtime first initializes (the first op, or the
first `tf.config.list_logical_devices()`), so a later `apply()` succeeds only
if it asks for the state already in force; anything else is a
RuntimeConfigError rather than TF's bare RuntimeError.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import importlib.metadata
import importlib.util
import os
import re
import sys
import textwrap
import typing

from absl import logging
import numpy as np

from tfrl import errors
from tfrl.hardware import distribute, precision
from tfrl.lazy_import import LazyModule

# Imported at the first use, not with this module: launchers define and check their flags first,
# so bad input is reported before TensorFlow's import, which takes seconds.
keras = LazyModule("keras")
tf = LazyModule("tensorflow")

PRECISION_POLICIES = precision.POLICIES
MAX_THREADS = 4096  # per thread pool; TF takes an int32, and more threads than this is a typo, not a machine
_DEVICE_PATTERN = re.compile(r"(auto|cpu|gpu)(?::(\d+))?")


class RuntimeConfigError(errors.UsageError):
    """A runtime option is invalid, or cannot be applied to this process."""


@dataclasses.dataclass(frozen=True)
class RuntimeOptions:
    """Where and how TensorFlow runs. One field per command-line flag, same name: the commands define the flags
    from these fields, their types and the docstring under each (tfrl.commands.runtime_flags)."""

    device: str = "auto"
    """Placement of variables and the train step: auto (first GPU, else CPU:0), cpu, cpu:N, gpu, gpu:N (the N-th
    logical device of that type, after --visible_gpus and --logical_cpus)."""
    visible_gpus: str | None = None
    """Physical GPU indices TF may use, e.g. "0,1"; empty string = CPU only; unset = all GPUs."""
    memory_growth: bool = False
    """Allocate GPU memory on demand instead of reserving it all at start-up (each visible GPU)."""
    gpu_memory_limit_mb: int | None = None
    """Memory cap per visible GPU, in MiB; unset = no cap. Not combinable with --memory_growth."""
    mixed_precision: str | None = None
    """Keras dtype policy: float32, mixed_float16 (turns on loss scaling) or mixed_bfloat16. Unset: as the preset
    says (sac-pendulum: mixed_bfloat16 when it trains on a CPU with bfloat16 instructions), else float32."""
    xla: bool | None = None
    """Compile the train step with XLA (jit_compile). Unset: as the preset says (the dqn-lunarlander preset turns
    it on), else on where the train step runs on a CUDA GPU and off on a CPU or ROCm; --noxla turns it off."""
    tf32: bool | None = None
    """TensorFloat-32 for float32 matmuls and convolutions on NVIDIA GPUs from Ampere on (inputs rounded to 10
    mantissa bits, float32 sums); --notf32 computes in full float32. Unset: as the process has it (TensorFlow's
    default: on). No effect on CPUs or older GPUs."""
    intra_op_threads: int = 0
    """Threads used inside one op, e.g. a matmul; 0 = TF default (one per core)."""
    inter_op_threads: int = 0
    """Number of ops run in parallel; 0 = TF default."""
    logical_cpus: int = 1
    """Split the CPU into this many logical devices (to test multi-device code without GPUs)."""
    strategy: str = "default"
    """Distribution: default (none), one_device, mirrored (all visible GPUs, else the logical CPUs) or
    multi_worker (the processes in TF_CONFIG). See docs/distributed.md."""
    cross_device_ops: str = "auto"
    """All-reduce between one machine's devices, --strategy=mirrored only: auto, nccl (RCCL on ROCm builds),
    hierarchical_copy or reduce_to_one."""
    collective: str = "auto"
    """All-reduce between workers, --strategy=multi_worker only: auto, ring or nccl."""
    deterministic: bool = False
    """TF op determinism: with --seed, two runs of one command on the same machine give identical metrics and
    weights (slower on GPUs; see docs/reliability.md)."""


def option_types() -> dict[str, type]:
    """{field: its type without None} of RuntimeOptions: what its flag parses and what config.json holds."""
    hints = typing.get_type_hints(RuntimeOptions)
    types = {}
    for field in dataclasses.fields(RuntimeOptions):
        kinds = [kind for kind in typing.get_args(hints[field.name]) if kind is not type(None)]
        types[field.name] = kinds[0] if kinds else hints[field.name]
    return types


def _parse_device(device: str) -> tuple[str, int | None]:
    """"gpu:1" -> ("gpu", 1); "cpu" -> ("cpu", None)."""
    match = _DEVICE_PATTERN.fullmatch(device)
    if match is None or (match.group(1) == "auto" and match.group(2) is not None):
        raise RuntimeConfigError(
            f"--device: cannot parse {device!r}; choose one of auto, cpu, cpu:N, gpu, gpu:N"
        )
    index = match.group(2)
    return match.group(1), None if index is None else int(index)


def _parse_visible_gpus(visible_gpus: str | None) -> list[int] | None:
    """"0,1" -> [0, 1]; "" -> []; None -> None (leave TF's default)."""
    if visible_gpus is None:
        return None
    if not visible_gpus.strip():
        return []
    indices = []
    for item in visible_gpus.split(","):
        if not (item.strip().isascii() and item.strip().isdigit()):
            raise RuntimeConfigError(
                f"--visible_gpus: {item.strip()!r} in {visible_gpus!r} is not a GPU index; "
                'expected comma-separated integers >= 0 such as "0,1", or "" for CPU only'
            )
        indices.append(int(item))
    if len(set(indices)) != len(indices):
        raise RuntimeConfigError(f"--visible_gpus: {visible_gpus!r} lists a GPU twice")
    return indices


def validate_options(options: RuntimeOptions) -> None:
    """Checks that need no TF device initialization; raises RuntimeConfigError or DistributeConfigError."""
    kind, index = _parse_device(options.device)
    if options.mixed_precision not in (None, *PRECISION_POLICIES):
        raise RuntimeConfigError(
            f"--mixed_precision: unknown policy {options.mixed_precision!r}; "
            f"choose one of {', '.join(PRECISION_POLICIES)}"
        )
    _parse_visible_gpus(options.visible_gpus)
    if options.gpu_memory_limit_mb is not None and options.gpu_memory_limit_mb <= 0:
        raise RuntimeConfigError(
            f"--gpu_memory_limit_mb: must be a positive number of MiB, got "
            f"{options.gpu_memory_limit_mb}; leave it unset for no limit"
        )
    if options.memory_growth and options.gpu_memory_limit_mb is not None:
        # TF refuses memory growth on a GPU that has a logical-device memory limit.
        raise RuntimeConfigError(
            "--memory_growth and --gpu_memory_limit_mb cannot be combined "
            "(TensorFlow allows only one of them per GPU); pick one"
        )
    for flag in ("intra_op_threads", "inter_op_threads"):
        if not 0 <= getattr(options, flag) <= MAX_THREADS:
            raise RuntimeConfigError(
                f"--{flag}: must be in [0, {MAX_THREADS}] (0 = TF default), got {getattr(options, flag)}"
            )
    if options.logical_cpus < 1:
        raise RuntimeConfigError(f"--logical_cpus: must be >= 1, got {options.logical_cpus}")
    if kind == "cpu" and index is not None and index >= options.logical_cpus:
        raise RuntimeConfigError(
            f"--device={options.device} but --logical_cpus={options.logical_cpus} makes only "
            f"CPU:0..CPU:{options.logical_cpus - 1}; raise --logical_cpus to at least {index + 1}"
        )
    _cluster_task(options)


def _cluster_task(options: RuntimeOptions) -> distribute.ClusterTask:
    """This process's place in the cluster (from TF_CONFIG for --strategy=multi_worker); validates the strategy flags."""
    return distribute.validate(options.strategy, options.device, options.cross_device_ops, options.collective,
                               os.environ.get("TF_CONFIG"))


@contextlib.contextmanager
def _unless_initialized(setting: str, current: str):
    """Turns TF's "cannot be modified after being initialized" into a usage error."""
    try:
        yield
    except RuntimeError as error:
        raise RuntimeConfigError(
            f"cannot apply {setting}: TensorFlow devices are already initialized with "
            f"{current}; call tfrl.hardware.runtime.apply() once per process, before any TF op"
        ) from error


def _short_name(device) -> str:
    """"/physical_device:GPU:0" or "/device:GPU:0" -> "GPU:0"."""
    return device.name.split("device:", 1)[-1]


def _set_threads(options: RuntimeOptions) -> None:
    threading = tf.config.threading
    for flag, requested, get, set_ in (
        ("intra_op_threads", options.intra_op_threads,
         threading.get_intra_op_parallelism_threads, threading.set_intra_op_parallelism_threads),
        ("inter_op_threads", options.inter_op_threads,
         threading.get_inter_op_parallelism_threads, threading.set_inter_op_parallelism_threads),
    ):
        # TF raises even for an unchanged value once initialized (its default is
        # None, not 0), so compare before setting.
        if requested != get():
            with _unless_initialized(f"--{flag}={requested}", f"{flag}={get()}"):
                set_(requested)


def _set_visible_gpus(visible_gpus: str | None) -> list:
    """Returns the physical GPUs TF will use."""
    physical_gpus = tf.config.list_physical_devices("GPU")
    indices = _parse_visible_gpus(visible_gpus)
    if indices is None:
        return tf.config.get_visible_devices("GPU")
    for index in indices:
        if index >= len(physical_gpus):
            raise RuntimeConfigError(
                f"--visible_gpus={visible_gpus} names GPU {index}, but this machine has "
                f"{len(physical_gpus)} physical GPU(s) (TF build: {build_flavour()})"
            )
    wanted = [physical_gpus[index] for index in indices]
    current = ",".join(_short_name(gpu) for gpu in tf.config.get_visible_devices("GPU"))
    with _unless_initialized(f"--visible_gpus={visible_gpus}", f"visible GPUs [{current}]"):
        tf.config.set_visible_devices(wanted, "GPU")
    return wanted


def _set_gpu_memory(gpus: list, options: RuntimeOptions) -> None:
    limit = options.gpu_memory_limit_mb
    for gpu in gpus:
        if bool(tf.config.experimental.get_memory_growth(gpu)) != options.memory_growth:
            with _unless_initialized(
                f"--memory_growth={options.memory_growth}", f"a different memory growth on {_short_name(gpu)}"
            ):
                tf.config.experimental.set_memory_growth(gpu, options.memory_growth)
        current = tf.config.get_logical_device_configuration(gpu)
        if limit is None:
            if current is not None:  # set by an earlier apply(); TF has no public way to undo it
                raise RuntimeConfigError(
                    f"cannot drop --gpu_memory_limit_mb: {_short_name(gpu)} already has "
                    f"{current[0].memory_limit} MiB from an earlier apply() in this process"
                )
            continue
        current_limit = "no memory limit" if current is None else f"{current[0].memory_limit} MiB"
        with _unless_initialized(f"--gpu_memory_limit_mb={limit}", f"{current_limit} on {_short_name(gpu)}"):
            # TF accepts an identical configuration after initialization.
            tf.config.set_logical_device_configuration(
                gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=limit)]
            )


def _set_logical_cpus(logical_cpus: int) -> None:
    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu)
    if logical_cpus == 1 and current is None:
        return  # TF's default: one logical CPU; nothing to configure
    current_count = 1 if current is None else len(current)
    with _unless_initialized(f"--logical_cpus={logical_cpus}", f"{current_count} logical CPU(s)"):
        # TF accepts an identical configuration after initialization.
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(logical_cpus)]
        )


def trains_on_cpu(options: RuntimeOptions) -> bool:
    """Whether the train step will run on a CPU: --device=cpu[:N], or auto with no GPU visible. On Linux without
    a GPU's device files it is known without importing TensorFlow (seconds); else it lists the physical GPUs only,
    which leaves the TF runtime uninitialized (apply can still configure it)."""
    kind, _ = _parse_device(options.device)
    if kind != "auto":
        return kind == "cpu"
    if options.visible_gpus == "" or no_gpu_device_files():
        return True
    return not tf.config.list_physical_devices("GPU")


def no_gpu_device_files() -> bool:
    """Linux without the device files any GPU TensorFlow can use needs: NVIDIA's /dev/nvidiaN, ROCm's /dev/kfd,
    WSL2's /dev/dxg. False elsewhere (not known without asking TensorFlow)."""
    if not sys.platform.startswith("linux"):
        return False
    return not glob.glob("/dev/nvidia[0-9]*") and not os.path.exists("/dev/kfd") and not os.path.exists("/dev/dxg")


def _resolve_device(device: str) -> str:
    """"auto" / "gpu:1" / ... -> a logical device name such as "/device:GPU:1"."""
    kind, index = _parse_device(device)
    if kind == "auto":
        kind = "gpu" if tf.config.list_logical_devices("GPU") else "cpu"
    logical = tf.config.list_logical_devices(kind.upper())  # initializes the TF runtime
    index = index or 0
    if index < len(logical):
        return logical[index].name
    names = ", ".join(_short_name(d) for d in logical)
    if kind == "gpu" and not logical:
        raise RuntimeConfigError(
            f"--device={device} but no GPU is visible (TF build: {build_flavour()}, "
            f"physical GPUs: {len(tf.config.list_physical_devices('GPU'))}); "
            "use --device=cpu or --device=auto, or check --visible_gpus"
        )
    if kind == "gpu":
        raise RuntimeConfigError(
            f"--device={device} but only {len(logical)} GPU is visible ({names})"
            if len(logical) == 1
            else f"--device={device} but only {len(logical)} GPUs are visible ({names})"
        )
    raise RuntimeConfigError(
        f"--device={device} but only {len(logical)} logical CPU(s) exist ({names}); "
        f"raise --logical_cpus to at least {index + 1}"
    )


@dataclasses.dataclass(frozen=True)
class Runtime:
    """The applied options and the resolved placement of variables and steps."""

    options: RuntimeOptions
    device_name: str  # logical device, e.g. "/device:CPU:0" or "/device:GPU:1"
    # None for --strategy=default: no tf.distribute strategy, variables and steps on device_name.
    strategy: tf.distribute.Strategy | None = None
    cluster: distribute.ClusterTask = distribute.SINGLE_PROCESS

    def scope(self):
        """Context manager for building variables (and the optimizer: before the first step) and running steps."""
        return tf.device(self.device_name) if self.strategy is None else self.strategy.scope()

    @property
    def local_replicas(self) -> int:
        """Replicas of the learner in this process (devices the strategy uses here)."""
        return 1 if self.strategy is None else len(self.strategy.extended.worker_devices)

    def worker_seed(self, seed: int) -> int:
        """Seed of this worker's envs, exploration and replay: `seed` on the chief, a distinct one on each other
        worker, so that workers do not collect identical episodes."""
        if self.cluster.rank == 0:
            return seed
        return int(np.random.SeedSequence([seed, self.cluster.rank]).generate_state(1)[0] % 2**31)

    def banner(self, choices: typing.Mapping[str, str] | None = None, width: int = 68) -> str:
        """Start-up summary for logs, in lines of at most `width` characters (an 80-column terminal, after the
        log prefix). choices: {option: why it has its value} (tfrl.hardware.runtime_defaults.resolve), shown beside it."""
        choices = choices or {}
        threading = tf.config.threading
        policy = self.options.mixed_precision
        if precision.loss_scaling_needed(policy):
            policy += " (loss scaling on)"
        if "mixed_precision" in choices:
            policy += f" ({choices['mixed_precision']})"
        if tf.config.list_logical_devices("GPU"):
            tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
            policy += f"; TF32 on GPUs: {'on (--notf32 for full float32)' if tf32 else 'off'}"
        xla = "on" if self.options.xla else "off"
        if "xla" in choices:
            xla += f" ({choices['xla']})"
        parts = (
            f"TensorFlow {tf.__version__}, Keras {keras.__version__}, build: {build_flavour()}",
            f"physical devices: {', '.join(_short_name(d) for d in tf.config.list_physical_devices())}; "
            f"pluggable devices: {', '.join(pluggable_devices()) or 'none'}",
            f"logical devices: {', '.join(_short_name(d) for d in tf.config.list_logical_devices())}",
            f"placement: {self.device_name}; XLA: {xla}",
            f"precision: {policy}",
            f"strategy: {distribute.describe(self.strategy, self.cluster)}; "
            f"op determinism: {'on' if self.options.deterministic else 'off'}",
            f"threads: intra-op {threading.get_intra_op_parallelism_threads() or 'TF default'}, "
            f"inter-op {threading.get_inter_op_parallelism_threads() or 'TF default'}",
        )
        lines = ["tfrl runtime:"]
        for part in parts:
            lines += textwrap.wrap(part, width, initial_indent="  ", subsequent_indent="    ")
        return "\n".join(lines)


def build_flavour() -> str:
    """What this TF wheel was built for: "CUDA 12.5/cuDNN 9", "ROCm 6.1" or "CPU"."""
    # TF 2.21 CPU wheels report only is_cuda_build / is_rocm_build / is_tensorrt_build;
    # the version keys exist only in GPU builds, hence .get().
    info = tf.sysconfig.get_build_info()
    if info.get("is_cuda_build"):
        return f"CUDA {info.get('cuda_version', '?')}/cuDNN {info.get('cudnn_version', '?')}"
    if info.get("is_rocm_build"):
        return f"ROCm {info.get('rocm_version', '?')}"
    return "CPU"


def pluggable_devices() -> list[str]:
    """Device plugins: non-CPU/GPU physical devices, plus zentf (it adds no device type)."""
    found = [
        _short_name(d) for d in tf.config.list_physical_devices() if d.device_type not in ("CPU", "GPU")
    ]
    if importlib.util.find_spec("zentf") is not None:
        version = "?"
        for distribution in ("zentf", "zentf-weekly"):
            with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                version = importlib.metadata.version(distribution)
                break
        found.append(f"zentf {version} (ZenDNN plugin)")
    return found


def apply(options: RuntimeOptions) -> Runtime:
    """Validates and applies `options` to this process's TF; call before any TF op. Options left unset take
    their defaults (float32, XLA off)."""
    validate_options(options)
    options = dataclasses.replace(options, mixed_precision=options.mixed_precision or "float32",
                                  xla=bool(options.xla))
    cluster = _cluster_task(options)
    _set_threads(options)
    gpus = _set_visible_gpus(options.visible_gpus)
    _set_gpu_memory(gpus, options)
    _set_logical_cpus(options.logical_cpus)
    strategy = None
    if options.strategy == "multi_worker":
        # Before _resolve_device, whose device listing initializes the TF context: the strategy configures it.
        strategy = distribute.multi_worker_strategy(options.collective, gpus)
    device_name = _resolve_device(options.device)
    if strategy is None:
        strategy = distribute.local_strategy(options.strategy, device_name, options.cross_device_ops)
    if options.tf32 is not None:  # process-wide; read when a matmul or convolution runs, so settable at any time
        tf.config.experimental.enable_tensor_float_32_execution(options.tf32)
    if options.deterministic:
        # Process-wide and irreversible; ops without a deterministic kernel then raise instead of varying.
        tf.config.experimental.enable_op_determinism()
    # Set last, so that a failed apply() leaves the process's Keras policy alone.
    keras.mixed_precision.set_global_policy(options.mixed_precision)
    if options.mixed_precision == "mixed_float16" and "CPU" in device_name:
        logging.warning(
            "mixed_float16 on %s: most CPUs emulate float16 math, so this is slower than float32%s",
            device_name,
            "" if options.xla else "; without --xla far slower (docs/benchmarks.md, precision and XLA)",
        )
    return Runtime(options=options, device_name=device_name, strategy=strategy, cluster=cluster)

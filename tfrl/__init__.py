"""tfrl: reinforcement learning on TensorFlow 2 and Keras 3.

    run = tfrl.train("ppo", "CartPole-v1", hp={"total_env_steps": 50_000})
    policy = tfrl.load_policy(run.run_dir)

tfrl.train, tfrl.load_policy, tfrl.Run, tfrl.Policy (tfrl.api) and tfrl.Callback, tfrl.StopOnReturn
(tfrl.run.callbacks) load at first use, so `import tfrl` stays light: it imports neither TensorFlow nor Keras.
TensorFlow is not a hard dependency (the build is the user's choice), so the first use of what needs it checks
for one and names the extras when it is missing.
"""

import importlib
import importlib.util
import os

__version__ = "0.1.0"

INSTALL_HINT = (
    "tfrl needs a TensorFlow build (2.16 or newer) and none is installed. Pick one:\n"
    "  pip install 'tfrl[cpu]'   # tensorflow-cpu\n"
    "  pip install 'tfrl[cuda]'  # tensorflow[and-cuda], NVIDIA GPUs\n"
    "  pip install 'tfrl[zen]'   # tensorflow-cpu + zentf, AMD EPYC CPUs\n"
    "  ROCm (AMD GPUs): install tensorflow-rocm 2.16+ from AMD's wheel index "
    "(see README), then pip install tfrl"
)

_KERAS_BACKEND_BEFORE = os.environ.get("KERAS_BACKEND")
# Keras 3 runs on several backends; tfrl's training steps are tf.functions. Set before any Keras import.
os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def environment_before_import() -> dict:
    """os.environ as it was before `import tfrl` set KERAS_BACKEND (what tfrl.hardware.doctor judges)."""
    environment = dict(os.environ)
    if _KERAS_BACKEND_BEFORE is None:
        environment.pop("KERAS_BACKEND", None)
    else:
        environment["KERAS_BACKEND"] = _KERAS_BACKEND_BEFORE
    return environment


def has_tensorflow() -> bool:
    return importlib.util.find_spec("tensorflow") is not None


def require_tensorflow() -> None:
    """ImportError naming the fix if TensorFlow is missing or Keras is set to another backend."""
    if not has_tensorflow():
        raise ImportError(INSTALL_HINT)
    if os.environ["KERAS_BACKEND"] != "tensorflow":
        raise ImportError(f"tfrl needs the TensorFlow Keras backend but KERAS_BACKEND="
                          f"{os.environ['KERAS_BACKEND']!r}; unset it or set KERAS_BACKEND=tensorflow")


_LAZY = {"train": "tfrl.api", "Run": "tfrl.api", "Policy": "tfrl.api",
         "Callback": "tfrl.run.callbacks", "StopOnReturn": "tfrl.run.callbacks", "RuntimeOptions": "tfrl.hardware.runtime"}


def load_policy(path, checkpoint=None, best: bool = False, threads: int = 1, allow_non_finite: bool = False):
    """The greedy policy at `path` (tfrl.api.load_policy): a run directory, an exported SavedModel or model
    directory, or a LiteRT (.tflite) or ONNX (.onnx) file, which loads with NumPy and its runtime alone (no
    TensorFlow or Keras is imported; tfrl.models.portable.runtime, on `threads` CPU threads). Every one refuses
    observations with NaN, Inf or numbers beyond float32's range unless allow_non_finite (then the raw outputs
    come back), and action masks with values other than 0 and 1 or a row that allows no action."""
    from tfrl.models.portable import runtime

    if isinstance(path, (str, os.PathLike)) and runtime.is_portable(path):
        if checkpoint is not None or best:
            from tfrl.errors import UsageError

            raise UsageError(f"{path} is a {runtime.FORMATS[os.path.splitext(path)[1]]} file: checkpoint and best "
                             "apply to run directories only")
        return runtime.load(path, threads=threads, allow_non_finite=allow_non_finite)
    require_tensorflow()
    return importlib.import_module("tfrl.api").load_policy(path, checkpoint=checkpoint, best=best,
                                                           allow_non_finite=allow_non_finite)


def __getattr__(name: str):
    if name in _LAZY:
        if _LAZY[name] == "tfrl.api":
            require_tensorflow()
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tfrl' has no attribute {name!r}")

"""tfrl: reinforcement learning on TensorFlow 2 and Keras 3.

    run = tfrl.train("ppo", "CartPole-v1", hp={"total_env_steps": 50_000})
    policy = tfrl.load_policy(run.run_dir)

tfrl.train, tfrl.load_policy, tfrl.Run, tfrl.Policy (tfrl.api) and tfrl.Callback, tfrl.StopOnReturn
(tfrl.callbacks) load at first use, so `import tfrl` stays light. TensorFlow is not a hard dependency (the
build is the user's choice), so the first import checks for one and names the extras when it is missing.
"""

import importlib.util
import os

__version__ = "0.1.0"

_INSTALL_HINT = (
    "tfrl needs a TensorFlow build (2.16 or newer) and none is installed. Pick one:\n"
    "  pip install 'tfrl[cpu]'   # tensorflow-cpu\n"
    "  pip install 'tfrl[cuda]'  # tensorflow[and-cuda], NVIDIA GPUs\n"
    "  pip install 'tfrl[zen]'   # tensorflow-cpu + zentf, AMD EPYC CPUs\n"
    "  ROCm (AMD GPUs): install tensorflow-rocm 2.16+ from AMD's wheel index "
    "(see README), then pip install tfrl"
)

if importlib.util.find_spec("tensorflow") is None:
    raise ImportError(_INSTALL_HINT)

# Keras 3 runs on several backends; tfrl's training steps are tf.functions.
_backend = os.environ.setdefault("KERAS_BACKEND", "tensorflow")
if _backend != "tensorflow":
    raise ImportError(
        f"tfrl needs the TensorFlow Keras backend but KERAS_BACKEND={_backend!r}; "
        "unset it or set KERAS_BACKEND=tensorflow"
    )

_LAZY = {"train": "tfrl.api", "load_policy": "tfrl.api", "Run": "tfrl.api", "Policy": "tfrl.api",
         "Callback": "tfrl.callbacks", "StopOnReturn": "tfrl.callbacks", "RuntimeOptions": "tfrl.runtime"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tfrl' has no attribute {name!r}")

"""tfrl: reinforcement learning on TensorFlow 2 and Keras 3.

TensorFlow is not a hard dependency (the build is the user's choice), so the
first import checks for one and names the extras when it is missing.
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

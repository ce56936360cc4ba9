"""Running a test script in a fresh Python process: what logical devices and strategies need, since TF fixes its
devices when it starts."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

REPO = pathlib.Path(__file__).resolve().parents[1]


def run_json_script(code: str, timeout: float = 600) -> dict:
    """Runs `code` with the repository importable and returns the JSON object of its last stdout line; the test
    fails with the script's stderr if it exits non-zero."""
    completed = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, cwd=REPO,
                               env=dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2"))
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


# A script's start for comparing a learner on two logical CPUs under MirroredStrategy (`mirrored`) with the same
# learner on one device (`single`), on Pendulum's spaces (`env`); the script then builds both and prints JSON.
MIRRORED_PENDULUM_PRELUDE = """
import dataclasses, json
import numpy as np
from tfrl.envs import EnvInfo
from tfrl.hardware import runtime as runtime_lib
from tfrl.hardware.runtime import Runtime
mirrored = runtime_lib.apply(runtime_lib.RuntimeOptions(logical_cpus=2, strategy="mirrored",
                                                        cross_device_ops="reduce_to_one"))
single = Runtime(options=dataclasses.replace(mirrored.options, strategy="default", cross_device_ops="auto"),
                 device_name="/device:CPU:0")
env = EnvInfo("Pendulum-v1", (3,), 0, action_shape=(1,), action_low=(-2.0,), action_high=(2.0,))
"""

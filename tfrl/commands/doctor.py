"""Check this machine's TensorFlow install for tfrl, and say how to fix what is wrong.

    tfrl doctor                  # a report, then a verdict with one fix per problem
    tfrl doctor --json           # the same as JSON (keys: healthy, findings, facts)
    tfrl doctor --logical_cpus=2 # split the CPU in two logical devices and time each

Prints TF/Keras versions, the build (CUDA / ROCm / CPU) and its library versions, physical, logical and
pluggable devices (zentf), whether XLA compiles a small function, a timed matmul on each logical device,
and the environment variables that decide what TF sees (CUDA/HIP/ROCR_VISIBLE_DEVICES, MIOPEN_*, ZENDNN*,
OMP_*, ...). The checks are in tfrl/hardware/doctor.py.

Exit code: 0 = healthy (notes allowed), 1 = at least one problem found, 2 = bad flags.
"""

from __future__ import annotations

import os
import sys

from absl import flags

import tfrl
from tfrl import cli  # no TensorFlow import yet: flag errors are reported at once
from tfrl.errors import UsageError

# The user's environment is what the doctor judges; importing tfrl set KERAS_BACKEND (tfrl runs Keras on
# TensorFlow), so judge the environment as it was before, and let the doctor's own process run on TensorFlow.
USER_ENVIRONMENT = tfrl.environment_before_import()
os.environ["KERAS_BACKEND"] = "tensorflow"

flags.DEFINE_bool("json", False, "Print JSON (stable keys: healthy, findings, facts) instead of the report.")
flags.DEFINE_integer("logical_cpus", 1, "Split the CPU into this many logical devices; the matmul is timed on each.")
flags.DEFINE_integer("matmul_size", 256, "n of the timed n x n float32 matmul.")

FLAGS = flags.FLAGS


def main(argv):
    cli.no_extra_args(argv)
    if FLAGS.matmul_size < 1:
        raise UsageError(f"--matmul_size: must be >= 1, got {FLAGS.matmul_size}")
    if FLAGS.logical_cpus < 1:  # checked here too, so that a bad value exits 2 even when TF cannot import
        raise UsageError(f"--logical_cpus: must be >= 1, got {FLAGS.logical_cpus}")
    if not tfrl.has_tensorflow():
        print(f"{cli.program()}: problem: {tfrl.INSTALL_HINT}", file=sys.stderr)
        sys.exit(1)
    from tfrl.hardware import doctor  # TensorFlow is imported inside gather_facts, and may fail to import

    facts = doctor.gather_facts(logical_cpus=FLAGS.logical_cpus, matmul_size=FLAGS.matmul_size,
                                environment=USER_ENVIRONMENT)
    findings = doctor.diagnose(facts)
    print(doctor.to_json(facts, findings) if FLAGS.json else doctor.format_report(facts, findings), flush=True)
    sys.exit(0 if doctor.healthy(findings) else 1)


def run() -> None:
    cli.run(main, needs_tensorflow=False)


if __name__ == "__main__":
    run()

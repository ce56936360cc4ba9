"""Export a run's greedy policy as a SavedModel in TF Serving's layout.

    tfrl export --run_dir=runs/dqn-CartPole-v1-s0-... --model_name=cartpole --base_path=saved_models

writes saved_models/cartpole/<version>/ (the next integer version) with the policy
the run exports at its end (its best evaluated policy if it keeps one, else its newest
checkpoint's), or the one --checkpoint names: best, last or a checkpoint number N.
See tfrl/models/export.py for the signature and the metadata file.

    tfrl export --run_dir=... --model_name=cartpole --format=saved_model,litert,onnx --litert_quantize=int8

also writes policy.tflite and policy.onnx into the version, each checked against the SavedModel on observations
of the run's env first (tfrl/portable); tfrl.load_policy runs them without TensorFlow.
"""

from __future__ import annotations

import pathlib

from absl import flags

from tfrl import cli, errors  # no TensorFlow yet: flag errors are reported at once
from tfrl.errors import UsageError
from tfrl.models.portable import formats as portable_formats

flags.DEFINE_string("run_dir", None, "The training run to export (required).")
flags.DEFINE_string("checkpoint", None, "Which policy: best (the run's best evaluated policy), last (the newest "
                    "loadable checkpoint) or a checkpoint number N; default: the one the run exports.")
flags.DEFINE_boolean("best", False, "The same as --checkpoint=best.")
flags.DEFINE_string("model_name", None, "Model name: the directory under --base_path (required).")
flags.DEFINE_string("base_path", "saved_models", "TF Serving's model base path; versions go to <base_path>/<model_name>/<N>/.")
flags.DEFINE_multi_string("format", ["saved_model"], "What to write into the version: saved_model (always "
                          "written), litert (policy.tflite), onnx (policy.onnx); comma-separated or repeated.")
flags.DEFINE_string("litert_quantize", "none", "LiteRT weights: none (float32), float16, or int8 (dynamic range).")
flags.DEFINE_boolean("allow_mismatch", False, "Keep a converted file that fails its parity check against the "
                     "SavedModel (the check's result is in tfrl_metadata.json) instead of stopping.")
flags.DEFINE_integer("parity_observations", 1000, "Observations of the run's env the parity check compares on.")

FLAGS = flags.FLAGS


def main(argv):
    cli.no_extra_args(argv)
    if not FLAGS.run_dir or not FLAGS.model_name:
        raise UsageError("--run_dir and --model_name are required, e.g. --run_dir=runs/my-run --model_name=cartpole")
    if not FLAGS.base_path:
        raise UsageError("--base_path must not be empty")
    if not pathlib.Path(FLAGS.run_dir).is_dir():
        raise UsageError(f"run directory {FLAGS.run_dir} does not exist")
    cli.check_run_dir(FLAGS.run_dir)
    cli.check_checkpoint_flag(FLAGS.checkpoint)
    if FLAGS.best and FLAGS.checkpoint not in (None, "best"):
        raise UsageError("give --checkpoint or --best, not both")
    if FLAGS.model_name in (".", "..") or "/" in FLAGS.model_name:
        raise UsageError(f"--model_name must be a plain directory name, got {FLAGS.model_name!r}")
    errors.check_output_dir("base_path", pathlib.Path(FLAGS.base_path))
    if not 1 <= FLAGS.parity_observations <= 100_000:
        raise UsageError(f"--parity_observations must be in [1, 100000], got {FLAGS.parity_observations}")
    asked = [name.strip() for value in FLAGS.format for name in value.split(",") if name.strip()]
    formats = portable_formats.check_request(asked, FLAGS.litert_quantize)
    from tfrl.run import runs  # imports TensorFlow: seconds
    from tfrl.models.portable import convert

    def finisher(env):
        return convert.finisher(formats, FLAGS.litert_quantize, env, FLAGS.allow_mismatch, FLAGS.parity_observations)

    version_dir = runs.export_run(pathlib.Path(FLAGS.run_dir), pathlib.Path(FLAGS.base_path), FLAGS.model_name,
                                  checkpoint=FLAGS.checkpoint, best=FLAGS.best, finisher=finisher if formats else None)
    print(f"exported: {version_dir}", flush=True)
    for name in formats:
        print(f"exported: {version_dir / convert.FILES[name]} ({_parity_line(version_dir, name)})", flush=True)


def _parity_line(version_dir: pathlib.Path, name: str) -> str:
    from tfrl.models import export

    report = export.read_metadata(version_dir)["portable"][name]["parity"]
    shares = [f"{key.removesuffix('_agreement')} agrees on {value:.1%}" for key, value in report.items()
              if key.endswith("_agreement")]
    errors = [f"{key} max error {value:.1e}" for key, value in report["max_error"].items()]
    contested = [f"{report['contested_rows']} near ties not counted"] if report.get("contested_rows") else []
    return f"parity on {report['observations']} observations: " + ", ".join(shares + contested + errors) + (
        "" if report["passed"] else f"; MISMATCH kept by --allow_mismatch: {report['summary']}")


def run() -> None:
    cli.run(main)


if __name__ == "__main__":
    run()

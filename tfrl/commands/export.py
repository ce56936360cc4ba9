"""Export a run's greedy policy as a SavedModel in TF Serving's layout.

    tfrl export --run_dir=runs/dqn-CartPole-v1-s0-... --model_name=cartpole --base_path=saved_models

writes saved_models/cartpole/<version>/ (the next integer version) with the policy
the run exports at its end (its best evaluated policy if it keeps one, else its newest
checkpoint's), or the one --checkpoint names: best, last or a checkpoint number N.
See tfrl/export.py for the signature and the metadata file.
"""

from __future__ import annotations

import pathlib

from absl import flags

from tfrl import cli  # no TensorFlow yet: flag errors are reported at once
from tfrl.errors import UsageError

flags.DEFINE_string("run_dir", None, "The training run to export (required).")
flags.DEFINE_string("checkpoint", None, "Which policy: best (the run's best evaluated policy), last (the newest "
                    "loadable checkpoint) or a checkpoint number N; default: the one the run exports.")
flags.DEFINE_boolean("best", False, "The same as --checkpoint=best.")
flags.DEFINE_string("model_name", None, "Model name: the directory under --base_path (required).")
flags.DEFINE_string("base_path", "saved_models", "TF Serving's model base path; versions go to <base_path>/<model_name>/<N>/.")

FLAGS = flags.FLAGS


def main(argv):
    cli.no_extra_args(argv)
    if not FLAGS.run_dir or not FLAGS.model_name:
        raise UsageError("--run_dir and --model_name are required, e.g. --run_dir=runs/my-run --model_name=cartpole")
    if not FLAGS.base_path:
        raise UsageError("--base_path must not be empty")
    if not pathlib.Path(FLAGS.run_dir).is_dir():
        raise UsageError(f"run directory {FLAGS.run_dir} does not exist")
    cli.check_checkpoint_flag(FLAGS.checkpoint)
    if FLAGS.best and FLAGS.checkpoint not in (None, "best"):
        raise UsageError("give --checkpoint or --best, not both")
    if FLAGS.model_name in (".", "..") or "/" in FLAGS.model_name:
        raise UsageError(f"--model_name must be a plain directory name, got {FLAGS.model_name!r}")
    cli.check_output_dir("base_path", pathlib.Path(FLAGS.base_path))
    from tfrl import runs  # imports TensorFlow: seconds

    version_dir = runs.export_run(pathlib.Path(FLAGS.run_dir), pathlib.Path(FLAGS.base_path), FLAGS.model_name,
                                  checkpoint=FLAGS.checkpoint, best=FLAGS.best)
    print(f"exported: {version_dir}", flush=True)


def run() -> None:
    cli.run(main)


if __name__ == "__main__":
    run()

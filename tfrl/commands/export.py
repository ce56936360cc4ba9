"""Export a run's greedy policy as a SavedModel in TF Serving's layout.

    python scripts/export.py --run_dir=runs/dqn-CartPole-v1-s0-... --model_name=cartpole --base_path=saved_models

writes saved_models/cartpole/<version>/ (the next integer version) from the
newest loadable checkpoint, from --checkpoint=N, or with --best from the run's best
evaluated policy (runs trained with --hp=keep_best_policy=true). See tfrl/export.py
for the signature and the metadata file.
"""

from __future__ import annotations

import pathlib

from absl import flags

from tfrl import cli  # no TensorFlow yet: flag errors are reported at once
from tfrl.errors import UsageError

flags.DEFINE_string("run_dir", None, "The training run to export (required).")
flags.DEFINE_integer("checkpoint", None, "Checkpoint number to export (ckpt-N); default: the newest loadable one.")
flags.DEFINE_boolean("best", False, "Export the run's best evaluated policy (tfrl.best_policy) instead of a "
                     "checkpoint.")
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
    if FLAGS.checkpoint is not None and FLAGS.checkpoint < 1:
        raise UsageError(f"--checkpoint must be a checkpoint number >= 1, got {FLAGS.checkpoint}")
    if FLAGS.best and FLAGS.checkpoint is not None:
        raise UsageError("give --checkpoint=N or --best, not both")
    if FLAGS.model_name in (".", "..") or "/" in FLAGS.model_name:
        raise UsageError(f"--model_name must be a plain directory name, got {FLAGS.model_name!r}")
    cli.check_output_dir("base_path", pathlib.Path(FLAGS.base_path))
    from tfrl import runs  # imports TensorFlow: seconds

    version_dir = runs.export_run(pathlib.Path(FLAGS.run_dir), pathlib.Path(FLAGS.base_path), FLAGS.model_name,
                                  checkpoint=FLAGS.checkpoint, best=FLAGS.best)
    print(f"exported: {version_dir}", flush=True)


if __name__ == "__main__":
    cli.run(main)

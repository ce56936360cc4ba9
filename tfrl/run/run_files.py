"""The names of what a run directory holds (tfrl.run.runs describes each), in one module below everything that reads
or writes them, so that none of those modules imports another for a name."""

CONFIG_FILE = "config.json"  # the resolved config (tfrl.run.runs.RunRecord)
RESULT_FILE = "result.json"  # the final evaluation and the export: the run is complete
LOCK_FILE = ".lock"  # held (flock) by the one process training into the run dir
CHECKPOINT_DIR = "checkpoints"  # tfrl.run.checkpoints
BEST_POLICY_DIR = "best_policy"  # tfrl.run.best_policy

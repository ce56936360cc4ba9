"""A run's life: launch (flags and config.json to a resolved run), the training loop, the run record and its
files, checkpoints, warm starts, the kept best policy, metrics, progress, evaluation, callbacks and shutdown.

May import tfrl's top-level vocabulary (errors, config, schedules), tfrl.envs, tfrl.hardware, tfrl.replay,
tfrl.models and tfrl.agents' registry; nothing imports tfrl.run but the faces (tfrl.api, tfrl.commands).
"""

# What a run directory holds (tfrl.run.runs describes each); here, below every module that reads or writes them.
CONFIG_FILE = "config.json"  # the resolved config (tfrl.run.runs.RunRecord)
RESULT_FILE = "result.json"  # the final evaluation and the export: the run is complete
LOCK_FILE = ".lock"  # held (flock) by the one process training into the run dir
CHECKPOINT_DIR = "checkpoints"  # tfrl.run.checkpoints
BEST_POLICY_DIR = "best_policy"  # tfrl.run.best_policy

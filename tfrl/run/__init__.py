"""A run's life: launch (flags and config.json to a resolved run), the training loop, the run record and its
files, checkpoints, warm starts, the kept best policy, metrics, progress, evaluation, callbacks and shutdown.

May import tfrl's top-level vocabulary (errors, config, schedules), tfrl.envs, tfrl.hardware, tfrl.replay,
tfrl.models and tfrl.agents' registry; nothing imports tfrl.run but the faces (tfrl.api, tfrl.commands).
"""

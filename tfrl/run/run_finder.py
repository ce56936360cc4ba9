"""Finding a run again: the interrupted run that the same command, without --run_dir, continues.

A run started without --run_dir goes to <runs_root>/<agent>-<env>-s<seed>-<time>/. When the same command (same
agent, env, seed, settings) runs again, the newest such run that was interrupted is continued instead of
starting over: it has a checkpoint, no result.json (it did not finish), and no process is training into it.
"""

from __future__ import annotations

import contextlib
import glob
import pathlib

from absl import logging

from tfrl.errors import UsageError
from tfrl.lazy_import import LazyModule
from tfrl.run import CONFIG_FILE, LOCK_FILE, RESULT_FILE, runs

checkpoints = LazyModule("tfrl.run.checkpoints")


def find_interrupted(runs_root: pathlib.Path, prefix: str, record: runs.RunRecord) -> pathlib.Path | None:
    """The newest run dir <runs_root>/<prefix>-* whose run equals `record` and was interrupted; None if none."""
    if not runs_root.is_dir():
        return None
    # Names end in a sortable timestamp: newest first.
    for run_dir in sorted(runs_root.glob(f"{glob.escape(prefix)}-*"), reverse=True):
        if _is_interrupted(run_dir, record):
            return run_dir
    return None


def _is_interrupted(run_dir: pathlib.Path, record: runs.RunRecord) -> bool:
    if not (run_dir / CONFIG_FILE).is_file() or (run_dir / RESULT_FILE).exists():
        return False
    try:
        saved = runs.read_config(run_dir)
    except UsageError as e:
        logging.debug("passing over %s: %s", run_dir, e)
        return False
    if saved.differences(record):
        return False
    return checkpoints.latest_checkpoint_number(run_dir) is not None and not in_use(run_dir)


def in_use(run_dir: pathlib.Path) -> bool:
    """Whether a process holds the run dir's training lock (tfrl.run.runs.lock_for_training) right now."""
    try:
        import fcntl
    except ImportError:
        return False
    try:
        handle = open(run_dir / LOCK_FILE, "r")
    except OSError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        with contextlib.suppress(OSError):
            fcntl.flock(handle, fcntl.LOCK_UN)
        return False

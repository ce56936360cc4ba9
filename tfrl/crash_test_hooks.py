"""Test hook: hold the process at a named point inside a write, so a test can SIGKILL it exactly there.

Inactive (one dict lookup) unless the environment has TFRL_TEST_PAUSE_AT=<point> or
<point>:<n> (the n-th time the point is reached; default the first). Then, at that
point, the process creates the file named by TFRL_TEST_PAUSED_FILE, so the test
knows where it is, and sleeps until it is killed (after 10 minutes it goes on).
It never changes what is written. Points:

    checkpoint.arrays_written   ckpt-N.npz (e.g. the replay buffer) written to its temp file, before fsync and rename
    checkpoint.tf_files_written ckpt-N's TF files in place, before the `checkpoint` state file lists N
    export.before_rename        the SavedModel complete in its temp dir, before the rename to its version number
"""

from __future__ import annotations

import os
import pathlib
import time

PAUSE_AT_VARIABLE = "TFRL_TEST_PAUSE_AT"
PAUSED_FILE_VARIABLE = "TFRL_TEST_PAUSED_FILE"
_MAX_PAUSE_S = 600.0
_hits: dict[str, int] = {}


def pause_point(point: str) -> None:
    """Pauses here if TFRL_TEST_PAUSE_AT names `point` (and this is its n-th hit); otherwise returns at once."""
    wanted = os.environ.get(PAUSE_AT_VARIABLE)
    if not wanted:
        return
    name, _, nth = wanted.partition(":")
    if name != point:
        return
    _hits[point] = _hits.get(point, 0) + 1
    if _hits[point] != int(nth or 1):
        return
    paused_file = os.environ.get(PAUSED_FILE_VARIABLE)
    if paused_file:
        pathlib.Path(paused_file).write_text(f"{point}:{_hits[point]}\n")
    time.sleep(_MAX_PAUSE_S)

"""`tfrl train` held at a named point inside a write, so that a test can SIGKILL it exactly there.

    python tests/crash_points.py POINT[:N] PAUSED_FILE [train flags...]

At the N-th time (default the first) the run reaches POINT, it creates PAUSED_FILE, so the test knows where it
is, and sleeps until it is killed (after 10 minutes it goes on). It never changes what is written. The points,
each a wrapper around the function the write calls at that moment:

    checkpoint.arrays_written   ckpt-N.npz (e.g. the replay buffer) written to its temp file, before fsync and rename
    checkpoint.tf_files_written ckpt-N's TF files in place, before they are read back and the JSON lists N
    export.before_rename        the SavedModel complete in its temp dir, before the rename to its version number
"""

from __future__ import annotations

import pathlib
import sys
import time

from tfrl.commands import train
from tfrl.models import export
from tfrl.run import checkpoints

_MAX_PAUSE_S = 600.0


def _pauser(point: str, wanted: str, paused_file: pathlib.Path):
    name, _, nth = wanted.partition(":")
    hits = [0]

    def pause() -> None:
        if name != point:
            return
        hits[0] += 1
        if hits[0] == int(nth or 1):
            paused_file.write_text(f"{point}:{hits[0]}\n")
            time.sleep(_MAX_PAUSE_S)
    return pause


def install(wanted: str, paused_file: pathlib.Path) -> None:
    arrays = _pauser("checkpoint.arrays_written", wanted, paused_file)
    tf_files = _pauser("checkpoint.tf_files_written", wanted, paused_file)
    rename = _pauser("export.before_rename", wanted, paused_file)
    atomic_write, validate, versions = checkpoints._atomic_write, checkpoints._validate_tf_files, export.version_numbers

    def npz_write(path, write):
        if path.suffix != ".npz":
            return atomic_write(path, write)
        return atomic_write(path, lambda f: (write(f), arrays()))

    def validate_written(prefix):
        if sys._getframe(1).f_code.co_name == "_write":  # a save, not a restore
            tf_files()
        return validate(prefix)

    def versions_before_rename(model_dir):
        if sys._getframe(1).f_code.co_name == "export_saved_model":
            rename()
        return versions(model_dir)

    checkpoints._atomic_write, checkpoints._validate_tf_files = npz_write, validate_written
    export.version_numbers = versions_before_rename


if __name__ == "__main__":
    install(sys.argv[1], pathlib.Path(sys.argv[2]))
    sys.argv = [sys.argv[0], *sys.argv[3:]]
    train.run()

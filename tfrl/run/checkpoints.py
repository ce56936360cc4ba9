"""Training checkpoints that survive a crash: TF state, loop state and arrays, complete or absent.

A checkpoint number N in `<run_dir>/checkpoints/` is three things:
    ckpt-N.index, ckpt-N.data-*   tf.train.Checkpoint of the trackables (networks, optimizer with its
                                  slots and loss scale, step variables), written by tf.train.Checkpoint.write
    ckpt-N.npz                    the arrays (e.g. the replay buffer), compressed, allow_pickle=False
    ckpt-N.json                   env step, the loop's JSON state (deadlines, RNG states, ...), the array
                                  manifest and the npz's SHA-256, and a SHA-256 over all of that

Commit order, so that a process killed with SIGKILL at any moment leaves the
previous checkpoint intact and loadable:
    1. ckpt-N.npz: written to a temp name, fsync'd, os.replace'd into place;
    2. the TF files (TF writes them under ckpt-N_temp/ and merges them into place), then read back;
    3. ckpt-N.json, like the npz: the commit point.
A checkpoint is committed once its JSON is on disk: the files are the truth. A crash before step 3 leaves
files without a JSON, which are ignored and swept at the next save, as are complete checkpoints beyond the
newest `keep` (keep=None: all are kept). Only entries of `checkpoints/` named ckpt-N... are ever deleted (a
symlink among them is unlinked, never followed).

TF's `checkpoint` index file is written, never read: after each save it is rewritten from the committed
checkpoints on disk, for tools that call tf.train.latest_checkpoint. Why tf.train.Checkpoint.write and not
tf.train.CheckpointManager: the manager parses that index when it is created, raises on bytes that are not
UTF-8, and deletes the .index and .data-* files of whatever the index lists beyond its max_to_keep, an absolute
path outside the run or, in a reordered index, the newest checkpoint. max_to_keep=None would stop the deleting,
but the manager would still parse the file and carry its entries forward. With write(), no TF code reads the
index, and only tfrl's own naming rule decides what is deleted. The save counter the manager kept is still
incremented, so that a checkpoint holds the same tensors as before.

Non-finite numbers are refused both ways: save raises tfrl.models.numerics.NonFiniteError, writing nothing that stays,
if an array or a variable (read back from the written TF files) holds a NaN or Inf, so the newest checkpoint is
always a usable one; restore treats such a checkpoint (an older tfrl wrote them) like a corrupt one.

Restoring validates a checkpoint fully before assigning anything (the JSON's checksum,
the npz's SHA-256 and its members, which checks zip CRCs, every tensor of the TF files,
which checks TF's CRCs, and that the float arrays and tensors are finite); a corrupt, truncated,
hand-edited or non-finite one is reported with an absl warning naming the file (and the variable), and the
previous one is tried.

Numbers are sequential (1, 2, ...); a new checkpoint always gets a number above
every number on disk, so it never overwrites an older (maybe corrupt) one.

A save that fails (a full disk, a read-only file system) removes what it wrote
of checkpoint N and raises CheckpointWriteError, naming the newest checkpoint,
which it has not touched. A `checkpoints` path that is not a directory is a UsageError.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import re
import shutil
import time
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np
import tensorflow as tf
from absl import logging

from tfrl.errors import RunError, UsageError
from tfrl.models import numerics
from tfrl.run import CHECKPOINT_DIR

KEEP_CHECKPOINTS = 3  # newest checkpoints kept; older ones are deleted after each save
CHECKPOINT_DIR = CHECKPOINT_DIR  # inside the run dir
_PREFIX = "ckpt"
_FORMAT_VERSION = 2  # 2: JSON written last, with checksums; 1 (still read): JSON first, no checksums
_NUMBER = re.compile(rf"{_PREFIX}-(\d+)(?:\.|_temp$)")
_INDEX_FILE = "checkpoint"  # TF's index, for tf.train.latest_checkpoint: written, never read
_TF_VARIABLE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"  # of a variable's key in the TF files
_APPLY_ERRORS = (ValueError, KeyError, TypeError, IndexError)  # a loop state that does not fit the run


class CheckpointError(UsageError):
    """A requested checkpoint does not exist, or no listed checkpoint can be loaded."""


class CheckpointWriteError(RunError):
    """A checkpoint could not be written; the checkpoints written before it are intact."""


class Restored(NamedTuple):
    env_step: int
    loop_state: dict[str, Any]
    arrays: dict[str, np.ndarray]
    number: int  # the checkpoint number N (ckpt-N)


class _Unusable(Exception):
    """One checkpoint cannot be loaded; `path` is the file at fault."""

    def __init__(self, path: pathlib.Path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = path


class _NonFinite(_Unusable):
    """A checkpoint's array or variable `name` holds a NaN or Inf."""

    def __init__(self, path: pathlib.Path, name: str):
        super().__init__(path, f"{name} holds NaN or Inf")
        self.name = name


def rng_state(generator: np.random.Generator) -> dict:
    """A NumPy Generator's bit_generator.state, JSON-serializable (Python ints are unbounded)."""
    return generator.bit_generator.state


def set_rng_state(generator: np.random.Generator, state: dict) -> None:
    generator.bit_generator.state = state


class Checkpointer:
    """Saves and restores the checkpoints of one run directory.

    trackables: name -> TF trackable (Keras model, optimizer, tf.Variable), as a
      tf.train.Checkpoint takes them. Restoring into a subset of the saved names is
      allowed (e.g. only the online network, for export).
    """

    def __init__(self, run_dir: pathlib.Path, trackables: Mapping[str, Any], keep: int | None = KEEP_CHECKPOINTS,
                 subdir: str = CHECKPOINT_DIR):
        self.directory = pathlib.Path(run_dir) / subdir
        self._checkpoint = tf.train.Checkpoint(**trackables)
        self._keep = keep
        self._last: tuple[int, int] | None = None  # (env step, number) of the last save or restore

    @property
    def last(self) -> tuple[int, int] | None:
        """(env step, number) of the checkpoint this process last saved or restored; None before either."""
        return self._last

    # ---- listing -------------------------------------------------------------

    def numbers(self) -> list[int]:
        """Numbers of the committed checkpoints on disk (their JSON exists), newest first."""
        return complete_numbers(self.directory)

    def _numbers_on_disk(self) -> set[int]:
        if not self.directory.exists():
            return set()
        return {int(m.group(1)) for p in self.directory.iterdir() if (m := _NUMBER.match(p.name))}

    def _paths(self, number: int) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
        """(TF prefix, JSON, npz) of checkpoint `number`."""
        stem = self.directory / f"{_PREFIX}-{number}"
        return stem, stem.with_name(stem.name + ".json"), stem.with_name(stem.name + ".npz")

    # ---- saving --------------------------------------------------------------

    def save(self, env_step: int, loop_state: Mapping[str, Any], arrays: Mapping[str, np.ndarray] | None = None) -> int:
        """Writes checkpoint N (see the module docstring for the order) and returns N.

        A second save at the env step of the last save or restore writes nothing and
        returns that checkpoint's number (the final save of a run that ends right on
        a periodic checkpoint, or of a resumed run that had nothing left to do).
        NonFiniteError if an array or variable holds NaN or Inf: nothing of checkpoint N stays.
        """
        if self._last is not None and self._last[0] == env_step and self._last[1] in self.numbers():
            return self._last[1]
        arrays = {name: np.asarray(value) for name, value in (arrays or {}).items()}
        bad = numerics.first_non_finite(arrays.items())
        if bad is not None:  # before anything is written
            raise numerics.NonFiniteError.in_checkpoint_state([f"array {bad!r}"]).at(env_step, self._last)
        _check_is_directory(self.directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        number = max(self._numbers_on_disk() | {0}) + 1
        try:
            self._write(number, env_step, loop_state, arrays)
        except (OSError, tf.errors.OpError, _Unusable) as e:  # _Unusable: the TF files did not read back
            self._sweep()  # checkpoint N has no JSON: its files go
            raise self._write_error(number, e) from None
        except BaseException:  # NonFiniteError, or a second Ctrl-C (KeyboardInterrupt) inside the write
            self._sweep()  # leave no stray files
            raise
        self._last = (int(env_step), number)
        self._sweep()
        self._write_index()
        logging.info("checkpoint %d saved at env step %d: %s", number, env_step, self._paths(number)[0])
        return number

    def _write_error(self, number: int, error: Exception) -> CheckpointWriteError:
        newest = self.numbers()
        kept = f"checkpoint {newest[0]} is still the newest" if newest else "no checkpoint was written before"
        if isinstance(error, OSError) and error.strerror:
            reason = error.strerror
        else:
            reason = getattr(error, "message", None) or str(error)
        reason = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", reason)  # TF's internal function name
        return CheckpointWriteError(f"cannot write checkpoint {number} in {self.directory} ({reason}); {kept}")

    def _write(self, number: int, env_step: int, loop_state: Mapping[str, Any], arrays: Mapping[str, np.ndarray]
               ) -> None:
        prefix, json_path, npz_path = self._paths(number)
        manifest = {name: {"shape": list(a.shape), "dtype": a.dtype.str} for name, a in arrays.items()}
        arrays_sha256 = None
        if arrays:
            _atomic_write(npz_path, lambda f: np.savez_compressed(f, **arrays))
            arrays_sha256 = _file_sha256(npz_path)
        self._checkpoint.save_counter.assign_add(1)  # as tf.train.CheckpointManager counted saves (module docstring)
        self._checkpoint.write(str(prefix))
        try:
            _validate_tf_files(prefix)  # every tensor reads back, and the float ones are finite
        except _NonFinite as e:
            raise numerics.NonFiniteError.in_checkpoint_state([e.name]).at(env_step, self._last) from None
        record = {"format": _FORMAT_VERSION, "checkpoint_number": number, "env_step": int(env_step),
                  "saved_at": time.time(), "arrays": manifest, "arrays_sha256": arrays_sha256,
                  "loop_state": dict(loop_state)}
        record["checksum"] = _record_checksum(record)
        _atomic_write(json_path, lambda f: f.write(json.dumps(record).encode()))

    def _sweep(self) -> None:
        """Deletes the files of uncommitted checkpoints, and of committed ones beyond the newest `keep`: entries of
        the directory named by _NUMBER, nothing else (a symlink is unlinked, not followed)."""
        if not self.directory.is_dir():
            return
        complete = self.numbers()
        kept = set(complete if self._keep is None else complete[:self._keep])
        for path in self.directory.iterdir():
            match = _NUMBER.match(path.name)
            if match is None or int(match.group(1)) in kept:
                continue
            with contextlib.suppress(OSError):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()

    def _write_index(self) -> None:
        """Rewrites TF's `checkpoint` index from the committed checkpoints on disk, newest last, for tools that call
        tf.train.latest_checkpoint; tfrl never reads it, so a failure here loses nothing (a warning)."""
        names = [f"{_PREFIX}-{number}" for number in reversed(self.numbers())]
        if not names:
            return
        lines = [f'model_checkpoint_path: "{names[-1]}"', *(f'all_model_checkpoint_paths: "{n}"' for n in names)]
        try:
            _atomic_write(self.directory / _INDEX_FILE, lambda f: f.write(("\n".join(lines) + "\n").encode()))
        except OSError as e:
            logging.warning("cannot rewrite %s (%s); the checkpoints are not affected",
                            self.directory / _INDEX_FILE, e.strerror or e)

    # ---- restoring -----------------------------------------------------------

    def newest_loop_state(self) -> tuple[int, dict] | None:
        """(env step, loop state) of the newest complete checkpoint whose JSON reads, without restoring anything."""
        for number in self.numbers():
            try:
                record = _read_record(self._paths(number)[1], number)
                return int(record["env_step"]), dict(record["loop_state"])
            except _Unusable as e:
                logging.warning("checkpoint %d in %s: %s", number, self.directory, e)
        return None

    def restore_latest(self, load_arrays: bool = True, apply: Callable[[Restored], None] | None = None
                       ) -> Restored | None:
        """Restores the newest loadable checkpoint; None if there is none at all.

        apply(restored): the caller's use of the loop state and arrays, run after the TF variables are assigned;
        a ValueError, KeyError, TypeError or IndexError there (a state that does not fit this run) makes the
        checkpoint unusable like a corrupt file. A corrupt, truncated or edited checkpoint is skipped with a
        warning naming the file. Raises CheckpointError if checkpoints exist but none of them loads: a run
        must not silently start over.
        """
        numbers = self.numbers()
        if not numbers:
            return None
        for i, number in enumerate(numbers):
            try:
                restored = self._restore(number, load_arrays)
                if apply is not None:
                    try:
                        apply(restored)
                    except _APPLY_ERRORS as e:
                        raise _Unusable(self._paths(number)[1],
                                        f"its state does not fit this run ({type(e).__name__}: {e})") from None
                return restored
            except _Unusable as e:
                fallback = f"using checkpoint {numbers[i + 1]} instead" if i + 1 < len(numbers) else "no older checkpoint"
                logging.warning("checkpoint %d is unusable: %s; %s", number, e, fallback)
        raise CheckpointError(f"none of the checkpoints {sorted(numbers)} in {self.directory} can be loaded "
                              "(see the warnings above)")

    def restore(self, number: int, load_arrays: bool = True) -> Restored:
        """Restores checkpoint `number`; CheckpointError if it does not exist or cannot be loaded."""
        numbers = self.numbers()
        if number not in numbers:
            available = ", ".join(map(str, sorted(numbers))) or "none"
            raise CheckpointError(f"checkpoint {number} does not exist in {self.directory} (available: {available})")
        try:
            return self._restore(number, load_arrays)
        except _Unusable as e:
            raise CheckpointError(f"checkpoint {number} is unusable: {e}") from None

    def _restore(self, number: int, load_arrays: bool) -> Restored:
        prefix, json_path, npz_path = self._paths(number)
        # 1. Validate everything before assigning any variable.
        record = _read_record(json_path, number)
        env_step, loop_state, manifest = int(record["env_step"]), record["loop_state"], record["arrays"]
        arrays = {}
        if manifest and load_arrays:
            expected = record.get("arrays_sha256")
            if expected is not None and _file_sha256(npz_path) != expected:
                raise _Unusable(npz_path, "its SHA-256 differs from the one its JSON records (changed or damaged)")
            arrays = _read_arrays(npz_path, manifest)
        _validate_tf_files(prefix)
        # 2. Assign.
        try:
            status = self._checkpoint.read(str(prefix))
            status.assert_existing_objects_matched()
            status.expect_partial()  # restoring a subset (e.g. only the online network) is allowed
        except AssertionError as e:
            raise _Unusable(prefix.with_name(prefix.name + ".index"),
                            f"does not match the objects being restored (a different network or optimizer?): {e}") from None
        self._last = (env_step, number)
        logging.info("restored checkpoint %d (env step %d) from %s", number, env_step, prefix)
        return Restored(env_step=env_step, loop_state=loop_state, arrays=arrays, number=number)


def _record_checksum(record: Mapping[str, Any]) -> str:
    """SHA-256 of the record without its "checksum", in one canonical JSON text."""
    body = {key: value for key, value in record.items() if key != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _read_record(json_path: pathlib.Path, number: int) -> dict:
    """The checkpoint's JSON record, checked: _Unusable if it cannot be read, belongs to another checkpoint, or
    was changed after it was written (format 2 checksums)."""
    try:
        record = json.loads(json_path.read_text())
        int(record["env_step"]), record["loop_state"], record["arrays"]  # noqa: B018 - present and typed
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise _Unusable(json_path, f"cannot read the loop state ({type(e).__name__}: {e})") from None
    if record.get("checkpoint_number") != number:
        raise _Unusable(json_path, f"belongs to checkpoint {record.get('checkpoint_number')}, not {number}")
    if record.get("format", 1) >= 2 and record.get("checksum") != _record_checksum(record):
        raise _Unusable(json_path, "its checksum does not match its content (edited or damaged)")
    return record


def _file_sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as e:
        raise _Unusable(path, f"cannot read it ({e.strerror or e})") from None
    return digest.hexdigest()


def _read_arrays(npz_path: pathlib.Path, manifest: Mapping[str, Mapping]) -> dict[str, np.ndarray]:
    try:
        with np.load(npz_path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}  # reads every member: checks the zip CRCs
    except Exception as e:  # noqa: BLE001 - zipfile, zlib, OSError, ValueError, EOFError all mean "broken"
        raise _Unusable(npz_path, f"cannot read the arrays ({type(e).__name__}: {e})") from None
    for name, spec in manifest.items():
        a = arrays.get(name)
        if a is None or list(a.shape) != spec["shape"] or a.dtype.str != spec["dtype"]:
            raise _Unusable(npz_path, f"array {name!r} is missing or differs from the manifest {spec}")
    bad = numerics.first_non_finite(arrays.items())
    if bad is not None:  # a replay poisoned before this check existed: training on it would diverge again
        raise _NonFinite(npz_path, f"array {bad!r}")
    return arrays


def _validate_tf_files(prefix: pathlib.Path) -> None:
    """Reads every saved tensor, so a truncated or corrupt TF file fails here and not halfway through a restore,
    and checks the float ones are finite (_NonFinite names the first that is not)."""
    index = prefix.with_name(prefix.name + ".index")
    if not index.exists():
        raise _Unusable(index, "missing")
    try:
        reader = tf.train.load_checkpoint(str(prefix))
    except Exception as e:  # noqa: BLE001 - tf.errors.*, IndexError for short reads
        raise _Unusable(index, f"cannot read the TF checkpoint index ({type(e).__name__}: {e})") from None
    data_files = sorted(prefix.parent.glob(prefix.name + ".data-*")) or [prefix]
    for key in reader.get_variable_to_shape_map():
        try:
            tensor = reader.get_tensor(key)
        except Exception as e:  # noqa: BLE001
            raise _Unusable(data_files[0], f"cannot read tensor {key!r} ({type(e).__name__}: {e})") from None
        if numerics.first_non_finite([(key, tensor)]) is not None:
            raise _NonFinite(data_files[0], f"variable {key.removesuffix(_TF_VARIABLE_SUFFIX)!r}")


def _atomic_write(path: pathlib.Path, write) -> None:
    """write(file) into a temp file beside `path`, fsync, then os.replace: `path` is the old or the new file, never half."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    _fsync_dir(path.parent)


def _fsync_dir(directory: pathlib.Path) -> None:
    """Makes a rename durable across a power loss (SIGKILL alone cannot lose it)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def complete_numbers(directory: pathlib.Path) -> list[int]:
    """Numbers of the committed checkpoints in `directory` (their JSON, written last, exists), newest first.
    Reads the directory only: no TF op runs. Whether a committed checkpoint is intact is checked at restore."""
    directory = pathlib.Path(directory)
    _check_is_directory(directory)
    if not directory.is_dir():
        return []
    return sorted((int(m.group(1)) for p in directory.iterdir()
                   if (m := re.fullmatch(rf"{_PREFIX}-(\d+)\.json", p.name))), reverse=True)


def _check_is_directory(directory: pathlib.Path) -> None:
    """UsageError if `directory` exists as something else (a file): reading it as "no checkpoints" would start
    the run over, and the first save would then fail."""
    if (directory.exists() or directory.is_symlink()) and not directory.is_dir():
        raise UsageError(f"{directory} is not a directory: tfrl keeps checkpoints there; move that file away")


def latest_checkpoint_number(run_dir: pathlib.Path) -> int | None:
    """Newest committed checkpoint number of a run dir, without loading anything (and before runtime.apply:
    no TF op runs); None if it has none."""
    numbers = complete_numbers(pathlib.Path(run_dir) / CHECKPOINT_DIR)
    return numbers[0] if numbers else None

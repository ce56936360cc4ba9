"""Run metrics: one sink for metrics.jsonl, TensorBoard scalars, log lines and the progress bar.

A resumed run (tfrl.run.checkpoints) appends to the same metrics.jsonl and TensorBoard
directory. Records logged after the checkpoint it resumes from, before the crash,
are orphans: a {"kind": "resume", "env_step": N} record marks the restart and
`read_metrics` drops every earlier record with env_step > N. For TensorBoard a
SessionLog.START event at step N + 1 does the same for TensorBoard's Python loader
(`tensorboard --load_fast=false`); the default fast loader may show that span twice.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import socket
import time

import tensorflow as tf
from absl import logging

from tfrl.errors import RunError
from tfrl.run import progress


# The fields of a record that read the clock: the only ones that differ between two --deterministic runs.
TIMING_FIELDS = ("wall_time_s", "env_steps_per_s")


class MetricsWriteError(RunError):
    """metrics.jsonl or TensorBoard could not be written (a full disk): training stops, exit code 1."""

    def __init__(self, reason: str, run_dir: pathlib.Path, last_checkpoint: tuple[int, int] | None = None):
        self.reason, self.run_dir = reason, run_dir
        kept = ("no checkpoint had been written" if last_checkpoint is None
                else f"checkpoint {last_checkpoint[1]} (env step {last_checkpoint[0]}) is the newest")
        super().__init__(f"cannot write the run's metrics in {run_dir} ({reason}); training stopped: {kept}")

    def at(self, last_checkpoint: tuple[int, int] | None) -> MetricsWriteError:
        """The same error, naming the newest checkpoint."""
        return MetricsWriteError(self.reason, self.run_dir, last_checkpoint)


@contextlib.contextmanager
def _write_errors(run_dir: pathlib.Path):
    """A failed write inside (OSError; a TF OpError such as ResourceExhaustedError) becomes a MetricsWriteError."""
    try:
        yield
    except (OSError, tf.errors.OpError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else \
            (getattr(error, "message", None) or str(error)).strip().splitlines()[0]
        raise MetricsWriteError(reason, run_dir) from None


class MetricsLogger:
    """Writes each `log(...)` record to metrics.jsonl and TensorBoard (run_dir/tensorboard).

    Episode results are buffered and written at the next `log` call, so the
    TF summary ops stay off the per-step path.
    """

    def __init__(self, run_dir: pathlib.Path, total_env_steps: int, progress_bar: bool | None = None,
                 start_env_step: int = 0, start_wall_time: float = 0.0, final_eval_episodes: int = 0):
        """start_env_step: where training (re)starts; with an existing metrics.jsonl, marks a resume there.
        start_wall_time: seconds the run had trained before (a resumed run's wall_time_s counts on from there)."""
        self._run_dir = run_dir
        jsonl_path = run_dir / "metrics.jsonl"
        resumed = jsonl_path.exists() and jsonl_path.stat().st_size > 0
        self._jsonl = open(jsonl_path, "a", buffering=1)
        if resumed:
            with open(jsonl_path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":  # a line cut by the crash: end it, so the marker is a line of its own
                    self._jsonl.write("\n")
            self._jsonl.write(json.dumps({"kind": "resume", "env_step": int(start_env_step)}) + "\n")
            # Before the TF writer exists: its events file must sort after this one.
            _write_tensorboard_restart(run_dir / "tensorboard", start_env_step + 1)
        self._writer = tf.summary.create_file_writer(str(run_dir / "tensorboard"))
        self._episodes: list[tuple[int, float, int]] = []
        self._start = time.perf_counter() - start_wall_time
        if progress_bar is None:
            progress_bar = progress.wanted()
        self._progress = (progress.ProgressBar(total_env_steps, start_env_step, final_eval_episodes)
                          if progress_bar else None)

    def wall_time(self) -> float:
        """Seconds of the run so far, earlier processes' included (what records call wall_time_s)."""
        return time.perf_counter() - self._start

    def tick(self, env_step: int) -> None:
        """Called every pass of the loop: moves the progress bar, if any (it redraws at most twice a second)."""
        if self._progress is not None:
            self._progress.tick(env_step)

    @contextlib.contextmanager
    def evaluating(self, what: str = "evaluating", episodes: int = 0):
        """A block running an evaluation of `episodes` episodes: the bar says `what`, and learns its cost."""
        if self._progress is None:
            yield
            return
        with self._progress.evaluating(what, episodes):
            yield

    def episode(self, env_step: int, episode_return: float, length: int) -> None:
        self._episodes.append((env_step, episode_return, length))

    def log(self, kind: str, env_step: int, values: dict[str, float]) -> dict:
        """kind: "train", "eval", "final_eval" or "best_eval" (tfrl.run.best_policy); "resume" is written by the
        constructor. Returns the record written."""
        record = {"kind": kind, "env_step": int(env_step), "wall_time_s": round(self.wall_time(), 3), **values}
        if kind == "train" and self._episodes:
            returns = [r for _, r, _ in self._episodes]
            record["episodes"] = len(returns)
            record["episode_return_mean"] = sum(returns) / len(returns)
            record["episode_length_mean"] = sum(n for _, _, n in self._episodes) / len(self._episodes)
        with _write_errors(self._run_dir):
            self._jsonl.write(json.dumps(record) + "\n")
            with self._writer.as_default():
                for step, episode_return, length in self._episodes:
                    tf.summary.scalar("episode/return", episode_return, step=step)
                    tf.summary.scalar("episode/length", length, step=step)
                for name, value in values.items():
                    if isinstance(value, (int, float)):
                        tf.summary.scalar(f"{kind}/{name}", value, step=env_step)
            self._writer.flush()
        if kind == "train":
            self._episodes.clear()
        summary = " ".join(f"{k}={_fmt(v)}" for k, v in record.items() if k not in ("kind", "env_step"))
        if self._progress is not None and kind == "train":
            self._progress.update(record)
        else:
            logging.info("[%s] env_step=%d %s", kind, env_step, summary)
        return record

    def close(self) -> None:
        """Closes both files; a write error here (a full disk) is logged, not raised: it would hide the error
        that ended the run, and every record already went out through log()."""
        if self._progress is not None:
            self._progress.close()
        for closing in (self._jsonl.close, self._writer.close):
            try:
                closing()
            except (OSError, tf.errors.OpError) as e:
                logging.warning("closing the run's metrics in %s: %s", self._run_dir, e)


def read_metrics(path: pathlib.Path) -> list[dict]:
    """The records of a metrics.jsonl in order, without the orphans of a resumed run (see the module docstring).

    Lines that are not a record (a truncated last line of a killed process, bytes that are not UTF-8 or JSON, a
    JSON value that is not an object with a kind and an integer env_step) are skipped, with one warning.
    """
    records: list[dict] = []
    skipped = 0
    for line in pathlib.Path(path).read_bytes().splitlines():
        record = _record_or_none(line)
        if record is None:
            skipped += bool(line.strip())
            continue
        if record["kind"] == "resume":
            records = [r for r in records if r["env_step"] <= record["env_step"]]
        records.append(record)
    if skipped:
        logging.warning("%s: %d line(s) are not metrics records and were skipped", path, skipped)
    return records


def _record_or_none(line: bytes) -> dict | None:
    try:
        record = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    valid = (isinstance(record, dict) and isinstance(record.get("kind"), str)
             and isinstance(record.get("env_step"), int) and not isinstance(record.get("env_step"), bool))
    return record if valid else None


def _write_tensorboard_restart(logdir: pathlib.Path, purge_from_step: int) -> None:
    """An events file holding SessionLog.START at `purge_from_step`: TensorBoard's Python loader then purges
    the events with step >= purge_from_step read before it. Two STARTs: the loader ignores a run's first one."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    logdir.mkdir(parents=True, exist_ok=True)
    # TensorBoard reads a run's events files in name order: the same second as the TF writer's file
    # (events.out.tfevents.<time>.<host>...) with "-" after the time sorts first, a later second after.
    name = f"events.out.tfevents.{int(time.time()):010d}.-restart.{socket.gethostname()}.{os.getpid()}"
    with open(logdir / name, "wb") as f:
        writer = RecordWriter(f)
        now = time.time()
        writer.write(event_pb2.Event(wall_time=now, file_version="brain.Event:2").SerializeToString())
        for _ in range(2):
            start = event_pb2.Event(wall_time=now, step=int(purge_from_step),
                                    session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START))
            writer.write(start.SerializeToString())


def _fmt(value):
    return f"{value:.4g}" if isinstance(value, float) else str(value)

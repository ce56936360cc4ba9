"""Run metrics: one sink for metrics.jsonl, TensorBoard scalars, log lines and the progress bar."""

from __future__ import annotations

import json
import pathlib
import sys
import time

import keras
import tensorflow as tf
from absl import logging


class MetricsLogger:
    """Writes each `log(...)` record to metrics.jsonl and TensorBoard (run_dir/tensorboard).

    Episode results are buffered and written at the next `log` call, so the
    TF summary ops (a few hundred µs each) stay off the per-step path.
    """

    def __init__(self, run_dir: pathlib.Path, total_env_steps: int, progress_bar: bool | None = None):
        self._jsonl = open(run_dir / "metrics.jsonl", "a", buffering=1)
        self._writer = tf.summary.create_file_writer(str(run_dir / "tensorboard"))
        self._episodes: list[tuple[int, float, int]] = []
        self._start = time.perf_counter()
        if progress_bar is None:
            progress_bar = sys.stdout.isatty()
        self._progbar = keras.utils.Progbar(total_env_steps, unit_name="env step") if progress_bar else None

    def episode(self, env_step: int, episode_return: float, length: int) -> None:
        self._episodes.append((env_step, episode_return, length))

    def log(self, kind: str, env_step: int, values: dict[str, float]) -> dict:
        """kind: "train", "eval" or "final_eval". Returns the record written."""
        record = {"kind": kind, "env_step": int(env_step),
                  "wall_time_s": round(time.perf_counter() - self._start, 3), **values}
        if kind == "train" and self._episodes:
            returns = [r for _, r, _ in self._episodes]
            record["episodes"] = len(returns)
            record["episode_return_mean"] = sum(returns) / len(returns)
            record["episode_length_mean"] = sum(n for _, _, n in self._episodes) / len(self._episodes)
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
        if self._progbar is not None and kind == "train":
            self._progbar.update(env_step, [(k, v) for k, v in values.items() if isinstance(v, float)])
        else:
            logging.info("[%s] env_step=%d %s", kind, env_step, summary)
        return record

    def close(self) -> None:
        self._jsonl.close()
        self._writer.close()


def _fmt(value):
    return f"{value:.4g}" if isinstance(value, float) else str(value)

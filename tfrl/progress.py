"""The progress bar of a training run on a terminal (tqdm), and log lines that do not break it.

The bar shows env steps done of total_env_steps, the rate and time left measured from where this process
started (a resumed run does not count the steps it did not do), and the current values of the last log
record: the mean return of the episodes that ended since the previous record, the loss, and epsilon or the
learning rate. While it is shown, absl's log lines are written above it, each on its own line.

tqdm is chosen over Keras' Progbar (which averages every value since the start and counts its rate from
step 0) and over rich (a far larger dependency for one bar): it is small, pure Python, and does exactly this.
"""

from __future__ import annotations

import logging as std_logging
import shutil

import tqdm
from absl import logging

from tfrl import quiet_logs

# What the bar shows of a "train" record, in this order, under these names, if the record has it.
SHOWN = (("episode_return_mean", "return"), ("loss", "loss"), ("epsilon", "eps"), ("learning_rate", "lr"),
         ("env_steps_per_s", "steps/s"))


class _AboveTheBar(std_logging.Filter):
    """On absl's handler: writes each record above the bar, on a line of its own, instead of through the
    handler's stream (which the bar's line would share)."""

    def __init__(self, bar: tqdm.tqdm, handler: std_logging.Handler):
        super().__init__()
        self._bar, self._handler = bar, handler

    def filter(self, record: std_logging.LogRecord) -> bool:
        self._bar.write(self._handler.format(record), file=quiet_logs.terminal())
        return False


def wanted() -> bool:
    """A bar by default only on a terminal."""
    return quiet_logs.terminal().isatty()


class ProgressBar:
    def __init__(self, total_env_steps: int, start_env_step: int = 0):
        self._bar = tqdm.tqdm(total=total_env_steps, initial=start_env_step, unit=" env steps", unit_scale=True,
                              dynamic_ncols=True, file=quiet_logs.terminal(), smoothing=0.3,
                              ncols=None if shutil.get_terminal_size((0, 0)).columns else 120)
        self._handler = logging.get_absl_handler()
        self._filter = _AboveTheBar(self._bar, self._handler)
        self._handler.addFilter(self._filter)

    def update(self, record: dict) -> None:
        """A "train" record: move to its env step and show its current values."""
        self._bar.set_postfix({short: f"{record[name]:.4g}" for name, short in SHOWN if name in record},
                              refresh=False)
        if record["env_step"] > self._bar.total:  # a run ends on a whole number of the agent's passes
            self._bar.total = record["env_step"]
        self._bar.update(record["env_step"] - self._bar.n)

    def close(self) -> None:
        self._handler.removeFilter(self._filter)
        self._bar.close()

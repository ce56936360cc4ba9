"""The progress bar of a training run on a terminal (tqdm), and log lines that do not break it.

The bar shows env steps done of total_env_steps, the current values of the last log record (the mean return of
the episodes that ended since the previous record, the loss, epsilon or the learning rate) and the time left.
It moves at least once a second of wall time (the loop ticks it every pass), says "evaluating" while an
evaluation runs, and "final evaluation" at the end, where it would otherwise sit at 100 %.

Time left: the env steps still to do at the wall-clock pace of this process so far (so evaluations and
checkpoints count, in proportion), plus the final evaluation, estimated from the periodic ones' time per episode.
A resumed run counts from where this process started. While the bar is shown, absl's log lines are written
above it, each on its own line.

tqdm is chosen over Keras' Progbar (which averages every value since the start and counts its rate from
step 0) and over rich (a far larger dependency for one bar): it is small, pure Python, and does exactly this.
"""

from __future__ import annotations

import contextlib
import logging as std_logging
import shutil
import time

import tqdm
from absl import logging

from tfrl.hardware import quiet_logs

# What the bar shows of a "train" record, in this order, under these names, if the record has it.
SHOWN = (("episode_return_mean", "return"), ("loss", "loss"), ("epsilon", "eps"), ("learning_rate", "lr"),
         ("env_steps_per_s", "steps/s"))
TICK_SECONDS = 0.5  # the bar is redrawn at least this often while training runs
_FORMAT = "{desc}{percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"


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
    def __init__(self, total_env_steps: int, start_env_step: int = 0, final_eval_episodes: int = 0):
        self._bar = tqdm.tqdm(total=total_env_steps, initial=start_env_step, unit=" env steps", unit_scale=True,
                              dynamic_ncols=True, file=quiet_logs.terminal(), bar_format=_FORMAT,
                              ncols=None if shutil.get_terminal_size((0, 0)).columns else 100)
        self._handler = logging.get_absl_handler()
        self._filter = _AboveTheBar(self._bar, self._handler)
        self._handler.addFilter(self._filter)
        self._start, self._start_step = time.monotonic(), start_env_step
        self._last_tick = self._start
        self._final_episodes = final_eval_episodes
        self._eval_seconds, self._eval_episodes = 0.0, 0  # periodic evaluations so far: their cost per episode
        self._values: dict[str, str] = {}

    def update(self, record: dict) -> None:
        """A "train" record: move to its env step and show its current values."""
        self._values = {short: f"{record[name]:.4g}" for name, short in SHOWN if name in record}
        self.tick(record["env_step"], force=True)

    def tick(self, env_step: int, force: bool = False) -> None:
        """Moves the bar to `env_step`, at most every TICK_SECONDS unless forced."""
        now = time.monotonic()
        if not force and now - self._last_tick < TICK_SECONDS:
            return
        self._last_tick = now
        if env_step > self._bar.total:  # a run ends on a whole number of the agent's passes
            self._bar.total = env_step
        self._bar.set_description_str("", refresh=False)
        self._bar.set_postfix(self._values | {"left": self._time_left(env_step, now)}, refresh=False)
        self._bar.update(env_step - self._bar.n)
        self._bar.refresh()

    @contextlib.contextmanager
    def evaluating(self, what: str = "evaluating", episodes: int = 0):
        """A block running an evaluation of `episodes` episodes: the bar says `what` until the next tick, and the
        time it takes per episode estimates the final evaluation's."""
        self._bar.set_description_str(f"{what} ", refresh=True)
        start = time.monotonic()
        yield
        if episodes:
            self._eval_seconds += time.monotonic() - start
            self._eval_episodes += episodes

    def _time_left(self, env_step: int, now: float) -> str:
        done = env_step - self._start_step
        if done <= 0:
            return "?"
        seconds = (self._bar.total - env_step) * (now - self._start) / done
        if self._eval_episodes:
            seconds += self._final_episodes * self._eval_seconds / self._eval_episodes
        return tqdm.tqdm.format_interval(seconds)

    def close(self) -> None:
        self._handler.removeFilter(self._filter)
        self._bar.close()

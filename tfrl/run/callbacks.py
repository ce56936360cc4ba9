"""Callbacks: code of yours that hears of a run's log records and evaluations, and can end training early.

A callback is any object with the two methods of `Callback` (subclassing it is optional). The run loop
(tfrl.run.training_loop) calls `on_log(record)` after writing each "train" record and `on_eval(record)` after
each periodic evaluation, with the record as metrics.jsonl holds it. Returning True from either ends training
cleanly: the loop saves a checkpoint, runs the final evaluation (whose record then names the callback in
"stopped_early_by") and the run is exported and marked complete, as at the end of total_env_steps.

    run = tfrl.train("ppo", "CartPole-v1", callbacks=[tfrl.StopOnReturn(475)])
"""

from __future__ import annotations

from typing import Any, Mapping


class Callback:
    """The callback protocol, doing nothing: override what you need."""

    def on_log(self, record: Mapping[str, Any]) -> bool:
        """A "train" record: env_step, the loss terms, env_steps_per_s, recent episodes' mean return..."""
        return False

    def on_eval(self, record: Mapping[str, Any]) -> bool:
        """An "eval" record: env_step, return_mean and return_std of the periodic greedy evaluation."""
        return False


class StopOnReturn(Callback):
    """Ends training once a periodic greedy evaluation's mean return reaches `threshold` (SB3's
    StopTrainingOnRewardThreshold). Needs periodic evaluations: eval_interval > 0."""

    def __init__(self, threshold: float):
        self.threshold = float(threshold)

    def on_eval(self, record: Mapping[str, Any]) -> bool:
        return record["return_mean"] >= self.threshold

    def __repr__(self) -> str:
        return f"StopOnReturn({self.threshold:g})"

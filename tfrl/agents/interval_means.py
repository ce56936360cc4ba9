"""The train metrics of a log record: each metric's mean over the train calls since the previous record.

A train call's metrics are already the means over its gradient steps; a log interval holds many calls (a PPO
interval of 10k env steps holds several updates, a SAC one many calls of K steps). The record shows their mean,
so that it speaks for its whole interval instead of its last call. Schedule values (a learning rate, a clip range)
are named in `latest`: the record shows the newest call's. An interval without a train call (before learning
starts) shows the previous record's values again.
"""

from __future__ import annotations

from typing import Iterable, Mapping


class IntervalMeans:
    def __init__(self, latest: Iterable[str] = (), initial: Mapping[str, float] | None = None):
        self._latest = frozenset(latest)
        self._shown = dict(initial or {})  # the values of the previous record
        self._sums: dict[str, float] = {}
        self._counts: dict[str, int] = {}

    def add(self, metrics: Mapping[str, float]) -> None:
        """One train call's metrics."""
        for name, value in metrics.items():
            fresh = name in self._latest or name not in self._sums
            self._sums[name] = float(value) if fresh else self._sums[name] + float(value)
            self._counts[name] = 1 if fresh else self._counts[name] + 1

    def take(self) -> dict[str, float]:
        """The values for a record; the calls added so far count towards it, and the next interval starts."""
        if self._sums:
            self._shown = {name: total / self._counts[name] for name, total in self._sums.items()}
            self._sums, self._counts = {}, {}
        return dict(self._shown)

    def state(self) -> dict:
        """For a checkpoint taken between two records (JSON: floats may be NaN, as a checkpoint's state allows)."""
        return {"shown": dict(self._shown), "sums": dict(self._sums), "counts": dict(self._counts)}

    def restore(self, state: Mapping) -> None:
        """From state(), or from the flat metrics dict of a checkpoint written before interval means."""
        if set(state) != {"shown", "sums", "counts"}:
            state = {"shown": state, "sums": {}, "counts": {}}
        counts = {name: int(count) for name, count in state["counts"].items()}
        if set(counts) != set(state["sums"]) or any(count < 1 for count in counts.values()):
            raise ValueError(f"interval metrics: sums of {sorted(state['sums'])} with counts {counts}")
        self._shown = {name: float(value) for name, value in state["shown"].items()}
        self._sums = {name: float(value) for name, value in state["sums"].items()}
        self._counts = counts

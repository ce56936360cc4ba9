"""What the replay-based agents (DQN, SAC) share: their train calls, made at once or in a background thread."""

from __future__ import annotations

import concurrent.futures
from typing import Any, Callable

from tfrl.agents.core import LearnerUpdate


class TrainCalls:
    """Makes a learner's update calls and hands each result to `apply(update, context)`.

    In the background (train_in_background), one call at a time runs in a thread while the caller goes on
    collecting; its result is applied at the next call or settle(). Results are applied in call order either way.
    """

    def __init__(self, learner, apply: Callable[[LearnerUpdate, Any], None], background: bool):
        self._learner, self._apply = learner, apply
        self._pool = concurrent.futures.ThreadPoolExecutor(1) if background else None
        self._in_flight: tuple[concurrent.futures.Future, Any] | None = None

    def run(self, batch, context: Any = None) -> None:
        """One update on `batch`; `context` goes with its result to apply (e.g. the replay indices)."""
        self.settle()
        if self._pool is None:
            self._apply(self._learner.update(batch), context)
        else:
            self._in_flight = (self._pool.submit(self._learner.update, batch), context)

    def settle(self) -> None:
        """Applies the call in flight, if any (its NonFiniteError is raised here)."""
        if self._in_flight is not None:
            future, context = self._in_flight
            self._in_flight = None
            self._apply(future.result(), context)

    def close(self) -> None:
        """Ends the thread once the call in flight, if any, is over (its result or error is dropped: close runs
        when the run ends, also on an error)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool, self._in_flight = None, None

    @property
    def in_flight(self) -> concurrent.futures.Future | None:
        return None if self._in_flight is None else self._in_flight[0]

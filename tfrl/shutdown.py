"""Graceful stop: SIGTERM or Ctrl-C (SIGINT) becomes a request that the training loop polls between env steps.

The launcher installs the handler once (process-wide state, like tfrl.runtime);
the loop, at its next consistent point (DQN: the next env step; A2C: the end of
the current rollout's update), writes a checkpoint and returns a "stopped" record.
Running the same command again resumes from that checkpoint. A signal that comes
after training has finished (during the final evaluation or the export) waits for
them to end. A second Ctrl-C does not wait: it raises KeyboardInterrupt at once, as
Python's default handler would (the newest checkpoint on disk stays loadable, see
tfrl.checkpoints).
"""

from __future__ import annotations

import signal


class StopRequest:
    """Set by a signal handler; `requested()` is what the loops poll (a bool read per env step)."""

    def __init__(self):
        self.signal_name: str | None = None

    def requested(self) -> bool:
        return self.signal_name is not None

    def _handle(self, signum, frame) -> None:
        del frame
        if signum == signal.SIGINT and self.requested():
            raise KeyboardInterrupt  # the user pressed Ctrl-C again: stop now, not at the next consistent point
        self.signal_name = signal.Signals(signum).name

    @classmethod
    def on_signals(cls, signals=(signal.SIGTERM, signal.SIGINT)) -> StopRequest:
        """A StopRequest set by `signals` (replacing their handlers: call once, from the launcher's main thread)."""
        request = cls()
        for signum in signals:
            signal.signal(signum, request._handle)
        return request


def never() -> bool:
    """The `stop_requested` of a loop that nobody stops (tests, notebooks)."""
    return False

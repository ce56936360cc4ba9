"""Graceful stop: SIGTERM or Ctrl-C (SIGINT) becomes a request that the training loop polls between env steps.

The launcher installs the handler once (process-wide state, like tfrl.hardware.runtime); the loop, at its next consistent
point (DQN: the next env step; A2C: the end of the current rollout's update), writes a checkpoint and returns a
"stopped" record. Running the same command again resumes from that checkpoint. A signal that comes before the loop
first polls (while the launcher checks its input, TensorFlow loads, or thousands of envs are built) stops the
process at once (StoppedBeforeTraining): there is nothing to save yet. A signal during an evaluation ends it at the
next vector step: a periodic one (the loop saves a checkpoint; it is evaluated again on resume) or the final one
(training is saved already; the same command evaluates again); one during the export waits for it to end. A second
Ctrl-C does not wait: it raises KeyboardInterrupt at once, as Python's default handler would (the newest checkpoint
on disk stays loadable, see tfrl.run.checkpoints).
"""

from __future__ import annotations

import contextlib
import signal
import threading

from tfrl.errors import RunError


class StoppedBeforeTraining(RunError):
    """A stop signal before training started; the exit code is 128 + the signal's number, as for a kill."""

    def __init__(self, signum: int):
        self.exit_code = 128 + signum
        super().__init__(f"stopped by {signal.Signals(signum).name} before training started (nothing was trained "
                         "or saved)")


class StopRequest:
    """Set by a signal handler; `requested()` is what the loops poll (a bool read per env step)."""

    def __init__(self):
        self.signal_name: str | None = None
        self._polled = False  # the loop has started polling: a signal waits for its next consistent point

    def requested(self) -> bool:
        self._polled = True
        return self.signal_name is not None

    def _handle(self, signum, frame) -> None:
        del frame
        if not self._polled:
            raise StoppedBeforeTraining(signum)
        if signum == signal.SIGINT and self.signal_name is not None:
            raise KeyboardInterrupt  # the user pressed Ctrl-C again: stop now, not at the next consistent point
        self.signal_name = signal.Signals(signum).name

    @classmethod
    def on_signals(cls, signals=(signal.SIGTERM, signal.SIGINT)) -> StopRequest:
        """A StopRequest set by `signals` (replacing their handlers: call once, from the launcher's main thread)."""
        request = cls()
        for signum in signals:
            signal.signal(signum, request._handle)
        return request

    @classmethod
    @contextlib.contextmanager
    def while_training(cls, signals=(signal.SIGTERM, signal.SIGINT)):
        """For tfrl.train: a StopRequest set by `signals` while the block runs, the program's own handlers put
        back after it. A signal that stopped training (a checkpoint was saved) is then delivered again, so the
        program is interrupted as it would have been without tfrl (KeyboardInterrupt for Ctrl-C); one before
        training started is delivered at once. Outside the main thread (where Python allows no handlers),
        nothing is installed and nothing stops the run."""
        request = cls()
        if threading.current_thread() is not threading.main_thread():
            yield request
            return
        previous = {signum: signal.getsignal(signum) for signum in signals}

        def restore() -> None:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

        def handle(signum, frame):
            if not request._polled:  # nothing to save yet: what the program would have done
                restore()
                signal.raise_signal(signum)
                return
            request._handle(signum, frame)

        for signum in signals:
            signal.signal(signum, handle)
        try:
            yield request
        finally:
            restore()
        if request.signal_name is not None:
            signal.raise_signal(signal.Signals[request.signal_name])


def never() -> bool:
    """The `stop_requested` of a loop that nobody stops (tests, notebooks)."""
    return False

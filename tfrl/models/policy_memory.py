"""A policy with memory, in NumPy: it keeps one recurrent state per row of its batch (no TensorFlow here).

    policy = StatefulPolicy(step, state_size)    # step(obs [N, ...], state [N, S]) -> (actions [N], next state)
    actions = policy(obs)                         # row i continues the episode of row i of the previous call
    policy.reset(done)                            # zero the rows whose episodes ended (all rows: reset())

Whatever runs episodes with a policy (tfrl.run.evaluation, a user's loop) calls reset() where episodes end, if the
policy has it; a policy without memory has no reset() and needs none.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from tfrl.errors import UsageError
from tfrl.models.policy_inputs import batch_rows


class PolicyMemory:
    """The states of a batch of episodes: none until the first step (zeros then)."""

    def __init__(self, state_size: int):
        self.state_size = int(state_size)
        self._state: np.ndarray | None = None

    def take(self, rows: int) -> np.ndarray:
        """The state [rows, S] to step with: zeros for new episodes."""
        if self._state is None:
            return np.zeros((rows, self.state_size), np.float32)
        if len(self._state) != rows:
            raise UsageError(f"the policy keeps the memory of {len(self._state)} episodes and was given a batch of "
                             f"{rows}; call reset() before a batch of another size")
        return self._state

    def keep(self, state: np.ndarray) -> None:
        self._state = np.asarray(state, np.float32)

    def reset(self, done=None) -> None:
        """Forget the episodes whose rows are true in done [N] (all of them if done is None)."""
        if done is None or self._state is None:
            self._state = None
            return
        done = np.asarray(done, bool).reshape(-1)
        if len(done) != len(self._state):
            raise UsageError(f"reset(done) takes one flag per episode ({len(self._state)}), got {len(done)}")
        self._state = np.where(done[:, None], np.float32(0), self._state)


class StatefulPolicy:
    """obs -> actions, carrying the state of each row's episode from call to call (see the module docstring)."""

    def __init__(self, step: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]], state_size: int):
        self._step = step
        self.memory = PolicyMemory(state_size)

    @property
    def state_size(self) -> int:
        return self.memory.state_size

    def __call__(self, obs) -> np.ndarray:
        rows = batch_rows(obs)
        actions, state = self._step(obs, self.memory.take(rows))
        self.memory.keep(state)
        return actions

    def reset(self, done=None) -> None:
        self.memory.reset(done)


def reset_episodes(policy, done=None) -> None:
    """policy.reset(done) for a policy with memory; nothing for one without."""
    reset = getattr(policy, "reset", None)
    if reset is not None:
        reset(done)

"""A policy with memory, in NumPy: it keeps one recurrent state per row of its batch (no TensorFlow here).

    policy = StatefulPolicy(step, state_size)    # step(obs [N, ...], state [N, S]) -> (actions [N], next state)
    actions = policy(obs)                         # row i continues the episode of row i of the previous call
    policy.reset(done)                            # zero the rows whose episodes ended (all rows: reset())

Whatever runs episodes with a policy (tfrl.run.evaluation, a user's loop) calls reset() where episodes end, if the
policy has it; a policy without memory has no reset() and needs none.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from tfrl.errors import UsageError
from tfrl.models import policy_inputs
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


class RememberingPolicy:
    """What tfrl.Policy and the portable (LiteRT, ONNX) policy share: policy(obs) -> actions, outputs(obs), and for a
    policy with memory (state_size > 0) the kept state per row, reset(done) and the explicit step(obs, state).

    A subclass sets `source` (its name in errors) and `memory` (a PolicyMemory), and defines _as_batch(obs) ->
    (batch, one observation given) and _answer(batch, state or None) -> {output: array}, "state" among them for
    a policy with memory."""

    source: str
    memory: PolicyMemory
    action_container: str | None = None  # "Dict" or "Tuple" for a hybrid action, where no metadata says it

    def _as_batch(self, obs) -> tuple[Any, bool]:
        raise NotImplementedError

    def _answer(self, batch, state: np.ndarray | None) -> Mapping[str, Any]:
        raise NotImplementedError

    @property
    def state_size(self) -> int:
        """Floats of one episode's memory, 0 for a policy without."""
        return self.memory.state_size

    def reset(self, done=None) -> None:
        """Forget the episodes of the rows where done [N] is true (all of them if done is None)."""
        self.memory.reset(done)

    def __call__(self, obs):
        """The actions as the env's step takes them: an array, or for a hybrid (Dict or Tuple) action space a dict
        of parts (a tuple), for one observation or a batch."""
        batch, single = self._as_batch(obs)
        return self._env_action(self._kept_call(batch), single)

    def outputs(self, obs, state=None) -> dict[str, np.ndarray]:
        """Every output for a batch of obs; a policy with memory steps its kept states (as __call__ does), or with
        `state` [N, S] given, starts from it and keeps nothing (the next state is output "state")."""
        batch, single = self._as_batch(obs)
        if state is not None:  # one observation takes a state [S] too; the outputs stay a batch of one
            return self._explicit_call(batch, state, single)
        return {name: np.asarray(value) for name, value in self._kept_call(batch).items()}

    def step(self, obs, state) -> tuple[np.ndarray, np.ndarray]:
        """A policy with memory, explicitly: (actions, next state [N, S]) for observations and their episodes'
        states [N, S] (zeros at an episode's first step)."""
        batch, single = self._as_batch(obs)
        result = self._explicit_call(batch, state, single)
        next_state = result[policy_inputs.STATE_NAME]
        return self._env_action(result, single), (next_state[0] if single else next_state)

    def _env_action(self, result: Mapping[str, Any], single: bool):
        """policy_inputs.env_actions of result (the metadata, where there is one, says Dict or Tuple)."""
        container = self.action_container or policy_inputs.action_container(getattr(self, "metadata", None))
        actions = policy_inputs.env_actions(result, container)
        return policy_inputs.action_row(actions, 0) if single else actions

    def _kept_call(self, batch) -> Mapping[str, Any]:
        if not self.state_size:
            result = self._answer(batch, None)
            policy_inputs.check_answer(result, self.source)
            return result
        result = self._answer(batch, self.memory.take(batch_rows(batch)))
        policy_inputs.check_answer(result, self.source)  # before the states are kept: a refused call changes none
        self.memory.keep(np.asarray(result[policy_inputs.STATE_NAME]))
        return result

    def _explicit_call(self, batch, state, single: bool) -> dict[str, np.ndarray]:
        if not self.state_size:
            raise UsageError(f"{self.source} has no memory: call policy(obs)")
        state = self._checked_state(state, batch_rows(batch), single)
        result = self._answer(batch, state.reshape(-1, self.state_size))
        policy_inputs.check_answer(result, self.source)
        return {name: np.asarray(value) for name, value in result.items()}

    def _checked_state(self, state, rows: int, single: bool) -> np.ndarray:
        try:
            state = np.asarray(state, np.float32)
        except (ValueError, TypeError):
            raise UsageError(f"{self.source} takes a state of numbers (float32), got {type(state).__name__} "
                             f"{str(state)[:60]}") from None
        if state.shape != ((self.state_size,) if single else (rows, self.state_size)):
            expected = f"[{self.state_size}]" if single else f"[{rows}, {self.state_size}]"
            raise UsageError(f"{self.source} takes a state of shape {expected} for "
                             f"{'one observation' if single else f'{rows} observations'}, got {list(state.shape)}")
        if not np.all(np.isfinite(state)):
            raise UsageError(f"{self.source}: the state holds NaN or Inf (start an episode with zeros)")
        return state


def reset_episodes(policy, done=None) -> None:
    """policy.reset(done) for a policy with memory; nothing for one without."""
    reset = getattr(policy, "reset", None)
    if reset is not None:
        reset(done)

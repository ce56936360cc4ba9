"""Uniform experience replay and the n-step transition builder that feeds it.

A stored transition is (obs_tm1, a_tm1, r_t, discount_t, obs_t) where, for an
n-step transition, r_t = sum_{k<n} gamma^k r_{t+k} and discount_t = gamma^n, or
0 if the episode terminated inside those n steps. The learner's target is then
the same for every n: r_t + discount_t * Q_target(obs_t, a*).

A transition with a NaN or Inf in a float field is refused as it is added (tfrl.models.numerics.NonFiniteError):
kept, it would reach every later batch and every checkpoint, long before a gradient step shows it.
"""

from __future__ import annotations

import collections
from typing import Sequence

import numpy as np

from tfrl.models import numerics

TRANSITION_FIELDS = ("obs", "action", "reward", "discount", "next_obs")
FIELD_NAMES = {"obs": "observation", "action": "action", "reward": "reward", "discount": "discount",
               "next_obs": "next observation"}  # as errors name them


class UniformReplay:
    """Fixed-capacity ring buffer of transitions; once full, the oldest are overwritten."""

    def __init__(self, capacity: int, obs_shape: Sequence[int], seed: int, action_shape: Sequence[int] = (),
                 action_dtype=np.int32, obs_dtype="float32"):
        """action_shape/dtype: () int32 for Discrete actions (the default), (D,) float32 for Box ones.
        obs_dtype: float32, or uint8 for images."""
        self.capacity = capacity
        self.obs = np.zeros((capacity, *obs_shape), obs_dtype)
        self.action = np.zeros((capacity, *action_shape), action_dtype)
        self.reward = np.zeros((capacity,), np.float32)
        self.discount = np.zeros((capacity,), np.float32)
        self.next_obs = np.zeros((capacity, *obs_shape), obs_dtype)
        self.size = 0
        self.cursor = 0  # where the next transition is written
        self._rng = np.random.default_rng(seed)
        # Looked up once: add() runs at every env step.
        self._dtypes = {name: getattr(self, name).dtype for name in TRANSITION_FIELDS}
        self._may_be_nonfinite = [name for name in TRANSITION_FIELDS if numerics.can_hold_nonfinite(self._dtypes[name])]

    def add(self, obs, action, reward, discount, next_obs) -> None:
        """Add a batch of N transitions (arrays with leading dim N); NonFiniteError, adding none, if a float field
        holds a NaN or Inf."""
        n = len(action)
        if n > self.capacity:
            raise ValueError(f"cannot add {n} transitions to a buffer of capacity {self.capacity}")
        batch = self._checked(obs=obs, action=action, reward=reward, discount=discount, next_obs=next_obs)
        end = self.cursor + n
        where = slice(self.cursor, end) if end <= self.capacity else np.arange(self.cursor, end) % self.capacity
        for name, values in batch.items():
            getattr(self, name)[where] = values
        self.cursor = int((self.cursor + n) % self.capacity)
        self.size = min(self.size + n, self.capacity)

    def _checked(self, **fields) -> dict[str, np.ndarray]:
        """The fields in the buffer's dtypes (no copy where they already are), one np.isfinite pass over each float
        one: checked after the cast, so a float64 that overflows float32 counts as the Inf it would be stored as.
        uint8 frames and integer actions or refs cannot hold NaN and are not looked at."""
        with np.errstate(over="ignore", invalid="ignore"):  # the overflow is reported below, as an Inf
            stored = {name: np.asarray(value, self._dtypes[name]) for name, value in fields.items()}
        bad = [FIELD_NAMES[name] for name in self._may_be_nonfinite if not numerics.all_finite(stored[name])]
        if bad:
            raise numerics.NonFiniteError.entering_replay(bad)
        return stored

    def observe(self, step) -> tuple[np.ndarray, np.ndarray]:
        """(s_t, s_t+1) of a vector step (tfrl.envs.VectorStep), as this replay stores observations: whole."""
        return step.obs, step.final_obs()

    def sample(self, batch_size: int, num_batches: int) -> dict[str, np.ndarray]:
        """`num_batches` batches drawn uniformly with replacement: arrays of shape [num_batches, batch_size, ...]."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx = self._rng.integers(0, self.size, size=(num_batches, batch_size))
        return {name: getattr(self, name)[idx] for name in TRANSITION_FIELDS}

    def checkpoint_state(self) -> tuple[dict[str, np.ndarray], dict]:
        """(arrays, JSON-able state) for tfrl.run.checkpoints: the filled slots [:size] and the cursor, sampling RNG."""
        arrays = {name: getattr(self, name)[: self.size] for name in TRANSITION_FIELDS}
        state = {"size": self.size, "cursor": self.cursor, "capacity": self.capacity,
                 "rng": self._rng.bit_generator.state}
        return arrays, state

    def restore_checkpoint_state(self, arrays: dict[str, np.ndarray], state: dict) -> None:
        """Inverse of checkpoint_state, into a buffer of the same capacity and observation shape."""
        if state["capacity"] != self.capacity:
            raise ValueError(f"replay capacity {self.capacity} != the checkpoint's {state['capacity']}")
        size = int(state["size"])
        for name in TRANSITION_FIELDS:
            buffer = getattr(self, name)
            buffer[:size] = arrays[name]
            buffer[size:] = 0
        self.size, self.cursor = size, int(state["cursor"])
        self._rng.bit_generator.state = state["rng"]


class NStepBuilder:
    """Turns per-step vector env output into n-step transitions, per sub-env.

    A time-limit truncation keeps the bootstrap (discount gamma^k): the state
    still has value, the episode was just cut. A termination zeroes it.
    """

    def __init__(self, n: int, gamma: float, num_envs: int):
        self.n = n
        self.gamma = gamma
        self._pending = [collections.deque() for _ in range(num_envs)]  # (obs, action, reward) per env

    def step(self, obs, action, reward, terminated, truncated, next_obs):
        """Feed one vector step; returns the complete transitions as a tuple of arrays, or None if none is complete.

        next_obs must hold the true final observation for envs whose episode ended (envs.next_obs_for_storage).
        """
        if self.n == 1:  # fast path, fully vectorized
            discount = self.gamma * (1.0 - terminated.astype(np.float32))
            return obs, action, reward, discount.astype(np.float32), next_obs
        out = []
        for i, pending in enumerate(self._pending):
            pending.append((obs[i], action[i], float(reward[i])))
            if terminated[i] or truncated[i]:
                # Flush: every pending start gets the rewards up to the episode's end.
                while pending:
                    out.append(self._transition(pending, next_obs[i], bool(terminated[i])))
                    pending.popleft()
            elif len(pending) == self.n:
                out.append(self._transition(pending, next_obs[i], False))
                pending.popleft()
        if not out:
            return None
        o, a, r, d, no = zip(*out)
        actions = np.stack(a)
        if np.issubdtype(actions.dtype, np.integer):
            actions = actions.astype(np.int32)
        return (np.stack(o), actions, np.asarray(r, np.float32), np.asarray(d, np.float32), np.stack(no))

    def _transition(self, pending, last_obs, terminated):
        ret = sum(self.gamma ** k * r for k, (_, _, r) in enumerate(pending))
        discount = 0.0 if terminated else self.gamma ** len(pending)
        first_obs, first_action, _ = pending[0]
        return first_obs, first_action, ret, discount, last_obs

"""Prioritized experience replay (Schaul et al. 2016, the proportional variant), vectorized in NumPy.

Transition i is sampled with probability P(i) = p_i^alpha / sum_k p_k^alpha, where p_i = |TD error_i| + epsilon
from the last time it was trained on (a new transition gets the largest priority seen so far, so it is sampled
at least once soon). Its loss is weighted by the importance-sampling weight

    w_i = (N * P(i))^-beta / max_k (N * P(k))^-beta = (min_k p_k^alpha / p_i^alpha)^beta

(the maximum over the whole buffer, as in Algorithm 1 of the paper and OpenAI baselines), which corrects the
bias of non-uniform sampling fully at beta = 1; beta is annealed from its start value to 1 over training.

Two trees over the buffer's slots hold the p^alpha: a sum tree (sampling: each of a batch's B draws falls in its
own 1/B stratum of the total, then one vectorized descent per tree level) and a min tree (the weights'
normalizer). Updating n priorities costs O(n log C) array operations, sampling K x B draws O(K B log C).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tfrl.replay import UniformReplay


class _Tree:
    """A complete binary tree over `capacity` leaves (rounded up to a power of two), each inner node the
    `combine` of its children; leaves of unused slots hold `empty`."""

    def __init__(self, capacity: int, combine, empty: float):
        self.depth = max(0, int(np.ceil(np.log2(capacity))))
        self.leaves = 1 << self.depth
        self.nodes = np.full(2 * self.leaves, empty, np.float64)  # node 1 is the root; leaf i is node leaves + i
        self._combine, self._empty = combine, empty

    def set(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Sets leaves (an index given twice: its last value), then their ancestors, one level at a time. A
        parent met twice on a level is written twice with the same value (both computed from its children
        before either write), so no deduplication is needed."""
        nodes = np.asarray(indices, np.int64) + self.leaves
        self.nodes[nodes] = values
        for _ in range(self.depth):
            nodes = nodes // 2
            self.nodes[nodes] = self._combine(self.nodes[2 * nodes], self.nodes[2 * nodes + 1])

    def rebuild(self, values: np.ndarray) -> None:
        """All leaves at once: values for slots 0..len-1, empty after."""
        self.nodes[:] = self._empty
        self.nodes[self.leaves:self.leaves + len(values)] = values
        level = self.leaves
        while level > 1:
            parents = np.arange(level // 2, level)
            self.nodes[parents] = self._combine(self.nodes[2 * parents], self.nodes[2 * parents + 1])
            level //= 2

    @property
    def root(self) -> float:
        return float(self.nodes[1])


class SumTree(_Tree):
    def __init__(self, capacity: int):
        super().__init__(capacity, np.add, 0.0)

    def find(self, targets: np.ndarray) -> np.ndarray:
        """The leaf whose prefix-sum interval [sum of leaves before it, + itself) holds each target in
        [0, total)."""
        targets = np.array(targets, np.float64)
        nodes = np.ones(targets.shape, np.int64)
        while nodes.flat[0] < self.leaves:
            left = self.nodes[2 * nodes]
            right = targets >= left
            targets = np.where(right, targets - left, targets)
            nodes = 2 * nodes + right
        return nodes - self.leaves


class PrioritizedReplay(UniformReplay):
    """UniformReplay's ring buffer, sampled in proportion to priorities; see the module docstring."""

    def __init__(self, capacity: int, obs_shape: Sequence[int], seed: int, alpha: float, epsilon: float,
                 obs_dtype="float32"):
        super().__init__(capacity, obs_shape, seed, obs_dtype=obs_dtype)
        self.alpha, self.epsilon = alpha, epsilon
        self._sums, self._mins = SumTree(capacity), _Tree(capacity, np.minimum, np.inf)
        self.max_priority = 1.0  # the largest p^alpha so far: a new transition's

    def add(self, obs, action, reward, discount, next_obs) -> None:
        """UniformReplay.add (which refuses non-finite transitions before any slot changes), at the largest priority."""
        slots = (self.cursor + np.arange(len(action))) % self.capacity
        super().add(obs, action, reward, discount, next_obs)
        self._set(slots, np.full(len(slots), self.max_priority))

    def sample(self, batch_size: int, num_batches: int, beta: float = 1.0) -> dict[str, np.ndarray]:
        """`num_batches` batches [K, B, ...], each of B draws, one per 1/B stratum of the total priority; also
        "index" [K, B] (for update_priorities) and "weight" [K, B], the importance-sampling weights at beta."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        total = self._sums.root
        strata = (np.arange(batch_size) + self._rng.random((num_batches, batch_size))) / batch_size
        index = np.minimum(self._sums.find(strata * total), self.size - 1)  # a float rounding at the far end
        priority = self._sums.nodes[index + self._sums.leaves]
        batch = {name: getattr(self, name)[index] for name in ("obs", "action", "reward", "discount", "next_obs")}
        batch["index"] = index
        batch["weight"] = ((self._mins.root / priority) ** beta).astype(np.float32)
        return batch

    def update_priorities(self, index: np.ndarray, errors: np.ndarray) -> None:
        """p = (|error| + epsilon)^alpha for the sampled transitions (a transition drawn twice: its last error)."""
        priority = (np.abs(np.asarray(errors, np.float64)) + self.epsilon) ** self.alpha
        self._set(np.asarray(index).reshape(-1), priority.reshape(-1))
        self.max_priority = max(self.max_priority, float(priority.max()))

    def probabilities(self) -> np.ndarray:
        """P(i) of the filled slots."""
        return self._sums.nodes[self._sums.leaves:self._sums.leaves + self.size] / self._sums.root

    def _set(self, slots: np.ndarray, priority: np.ndarray) -> None:
        self._sums.set(slots, priority)
        self._mins.set(slots, priority)

    def checkpoint_state(self) -> tuple[dict[str, np.ndarray], dict]:
        arrays, state = super().checkpoint_state()
        arrays["priority"] = self._sums.nodes[self._sums.leaves:self._sums.leaves + self.size].copy()
        return arrays, {**state, "max_priority": self.max_priority}

    def restore_checkpoint_state(self, arrays: dict[str, np.ndarray], state: dict) -> None:
        super().restore_checkpoint_state(arrays, state)
        priority = np.asarray(arrays["priority"], np.float64)
        if len(priority) != self.size or not np.all(priority > 0):
            raise ValueError(f"the checkpoint's {len(priority)} priorities do not fit its {self.size} transitions")
        self._sums.rebuild(priority)
        self._mins.rebuild(priority)
        self.max_priority = float(state["max_priority"])

"""The NumPy side of observation and reward normalization (tfrl.models.normalization, after SB3's VecNormalize): running
statistics, the snapshot a rollout actor counts with, and the reward scaler. No TensorFlow: a rollout actor
receives these objects.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np


EPSILON = 1e-8  # under the square root, as in SB3
INITIAL_COUNT = 1e-4  # the prior's weight, as in SB3's RunningMeanStd


class RunningMeanStd:
    """Mean and variance of a stream of batches [N, *shape], merged batch by batch (Chan et al.'s parallel
    algorithm), in float64."""

    def __init__(self, shape: Sequence[int] = ()):
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = INITIAL_COUNT

    @classmethod
    def empty(cls, shape: Sequence[int] = ()) -> RunningMeanStd:
        """Statistics of nothing yet (no prior): what a rollout actor counts apart from the learner's."""
        stats = cls(shape)
        stats.var, stats.count = np.zeros(shape, np.float64), 0
        return stats

    def copy(self) -> RunningMeanStd:
        stats = RunningMeanStd(self.mean.shape)
        stats.mean, stats.var, stats.count = self.mean.copy(), self.var.copy(), self.count
        return stats

    def update(self, batch: np.ndarray) -> None:
        batch = np.asarray(batch, np.float64)
        self.merge(batch.mean(axis=0), batch.var(axis=0), len(batch))

    def merge(self, batch_mean: np.ndarray, batch_var: np.ndarray, batch_count: float) -> None:
        """Takes in the mean and variance of batch_count more values."""
        if batch_count == 0:
            return
        delta = batch_mean - self.mean
        total = self.count + batch_count
        m2 = self.var * self.count + batch_var * batch_count + delta ** 2 * self.count * batch_count / total
        self.mean = self.mean + delta * batch_count / total
        self.var = m2 / total
        self.count = total


def normalized(obs: np.ndarray, stats: RunningMeanStd, clip: float) -> np.ndarray:
    """The batch normalized by `stats` and clipped to [-clip, clip], float32."""
    values = (np.asarray(obs, np.float64) - stats.mean) / np.sqrt(stats.var + EPSILON)
    return np.clip(values, -clip, clip).astype(np.float32)


class CountingNormalizer:
    """A snapshot of an ObservationNormalizer's statistics, in NumPy alone, that goes on counting where the envs are
    (a rollout actor) as the learner's would, and keeps what it counted there apart (`counted`) for the learner
    to absorb."""

    def __init__(self, stats: RunningMeanStd, clip: float):
        self.stats, self.clip = stats, clip
        self._counted = RunningMeanStd.empty(stats.mean.shape)

    def observe(self, obs: np.ndarray) -> np.ndarray:
        self.stats.update(obs)
        self._counted.update(obs)
        return self(obs)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        return normalized(obs, self.stats, self.clip)

    def counted(self) -> RunningMeanStd:
        """The statistics of the observations counted since the snapshot."""
        return self._counted


class FieldNormalizers:
    """Dict observations' normalization: one normalizer per float vector field, over structured batches (other
    fields pass as they are)."""

    def __init__(self, fields: Mapping[str, Any]):
        self.fields = dict(fields)

    def observe(self, obs: np.ndarray) -> np.ndarray:
        """Adds each field of the batch to its statistics, then returns the batch normalized (a copy)."""
        normalized = obs.copy()
        for key, normalizer in self.fields.items():
            normalized[key] = normalizer.observe(obs[key])
        return normalized

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        normalized = obs.copy()
        for key, normalizer in self.fields.items():
            normalized[key] = normalizer(obs[key])
        return normalized

    def snapshot(self) -> FieldNormalizers:
        return FieldNormalizers({key: normalizer.snapshot() for key, normalizer in self.fields.items()})

    def counted(self) -> dict[str, RunningMeanStd]:
        return {key: normalizer.counted() for key, normalizer in self.fields.items()}

    def absorb(self, counted: Mapping[str, RunningMeanStd]) -> None:
        for key, normalizer in self.fields.items():
            normalizer.absorb(counted[key])

    def sync(self) -> None:
        for normalizer in self.fields.values():
            normalizer.sync()

    def load(self) -> None:
        for normalizer in self.fields.values():
            normalizer.load()


class NoNormalization:
    """What a learner without normalize_observations holds in the normalizer's place: observations pass as they
    are, and there is no layer."""

    layer = None

    def observe(self, obs: np.ndarray) -> np.ndarray:
        return obs

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        return obs

    def snapshot(self) -> NoNormalization:
        return NoNormalization()

    def counted(self) -> None:
        return None

    def absorb(self, counted: None) -> None:
        """Nothing was counted."""

    def sync(self) -> None:
        """Nothing to copy."""

    def load(self) -> None:
        """Nothing to load."""


class RewardScaler:
    """Divides each env's rewards by the running std of its discounted return (SB3's norm_reward)."""

    def __init__(self, num_envs: int, gamma: float, clip: float):
        self.gamma, self.clip = gamma, clip
        self.stats = RunningMeanStd()
        self.returns = np.zeros(num_envs, np.float64)  # G per env, of the episode in progress

    def scale(self, reward: np.ndarray, done: np.ndarray, envs: slice = slice(None)) -> np.ndarray:
        """Updates G and its variance with this vector step's rewards of the envs `envs` (all by default),
        returns them scaled (float32)."""
        returns = self.returns[envs] * self.gamma + reward
        self.stats.update(returns)
        scaled = np.clip(reward / np.sqrt(self.stats.var + EPSILON), -self.clip, self.clip)
        returns[np.asarray(done, bool)] = 0.0
        self.returns[envs] = returns
        return scaled.astype(np.float32)

    def state(self) -> dict[str, np.ndarray]:
        """The arrays a checkpoint keeps."""
        stats = self.stats
        return {"reward_returns": self.returns, "reward_var": np.asarray(stats.var),
                "reward_mean": np.asarray(stats.mean), "reward_count": np.asarray(stats.count)}

    def restore(self, arrays) -> None:
        self.returns = np.array(arrays["reward_returns"], np.float64)
        self.stats.var = np.array(arrays["reward_var"], np.float64)
        self.stats.mean = np.array(arrays["reward_mean"], np.float64)
        self.stats.count = float(arrays["reward_count"])

"""SAC's exploration in NumPy, what its acting (and a rollout actor's) samples with: no TensorFlow."""

from __future__ import annotations

import numpy as np

from tfrl.agents.sac.config import SACConfig
from tfrl.models.numpy_networks import NumpySquashedActor

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # SB3's bounds on the actor's log std (the learner's and the export's too)


class SquashedGaussianExplorer:
    """tanh(mean + std * noise) of the mirror's Gaussian, its log std clipped as the learner clips it."""

    def __init__(self, mirror: NumpySquashedActor, config: SACConfig):
        del config
        self._mirror = mirror

    def use(self, mirror: NumpySquashedActor) -> None:
        self._mirror = mirror

    def __call__(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        mean, log_std = self._mirror(obs)
        std = np.exp(np.clip(log_std, LOG_STD_MIN, LOG_STD_MAX))
        return np.tanh(mean + std * rng.standard_normal(mean.shape)).astype(np.float32)

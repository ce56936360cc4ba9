"""TD3's exploration in NumPy, what its acting (and a rollout actor's) samples with: no TensorFlow."""

from __future__ import annotations

import numpy as np

from tfrl.agents.td3.config import TD3Config
from tfrl.models.numpy_networks import NumpyDeterministicActor


class GaussianNoiseExplorer:
    """The mirror's action plus Gaussian noise of std exploration_noise, clipped to [-1, 1]."""

    def __init__(self, mirror: NumpyDeterministicActor, config: TD3Config):
        self._mirror, self._scale = mirror, config.exploration_noise

    def use(self, mirror: NumpyDeterministicActor) -> None:
        self._mirror = mirror

    def __call__(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        action = self._mirror(obs)
        noise = self._scale * rng.standard_normal(action.shape)
        return np.clip(action + noise, -1.0, 1.0).astype(np.float32)

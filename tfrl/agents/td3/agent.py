"""The TD3 agent (tfrl.agents.off_policy.continuous): acts with a NumPy mirror of the deterministic actor plus
Gaussian exploration noise, clipped to [-1, 1]; each batch carries the noise of the target policy's smoothing."""

from __future__ import annotations

import numpy as np

from tfrl.agents.off_policy.continuous import ContinuousAgent
from tfrl.agents.td3 import policy as td3_policy
from tfrl.agents.td3.config import TD3Config
from tfrl.agents.td3.explorer import GaussianNoiseExplorer
from tfrl.agents.td3.learning import TD3Learner
from tfrl.envs import EnvInfo
from tfrl.models import numpy_networks


class TD3Agent(ContinuousAgent):
    NAME = "TD3"
    NOISE_FIELDS = ("noise_next",)
    EXPLORER = GaussianNoiseExplorer

    def __init__(self, learner: TD3Learner, config: TD3Config, env: EnvInfo, seed: int):
        super().__init__(learner, config, env, seed, numpy_networks.NumpyDeterministicActor(learner.actor))

    def greedy_squashed(self, obs: np.ndarray) -> np.ndarray:
        return self._mirror(obs)

    def serving_policy(self):
        return td3_policy.serving_policy(self.config, self._env_info, self.learner.actor,
                                         self.learner.obs_normalizer.layer)

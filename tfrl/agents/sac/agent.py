"""The SAC agent (tfrl.agents.off_policy.continuous): acts with the squashed Gaussian of a NumPy mirror of the
actor; each batch carries the noise of the actions the learner samples at s' and at s."""

from __future__ import annotations

import numpy as np

from tfrl.agents.off_policy.continuous import ContinuousAgent
from tfrl.agents.sac import policy as sac_policy
from tfrl.agents.sac.config import SACConfig
from tfrl.agents.sac.explorer import SquashedGaussianExplorer
from tfrl.agents.sac.learning import SACLearner
from tfrl.envs import EnvInfo
from tfrl.models import numpy_networks


class SACAgent(ContinuousAgent):
    NAME = "SAC"
    NOISE_FIELDS = ("noise_next", "noise")
    EXPLORER = SquashedGaussianExplorer
    MIRROR = numpy_networks.NumpySquashedActor  # MIRROR(actor): (mean, log std) in NumPy; update(acting variables)
    POLICY = sac_policy  # the module whose serving_policy exports the actor

    def __init__(self, learner: SACLearner, config: SACConfig, env: EnvInfo, seed: int):
        super().__init__(learner, config, env, seed, self.MIRROR(learner.actor))

    def greedy_squashed(self, obs: np.ndarray) -> np.ndarray:
        return np.tanh(self._mirror(obs)[0])

    def serving_policy(self):
        return self.POLICY.serving_policy(self.config, self._env_info, self.learner.actor,
                                          self.learner.obs_normalizer.layer)

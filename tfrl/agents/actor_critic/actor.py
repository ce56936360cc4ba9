"""Actor-critic acting (A2C, PPO): samples from the policy of a NumPy mirror of the actor-critic network. Never exported.

The mirror (`tfrl.networks.NumpyActorCritic`) is refreshed with the weights each
train call returns, so acting makes no TF call.
"""

from __future__ import annotations

import numpy as np

from tfrl.agents.actor_critic.networks import CategoricalHead
from tfrl.networks import NumpyActorCritic


class ActorCriticActor:
    def __init__(self, mirror: NumpyActorCritic, head: CategoricalHead, seed: int):
        self._mirror = mirror
        self._head = head
        self._rng = np.random.default_rng(seed)

    @property
    def rng(self) -> np.random.Generator:
        """The sampling RNG (its state is checkpointed)."""
        return self._rng

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """obs [N, ...] -> (actions [N] sampled from pi(.|obs), V(obs) [N], the policy params [N, P] they were
        sampled from), from one forward pass. PPO's ratio needs log pi_old(a|s), which the params give."""
        policy_params, value = self._mirror(obs)
        return self._head.sample(self._rng, policy_params), value, policy_params

    def value(self, obs: np.ndarray) -> np.ndarray:
        """V(obs) [N]: bootstraps the rollout's end and truncated episodes."""
        return self._mirror.value(obs)

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        """The most likely actions [N]: the policy that is evaluated (and would be exported)."""
        return self._head.mode(self._mirror(obs)[0])

"""Actor-critic acting (A2C, PPO): samples from the policy of a NumPy mirror of the actor-critic network. Never exported.

The mirror (`tfrl.networks.NumpyActorCritic`) is refreshed with the weights each
train call returns, so acting makes no TF call.
"""

from __future__ import annotations

import numpy as np

from tfrl.agents.actor_critic.networks import masked_logits_numpy
from tfrl.networks import NumpyActorCritic
from tfrl.observations import legal_actions


class ActorCriticActor:
    def __init__(self, mirror: NumpyActorCritic, head, seed: int):
        """head: the policy head (tfrl.agents.actor_critic.networks) of the network the mirror copies."""
        self._mirror = mirror
        self._head = head
        self._rng = np.random.default_rng(seed)

    @property
    def rng(self) -> np.random.Generator:
        """The sampling RNG (its state is checkpointed)."""
        return self._rng

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """obs [N, ...] -> (actions [N] sampled from pi(.|obs), V(obs) [N], the policy params [N, P] they were
        sampled from), from one forward pass. PPO's ratio needs log pi_old(a|s), which the params give. With an
        action mask, the illegal actions' logits are MASKED_LOGIT in the params: never sampled, probability 0."""
        policy_params, value = self._mirror(obs)
        policy_params = masked_logits_numpy(policy_params, legal_actions(obs))
        return self._head.sample(self._rng, policy_params), value, policy_params

    def value(self, obs: np.ndarray) -> np.ndarray:
        """V(obs) [N]: bootstraps the rollout's end and truncated episodes."""
        return self._mirror.value(obs)

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        """The most likely actions, as the env takes them (a Gaussian's mean clipped to the Box): the policy that
        is evaluated and exported."""
        return self._head.env_action(self._head.mode(masked_logits_numpy(self._mirror(obs)[0], legal_actions(obs))))

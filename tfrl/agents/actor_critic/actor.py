"""Actor-critic acting (A2C, PPO): samples from the policy of a NumPy mirror of the actor-critic network. Never exported.

The mirror (`tfrl.models.numpy_networks.NumpyActorCritic`) is refreshed with the weights each
train call returns, so acting makes no TF call.
"""

from __future__ import annotations

import numpy as np

from tfrl.agents.actor_critic.heads import masked_logits_numpy
from tfrl.envs.observations import legal_actions
from tfrl.models.numpy_networks import NumpyActorCritic


def policy_at(mirror: NumpyActorCritic, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the policy params [N, P], illegal actions masked as act() masks them, V(obs) [N]) of `mirror` at obs."""
    policy_params, value = mirror(obs)
    return masked_logits_numpy(policy_params, legal_actions(obs)), value


class ActorCriticActor:
    def __init__(self, mirror: NumpyActorCritic, head, seed: int):
        """head: the policy head (tfrl.agents.actor_critic.networks) of the network the mirror copies."""
        self._mirror = mirror
        self._head = head
        self._rng = np.random.default_rng(seed)

    def use(self, mirror: NumpyActorCritic) -> None:
        """Acts with `mirror` from now on (a copy of newer weights, as a rollout worker receives them)."""
        self._mirror = mirror

    @property
    def rng(self) -> np.random.Generator:
        """The sampling RNG (its state is checkpointed)."""
        return self._rng

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """obs [N, ...] -> (actions [N] sampled from pi(.|obs), V(obs) [N], the policy params [N, P] they were
        sampled from), from one forward pass. PPO's ratio needs log pi_old(a|s), which the params give. With an
        action mask, the illegal actions' logits are MASKED_LOGIT in the params: never sampled, probability 0."""
        policy_params, value = self._forward(obs)
        policy_params = masked_logits_numpy(policy_params, legal_actions(obs))
        return self._head.sample(self._rng, policy_params), value, policy_params

    def _forward(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._mirror(obs)

    def episodes_ended(self, done: np.ndarray) -> None:
        """The envs where done [N] is true start new episodes at the next act(): nothing to forget here."""

    def memory(self) -> tuple[np.ndarray, np.ndarray] | None:
        """What the last act() started from, for the rollout: None without memory."""
        return None

    def value(self, obs: np.ndarray) -> np.ndarray:
        """V(obs) [N]: bootstraps the rollout's end and truncated episodes."""
        return self._mirror.value(obs)

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        """The most likely actions, as the env takes them (a Gaussian's mean clipped to the Box): the policy that
        is evaluated and exported."""
        return self._head.env_action(self._head.mode(masked_logits_numpy(self._mirror(obs)[0], legal_actions(obs))))


class RecurrentActor(ActorCriticActor):
    """ActorCriticActor with memory (tfrl.agents.actor_critic.recurrent): one state per env, zeroed where an
    episode starts. value(obs) is V(obs) as the next observation of each env's episode (so V of a truncated
    episode's final observation is taken before episodes_ended, and V(s_T) after it)."""

    def __init__(self, mirror, head, seed: int, num_envs: int, state_size: int):
        super().__init__(mirror, head, seed)
        self._state = np.zeros((num_envs, state_size), np.float32)
        self._starts = np.ones(num_envs, bool)  # every env starts an episode at the first step
        self._memory = (self._state, self._starts.astype(np.float32))

    def _forward(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        state = self._started(self._state)
        self._memory = (state, self._starts.astype(np.float32))
        policy_params, value, self._state = self._mirror(obs, state)
        self._starts[:] = False
        return policy_params, value

    def _started(self, state: np.ndarray) -> np.ndarray:
        return np.where(self._starts[:, None], np.float32(0), state)

    def value(self, obs: np.ndarray) -> np.ndarray:
        return self._mirror(obs, self._started(self._state))[1]

    def episodes_ended(self, done: np.ndarray) -> None:
        self._starts |= np.asarray(done, bool)

    def memory(self) -> tuple[np.ndarray, np.ndarray]:
        """(the state the last act() stepped from [N, S], 1.0 where an episode started there [N])."""
        return self._memory

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        raise TypeError("a policy with memory acts from a state: greedy_step(obs, state)")

    def greedy_step(self, obs: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the most likely actions as the env takes them, the next state): the evaluated policy's step."""
        policy_params, _, state = self._mirror(obs, state)
        return self._head.env_action(self._head.mode(masked_logits_numpy(policy_params, legal_actions(obs)))), state

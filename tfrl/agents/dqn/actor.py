"""DQN acting: epsilon-greedy over a NumPy mirror of the online network. Never exported."""

from __future__ import annotations

import numpy as np

from tfrl.agents.dqn.config import DQNConfig
from tfrl.schedules import Schedule


def linear_epsilon(env_step: int, config: DQNConfig) -> float:
    """Epsilon falls linearly from epsilon_start to epsilon_end over the first
    epsilon_decay_fraction * total_env_steps env steps, then stays at epsilon_end."""
    decay = Schedule(config.epsilon_start, config.epsilon_end, config.epsilon_decay_fraction * config.total_env_steps)
    return decay.at(env_step)


class EpsilonGreedyActor:
    def __init__(self, q_values_fn, num_actions: int, seed: int):
        self._q_values = q_values_fn  # obs [N, ...] -> [N, A]
        self._num_actions = num_actions
        self._rng = np.random.default_rng(seed)

    @property
    def rng(self) -> np.random.Generator:
        """The exploration RNG; its state is checkpointed."""
        return self._rng

    def act(self, obs: np.ndarray, epsilon: float) -> np.ndarray:
        greedy = np.argmax(self._q_values(obs), axis=-1)
        explore = self._rng.random(len(obs)) < epsilon
        if not explore.any():
            return greedy
        random_actions = self._rng.integers(0, self._num_actions, size=len(obs))
        return np.where(explore, random_actions, greedy)

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        return np.argmax(self._q_values(obs), axis=-1)

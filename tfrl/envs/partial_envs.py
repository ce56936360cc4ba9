"""Partially observable classic-control envs: the positions without the velocities, as rl-baselines3-zoo's
CartPoleNoVel-v1 and PendulumNoVel-v1. One observation does not tell the state; a policy with memory (lstm_units)
can infer the velocities from consecutive ones.

    tfrl/CartPoleNoVel-v1   CartPole-v1 observing [cart position, pole angle] (its entries 0 and 2); 500 steps
    tfrl/PendulumNoVel-v1   Pendulum-v1 observing [cos(angle), sin(angle)] (its entries 0 and 1); 200 steps

Rewards, dynamics, time limits and action spaces are the originals'.
"""

from __future__ import annotations

from typing import Sequence

import gymnasium as gym
import numpy as np


class Positions(gym.ObservationWrapper):
    """Keeps the entries `keep` of a Box observation (and of its bounds)."""

    def __init__(self, env: gym.Env, keep: Sequence[int]):
        super().__init__(env)
        self._keep = np.asarray(keep)
        space = env.observation_space
        self.observation_space = gym.spaces.Box(space.low[self._keep], space.high[self._keep], dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[self._keep]


def cartpole_no_velocities(**kwargs) -> gym.Env:
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv

    return Positions(CartPoleEnv(**kwargs), keep=(0, 2))


def pendulum_no_velocity(**kwargs) -> gym.Env:
    from gymnasium.envs.classic_control.pendulum import PendulumEnv

    return Positions(PendulumEnv(**kwargs), keep=(0, 1))


_ENVS = {"tfrl/CartPoleNoVel-v1": (cartpole_no_velocities, 500, 475.0),
         "tfrl/PendulumNoVel-v1": (pendulum_no_velocity, 200, None)}


def register() -> None:
    """Registers the ids in gymnasium (again: nothing)."""
    for env_id, (entry_point, max_steps, threshold) in _ENVS.items():
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=entry_point, max_episode_steps=max_steps, reward_threshold=threshold)

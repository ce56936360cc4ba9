"""Envs that go wrong mid-episode, registered when imported (--env=bad_envs:..., with tests/ on the Python path).

BadFrame-v0: a 12x12x1 uint8 image env (reward 0, episodes of 50 steps) whose observation at its 30th step is
the wrong thing: of shape 12x13x1 (`kind="shape"`) or float64 (`kind="dtype"`).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

BAD_STEP = 30


class BadFrame(gym.Env):
    def __init__(self, kind: str = "shape"):
        self.kind = kind
        self.observation_space = gym.spaces.Box(0, 255, (12, 12, 1), np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self._steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._steps = 0
        return np.zeros((12, 12, 1), np.uint8), {}

    def step(self, action):
        self._steps += 1
        obs = np.zeros((12, 12, 1), np.uint8)
        if self._steps == BAD_STEP:
            obs = np.zeros((12, 13, 1), np.uint8) if self.kind == "shape" else np.zeros((12, 12, 1), np.float64)
        return obs, 0.0, False, self._steps >= 50, {}


gym.register(id="BadFrame-v0", entry_point=BadFrame)

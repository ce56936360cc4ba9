"""Envs that go wrong mid-episode, registered when imported (--env=bad_envs:..., with tests/ on the Python path).

BadFrame-v0: a 12x12x1 uint8 image env (reward 0, episodes of 50 steps) whose observation at its 30th step is
the wrong thing: of shape 12x13x1 (`kind="shape"`) or float64 (`kind="dtype"`).
ChangingDict-v0: a Dict observation {"x", and with mask=True a float "action_mask"} that goes wrong at its 5th step
(episodes of 20): `kind="nan_mask"` puts a NaN beside the legal entries, `kind="new_key"` adds a key.
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


class ChangingDict(gym.Env):
    def __init__(self, kind: str = "new_key", mask: bool = True):
        self.kind, self.mask, self._steps = kind, mask, 0
        spaces = {"x": gym.spaces.Box(-1, 1, (2,), np.float32)}
        if mask:
            spaces["action_mask"] = gym.spaces.Box(0, 1, (3,), np.float32)
        self.observation_space = gym.spaces.Dict(spaces)
        self.action_space = gym.spaces.Discrete(3)

    def _obs(self):
        obs = {"x": np.zeros(2, np.float32)}
        if self.mask:
            obs["action_mask"] = np.array([1.0, np.nan if self.kind == "nan_mask" and self._steps >= 5 else 1.0, 0.0],
                                          np.float32)
        if self.kind == "new_key" and self._steps >= 5:
            obs["new"] = np.zeros(1, np.float32)
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._steps = 0
        return self._obs(), {}

    def step(self, action):
        self._steps += 1
        return self._obs(), 1.0, self._steps >= 20, False, {}


gym.register(id="ChangingDict-v0", entry_point=ChangingDict)

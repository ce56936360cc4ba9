"""A tiny gymnasium env for the bring-your-own-env tests, registered as Corridor-v0 when imported
(--env=custom_envs:Corridor-v0, with tests/ on the Python path).

Corridor: positions 0..length-1, start at 0, goal at length-1. Actions: 0 = left (a wall at 0), 1 = right.
Reward -0.05 per step, +1 on the step that reaches the goal (which ends the episode); episodes are cut after
max_steps. Observation: the position, one-hot (Box). The optimal return is 1 - 0.05 * (length - 2): with the
default length 6, 0.8 in 5 steps. Uniformly random actions reach the goal in under 20 steps about a quarter of
the time, so their mean return is far below that.
"""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np

LENGTH = 6
OPTIMAL_RETURN = 1 - 0.05 * (LENGTH - 2)  # 0.8


class Corridor(gym.Env):
    def __init__(self, length: int = LENGTH, max_steps: int = 20):
        self.length, self.max_steps = length, max_steps
        self.observation_space = gym.spaces.Box(0.0, 1.0, (length,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._position = self._steps = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.length, np.float32)
        obs[self._position] = 1.0
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._position = self._steps = 0
        return self._obs(), {}

    def step(self, action):
        self._position = max(0, self._position + (1 if int(action) == 1 else -1))
        self._steps += 1
        terminated = self._position == self.length - 1
        reward = 1.0 if terminated else -0.05
        return self._obs(), reward, terminated, self._steps >= self.max_steps and not terminated, {}


gym.register(id="Corridor-v0", entry_point=Corridor)


class DictCorridor(Corridor):
    """The corridor with a Dict observation."""

    def __init__(self):
        super().__init__()
        self.observation_space = gym.spaces.Dict({"position": self.observation_space})

    def _obs(self):
        return {"position": super()._obs()}


class TextDictCorridor(Corridor):
    """The corridor with a Dict observation holding a Text entry, which tfrl refuses (naming the entry)."""

    def __init__(self):
        super().__init__()
        self.observation_space = gym.spaces.Dict({"position": self.observation_space,
                                                  "name": gym.spaces.Text(8)})

    def _obs(self):
        return {"position": super()._obs(), "name": "corridor"}


gym.register(id="DictCorridor-v0", entry_point=DictCorridor)
gym.register(id="TextDictCorridor-v0", entry_point=TextDictCorridor)


class UnboundedCorridor(Corridor):
    """The corridor with a Box action of infinite bounds (> 0 moves right), which tfrl refuses: it clips
    actions to the bounds."""

    def __init__(self):
        super().__init__()
        self.action_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)

    def step(self, action):
        return super().step(1 if float(np.asarray(action).ravel()[0]) > 0 else 0)


class MultiDiscreteCorridor(Corridor):
    def __init__(self):
        super().__init__()
        self.action_space = gym.spaces.MultiDiscrete([2, 2])


gym.register(id="UnboundedCorridor-v0", entry_point=UnboundedCorridor)
gym.register(id="MultiDiscreteCorridor-v0", entry_point=MultiDiscreteCorridor)


class ContinuousCorridor(Corridor):
    """The corridor with a Box action in [low, high] (> 0 moves right): for SAC."""

    def __init__(self, low: float = -1.0, high: float = 1.0):
        super().__init__()
        self.action_space = gym.spaces.Box(low, high, (1,), np.float32)

    def step(self, action):
        return super().step(1 if float(np.asarray(action).ravel()[0]) > 0 else 0)


NAN_AT_STEP_VARIABLE = "CUSTOM_ENVS_NAN_AT_STEP"


class NaNCorridor(ContinuousCorridor):
    """The continuous corridor whose observation is NaN at its n-th step (counted over all its episodes), where
    n is the environment variable CUSTOM_ENVS_NAN_AT_STEP when it is made; never NaN without it. An env that
    goes bad at one moment; a run resumed without the variable sees a clean env."""

    def __init__(self):
        super().__init__()
        self._nan_at = int(os.environ.get(NAN_AT_STEP_VARIABLE, "0"))
        self._total_steps = 0

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self._total_steps += 1
        if self._total_steps == self._nan_at:
            obs = np.full_like(obs, np.nan)
        return obs, reward, terminated, truncated, info


class HugeBoundsCorridor(ContinuousCorridor):
    """Finite Box bounds whose span (high - low) overflows float32, which tfrl refuses: it rescales actions."""

    def __init__(self):
        super().__init__(low=-3e38, high=3e38)


gym.register(id="NaNCorridor-v0", entry_point=NaNCorridor)
gym.register(id="HugeBoundsCorridor-v0", entry_point=HugeBoundsCorridor)

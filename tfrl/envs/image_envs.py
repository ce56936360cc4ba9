"""Small image environments that ship with tfrl: a pixel task that trains on a CPU in minutes.

    tfrl/Catch-v0   bsuite's Catch (Osband et al. 2020): a ball falls from a random column of the top row of a
                    10x5 board, one row per step; the agent moves a paddle on the bottom row (0 left, 1 stay,
                    2 right). When the ball reaches the bottom (9 steps), the reward is +1 if the paddle is under
                    it and -1 otherwise, and the episode ends. Observations: [10, 5, 1] uint8, 255 on the ball
                    and the paddle, 0 elsewhere. A uniformly random policy scores about -0.6; the best, 1.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class Catch(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 8}

    def __init__(self, rows: int = 10, columns: int = 5, render_mode: str | None = None):
        if rows < 2 or columns < 1:
            raise ValueError(f"Catch needs rows >= 2 and columns >= 1, got {rows}x{columns}")
        self.rows, self.columns, self.render_mode = rows, columns, render_mode
        self.observation_space = gym.spaces.Box(0, 255, (rows, columns, 1), np.uint8)
        self.action_space = gym.spaces.Discrete(3)
        self._ball = np.zeros(2, np.int64)  # (row, column)
        self._paddle = 0

    def _obs(self) -> np.ndarray:
        board = np.zeros((self.rows, self.columns, 1), np.uint8)
        board[self._ball[0], self._ball[1], 0] = 255
        board[self.rows - 1, self._paddle, 0] = 255
        return board

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._ball[:] = 0, self.np_random.integers(self.columns)
        self._paddle = self.columns // 2
        return self._obs(), {}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"Catch takes actions 0, 1, 2; got {action!r}")
        self._paddle = int(np.clip(self._paddle + int(action) - 1, 0, self.columns - 1))
        self._ball[0] += 1
        terminated = bool(self._ball[0] == self.rows - 1)
        reward = (1.0 if self._ball[1] == self._paddle else -1.0) if terminated else 0.0
        return self._obs(), reward, terminated, False, {}

    def render(self):
        # 16x16 pixels per cell, gray on black: large enough to watch.
        return np.repeat(np.repeat(np.repeat(self._obs(), 16, 0), 16, 1), 3, 2)


def register() -> None:
    if "tfrl/Catch-v0" not in gym.registry:
        gym.register("tfrl/Catch-v0", entry_point=Catch)

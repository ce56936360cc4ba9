"""A slow env for the rollout-actor benchmarks: LunarLander-v3 that sleeps `delay_s` in every step, standing for
an expensive simulator (the sleep holds no CPU, as a simulator on another core or machine would not hold the
learner's). Made by tfrl.train from a factory, in the actors too (benchmarks/ on their PYTHONPATH)."""

from __future__ import annotations

import time

import gymnasium as gym


class _Sleeps(gym.Wrapper):
    def __init__(self, env: gym.Env, delay_s: float):
        super().__init__(env)
        self._delay_s = delay_s

    def step(self, action):
        time.sleep(self._delay_s)
        return self.env.step(action)


def slow_lunarlander(delay_s: float = 0.002) -> gym.Env:
    return _Sleeps(gym.make("LunarLander-v3"), delay_s)

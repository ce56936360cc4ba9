"""Envs the rollout-actor tests make in Ray actors (tests/ is on the actors' PYTHONPATH): CartPole that kills
its own process once, or raises at every step past a given one. Neither does anything in the test's process."""

from __future__ import annotations

import os
import signal
import time

import gymnasium as gym


class _Faulty(gym.Wrapper):
    def __init__(self, env: gym.Env, at_step: int, fault, driver_pid: int, step_seconds: float = 0.0):
        super().__init__(env)
        self._steps, self._at_step, self._fault, self._driver_pid = 0, at_step, fault, driver_pid
        self._step_seconds = step_seconds

    def step(self, action):
        self._steps += 1
        if self._steps >= self._at_step and os.getpid() != self._driver_pid:
            self._fault()
        if self._step_seconds:
            time.sleep(self._step_seconds)
        return self.env.step(action)


def dies_once(marker: str, driver_pid: int, at_step: int = 30, step_seconds: float = 0.0) -> gym.Env:
    """CartPole whose process is SIGKILLed at the at_step-th step of an env, once: the first env there creates
    `marker` and kills its process; later ones (the marker exists) step on, each step taking step_seconds
    longer."""
    def die():
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return
        os.kill(os.getpid(), signal.SIGKILL)

    return _Faulty(gym.make("CartPole-v1"), at_step, die, driver_pid, step_seconds)


def always_raises(driver_pid: int, at_step: int = 10) -> gym.Env:
    """CartPole that raises from its at_step-th step on."""
    def crash():
        raise RuntimeError("the simulator crashed")

    return _Faulty(gym.make("CartPole-v1"), at_step, crash, driver_pid)

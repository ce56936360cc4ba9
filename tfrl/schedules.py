"""Hyperparameter schedules over training: the on-policy agents' learning rate and PPO's clip range."""

from __future__ import annotations

SCHEDULES = ("constant", "linear")


def scheduled(value: float, schedule: str, env_step: int, total_env_steps: int) -> float:
    """`value` under `schedule` at `env_step`; the on-policy loop passes the env step where a rollout starts.

    "linear" falls from value to 0 over total_env_steps, like SB3's linear
    schedules (which read the progress after the rollout rather than before it:
    a difference of one rollout, 40 env steps with SB3's A2C settings).
    """
    if schedule == "constant":
        return value
    return value * max(1.0 - env_step / total_env_steps, 0.0)

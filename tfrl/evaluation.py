"""Greedy evaluation of a policy on its own environments, separate from training's."""

from __future__ import annotations

from typing import Callable

import numpy as np

from tfrl import envs

Policy = Callable[[np.ndarray], np.ndarray]  # obs [N, *obs_shape] -> actions [N]


def evaluate(policy: Policy, env_id: str, num_episodes: int, seed: int, num_envs: int = 8) -> np.ndarray:
    """Returns of `num_episodes` episodes of `policy`, run on up to `num_envs` envs in parallel.

    Each sub-env runs a fixed quota of episodes, so short episodes are not
    over-represented (taking the first N episodes to finish would favour them).
    """
    num_envs = max(1, min(num_envs, num_episodes))
    quota = np.full(num_envs, num_episodes // num_envs)
    quota[: num_episodes % num_envs] += 1
    env = envs.make_vector_env(env_id, num_envs, seed=seed)
    try:
        obs = env.first_obs
        returns: list[float] = []
        done_counts = np.zeros(num_envs, dtype=np.int64)
        while (done_counts < quota).any():
            obs, _, terminated, truncated, infos = env.step(policy(np.asarray(obs, dtype=np.float32)))
            done = terminated | truncated
            if done.any():
                episode = infos["final_info"]["episode"]
                for i in np.flatnonzero(done):
                    if done_counts[i] < quota[i]:
                        returns.append(float(episode["r"][i]))
                    done_counts[i] += 1
        return np.asarray(returns)
    finally:
        env.close()

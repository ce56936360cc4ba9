"""Greedy evaluation of a policy on its own environments, separate from training's."""

from __future__ import annotations

import os
from typing import Callable, Iterator

import numpy as np

from tfrl import envs
from tfrl.envs.observations import observation_spec, to_batch, to_row
from tfrl.models.policy_inputs import action_row
from tfrl.models.policy_memory import reset_episodes

Policy = Callable[[np.ndarray], np.ndarray]  # obs [N, *obs_shape] -> actions [N]

# Evaluation envs are seeded run seed + offset: the periodic evaluations (which keep_best_policy selects on)
# and the final one play disjoint sets of episodes, and neither shares a seed with the training envs.
PERIODIC_SEED_OFFSET = 10_000
FINAL_SEED_OFFSET = 20_000


class Stopped(Exception):
    """A stop was requested (SIGTERM, Ctrl-C) while an evaluation ran: it ended before its last episode."""


def _never() -> bool:
    return False


def evaluate(policy: Policy, env: envs.EnvSpec | str, num_episodes: int, seed: int, num_envs: int = 8,
             stop_requested: Callable[[], bool] = _never) -> np.ndarray:
    """Returns of `num_episodes` episodes of `policy` on `env` (an EnvSpec, or an id), run on up to `num_envs` envs
    in parallel."""
    return evaluate_episodes(policy, env, num_episodes, seed, num_envs, stop_requested)[0]


def evaluate_episodes(policy: Policy, env: envs.EnvSpec | str, num_episodes: int, seed: int,
                      num_envs: int = 8, stop_requested: Callable[[], bool] = _never) -> tuple[np.ndarray, np.ndarray]:
    """(returns, lengths) of `num_episodes` episodes of `policy`, run on up to `num_envs` envs in parallel;
    Stopped as soon as stop_requested() turns true (polled every vector step).

    Each sub-env runs a fixed quota of episodes, so short episodes are not
    over-represented (taking the first N episodes to finish would favour them).
    Sub-env i is reset with seed + i. A policy with memory (tfrl.models.policy_memory) starts afresh and forgets each
    sub-env's episode where it ends.
    """
    num_envs = max(1, min(num_envs, num_episodes))
    quota = np.full(num_envs, num_episodes // num_envs)
    quota[: num_episodes % num_envs] += 1
    vector_env = envs.make_vector_env(env, num_envs, seed=seed)
    reset_episodes(policy)
    try:
        obs = vector_env.first_obs
        returns: list[float] = []
        lengths: list[int] = []
        done_counts = np.zeros(num_envs, dtype=np.int64)
        while (done_counts < quota).any():
            if stop_requested():
                raise Stopped(f"stopped after {len(returns)} of {num_episodes} evaluation episodes")
            obs, _, terminated, truncated, infos = vector_env.step(policy(to_batch(vector_env.obs_spec, obs)))
            done = terminated | truncated
            if done.any():
                reset_episodes(policy, done)
                episode = infos["final_info"]["episode"]
                for i in np.flatnonzero(done):
                    if done_counts[i] < quota[i]:
                        returns.append(float(episode["r"][i]))
                        lengths.append(int(episode["l"][i]))
                    done_counts[i] += 1
        return np.asarray(returns), np.asarray(lengths)
    finally:
        vector_env.close()


def _one_action(action):
    """One env's action as its step takes it: a Discrete action as an int, each part's of a hybrid one."""
    if isinstance(action, dict):
        return {key: _one_action(value) for key, value in action.items()}
    if isinstance(action, tuple):
        return tuple(_one_action(value) for value in action)
    return int(action) if np.ndim(action) == 0 else action


def render_episode(policy: Policy, env: envs.EnvSpec | str, seed: int,
                   stats: dict | None = None) -> Iterator[np.ndarray]:
    """Yields the RGB frames [H, W, 3] uint8 of one greedy episode on an env reset with `seed`.

    That is the first episode of sub-env 0 in `evaluate_episodes(..., seed)` for a
    deterministic policy and env. Frames are yielded one at a time, so a writer can
    stream them (an episode of 1000 frames of 400x600 pixels is 720 MB). When the
    episode ends, `stats` (if given) gets "return" and "length"; it gets the env's
    "fps" (metadata render_fps) before the first frame.
    """
    # Frames are drawn off-screen: without these, SDL (pygame) probes for a display and an audio device and,
    # on a headless machine, prints "XDG_RUNTIME_DIR is invalid or not set". A value set by the user wins.
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    env = envs.as_spec(env).make(render_mode="rgb_array")
    reset_episodes(policy)
    try:
        if stats is not None:
            stats["fps"] = int(env.metadata.get("render_fps") or 30)
        obs, _ = env.reset(seed=seed)
        spec = observation_spec(env.observation_space)
        yield env.render()
        episode_return, length, done = 0.0, 0, False
        while not done:
            action = action_row(policy(to_row(spec, obs)[None]), 0)  # a hybrid action: each part's row
            obs, reward, terminated, truncated, _ = env.step(_one_action(action))
            episode_return += float(reward)
            length += 1
            done = terminated or truncated
            yield env.render()
        if stats is not None:
            stats.update({"return": episode_return, "length": length})
    finally:
        env.close()

"""EnvPool's C++ vector envs (`--vector_mode=envpool`, `pip install -e ".[envpool]"`) behind what tfrl uses of a
gymnasium vector env, with gymnasium's semantics:

    autoreset   SAME_STEP: where an episode ends, `step` returns the next episode's first observation and puts the
                last one in infos["final_obs"] (EnvPool itself would spend the env's next step on the reset)
    statistics  infos["final_info"]["episode"] = {"r", "l"} with the mask "_episode", as RecordEpisodeStatistics
    seeding     env i is seeded seed + i (EnvPool's own scheme, the same as tfrl's gymnasium vector envs);
                `reset(seed=...)` builds the pool anew with that seed

EnvPool implements its envs again in C++ (LunarLander on Box2D, like gymnasium's, CartPole, Pendulum, Acrobot...);
their dynamics are not bitwise gymnasium's. Only training uses it: evaluations, the best policy, videos and the
export run on gymnasium's env, so a policy is always scored on the reference implementation. Plain ids only: no
env kwargs, factories, Atari ids (whose preprocessing EnvPool does its own way), or observations other than a
float Box (which tfrl adapts with gymnasium's wrappers).
"""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np

from tfrl.errors import UsageError

INSTALL = "pip install 'tfrl[envpool]'"


def _envpool():
    try:
        import envpool  # noqa: PLC0415 - an optional extra
    except ImportError:
        raise UsageError(f"--vector_mode=envpool needs the envpool package, which is not installed: {INSTALL}") \
            from None
    return envpool


def check(env_id: str | None, kwargs, atari: bool) -> None:
    """UsageError unless EnvPool is installed and implements `env_id` as tfrl would train on it."""
    if env_id is None:
        raise UsageError("--vector_mode=envpool takes a gymnasium id, not an env factory: EnvPool implements its own "
                         "envs; use --vector_mode=sync")
    if atari:
        raise UsageError(f"--vector_mode=envpool: {env_id} is an Atari id, whose preprocessing tfrl does with "
                         "gymnasium's wrappers; use --vector_mode=sync or async")
    if kwargs:
        raise UsageError(f"--vector_mode=envpool takes no env kwargs (got {', '.join(kwargs)}): EnvPool names its "
                         "options its own way; use --vector_mode=sync")
    envpool = _envpool()
    if env_id not in envpool.list_all_envs():
        raise UsageError(f"--vector_mode=envpool: EnvPool has no {env_id}; use --vector_mode=sync or async")
    probe = envpool.make_gymnasium(env_id, num_envs=1)
    space = probe.observation_space
    probe.close()
    if not (isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating)):
        raise UsageError(f"--vector_mode=envpool: EnvPool's {env_id} has {space} observations, which tfrl adapts "
                         "with gymnasium's wrappers; use --vector_mode=sync or async")


class EnvPoolVectorEnv:
    """`num_envs` copies of `env_id` in one EnvPool, seeded seed..seed+n-1 at the first reset."""

    def __init__(self, env_id: str, num_envs: int):
        self._env_id, self.num_envs = env_id, num_envs
        self._pool = self._make(seed=0)
        self.single_observation_space = self._pool.observation_space
        self.single_action_space = self._pool.action_space
        self._action_dtype = (np.int32 if isinstance(self.single_action_space, gym.spaces.Discrete)
                              else np.float32)
        self._returns = np.zeros(num_envs, np.float64)
        self._lengths = np.zeros(num_envs, np.int64)

    def _make(self, seed: int):
        # EnvPool's default is a thread per env; more threads than cores only add switching (measured in
        # docs/benchmarks.md, "EnvPool against gymnasium").
        threads = min(self.num_envs, len(os.sched_getaffinity(0)))
        return _envpool().make_gymnasium(self._env_id, num_envs=self.num_envs, seed=int(seed), num_threads=threads)

    def reset(self, seed: int | None = None):
        if seed is not None:
            self._pool.close()
            self._pool = self._make(seed)
        obs, _ = self._pool.reset()
        self._returns[:], self._lengths[:] = 0.0, 0
        return obs, {}

    def step(self, actions):
        obs, reward, terminated, truncated, _ = self._pool.step(np.asarray(actions, self._action_dtype))
        self._returns += reward
        self._lengths += 1
        done = terminated | truncated
        infos = {}
        if done.any():
            ended = np.flatnonzero(done)
            infos["final_obs"] = obs.copy()
            infos["final_info"] = {"episode": {"r": self._returns.copy(), "l": self._lengths.copy()},
                                   "_episode": done.copy()}
            obs = obs.copy()
            obs[ended] = self._pool.reset(ended.astype(np.int32))[0]
            self._returns[ended], self._lengths[ended] = 0.0, 0
        return obs, reward, terminated, truncated, infos

    def close(self) -> None:
        self._pool.close()

"""Gymnasium environments: id resolution, vector envs, and the autoreset bookkeeping.

Vector envs run in gymnasium's SAME_STEP autoreset mode: when a sub-env's
episode ends, `step` already returns the first observation of the next episode
and puts the true last observation in `infos["final_obs"]`. So no env step is
wasted on a reset (as in NEXT_STEP mode), and a transition's next observation
must be taken from `final_obs` for the envs that just finished (`next_obs_for_storage`).
"""

from __future__ import annotations

import dataclasses
import difflib
import threading
from typing import Callable

import gymnasium as gym
import numpy as np
from absl import logging
from gymnasium.vector import AutoresetMode

from tfrl.errors import UsageError


class EnvIdError(UsageError):
    """Unknown or unsupported environment id."""


# Ids that gymnasium 1.x deprecated, mapped to the version with the same dynamics we train on.
_ALIASES = {
    "LunarLander-v2": "LunarLander-v3",
    "LunarLanderContinuous-v2": "LunarLanderContinuous-v3",
}
_warned_aliases: set[str] = set()
_warn_lock = threading.Lock()

VECTOR_MODES = ("sync", "async")


def resolve_env_id(env_id: str) -> str:
    """Map deprecated ids to their gymnasium 1.x successor (warning once), and reject unknown ids."""
    target = _ALIASES.get(env_id, env_id)
    if target != env_id:
        with _warn_lock:
            if env_id not in _warned_aliases:
                _warned_aliases.add(env_id)
                logging.warning("%s is deprecated in gymnasium %s; using %s", env_id, gym.__version__, target)
    if target not in gym.registry:
        close = difflib.get_close_matches(env_id, list(gym.registry), n=5, cutoff=0.5)
        hint = f"; close matches: {', '.join(close)}" if close else ""
        raise EnvIdError(f"unknown environment id {env_id!r}{hint}")
    return target


@dataclasses.dataclass(frozen=True)
class EnvInfo:
    env_id: str
    obs_shape: tuple[int, ...]
    num_actions: int  # discrete action count

    def to_dict(self):
        return {"env_id": self.env_id, "obs_shape": list(self.obs_shape), "num_actions": self.num_actions}


def make_vector_env(env_id: str, num_envs: int, seed: int, vector_mode: str = "sync") -> gym.vector.VectorEnv:
    """`num_envs` copies of `env_id` in SAME_STEP autoreset mode, each with episode statistics, seeded seed..seed+n-1.

    Returns the env already reset, with its first observations in `env.first_obs`.
    """
    env_id = resolve_env_id(env_id)
    if vector_mode not in VECTOR_MODES:
        raise UsageError(f"--vector_mode: unknown mode {vector_mode!r}; choose one of {', '.join(VECTOR_MODES)}")
    if num_envs < 1:
        raise UsageError(f"num_envs must be >= 1, got {num_envs}")
    env = gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode=vector_mode,
        # copy=False: the loop copies what it keeps; saves a deepcopy per step.
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP, "copy": False},
        wrappers=[gym.wrappers.RecordEpisodeStatistics],
        disable_env_checker=True,  # the checker's per-step asserts cost ~20 µs; gymnasium's own envs pass it
    )
    if not isinstance(env.single_action_space, gym.spaces.Discrete):
        env.close()
        raise EnvIdError(f"{env_id} has action space {env.single_action_space}; tfrl agents need Discrete actions")
    obs, _ = env.reset(seed=seed)
    env.first_obs = np.array(obs, dtype=np.float32)
    return env


def reset_for_resume(env: gym.vector.VectorEnv, seed: int, env_step: int) -> np.ndarray:
    """Fresh episodes for a run resumed at `env_step`: the episodes in flight at the checkpoint are lost.

    Seeded from (seed, env_step), so a resume is reproducible and differs from the run's first reset.
    """
    obs, _ = env.reset(seed=int(np.random.SeedSequence([seed, env_step]).generate_state(1)[0]))
    return np.array(obs, dtype=np.float32)


def env_info(env: gym.vector.VectorEnv, env_id: str) -> EnvInfo:
    return EnvInfo(
        env_id=env_id,
        obs_shape=tuple(env.single_observation_space.shape),
        num_actions=int(env.single_action_space.n),
    )


def next_obs_for_storage(next_obs: np.ndarray, done: np.ndarray, infos: dict) -> np.ndarray:
    """The observation each transition ends in: `next_obs`, except the true final obs where an episode ended.

    In SAME_STEP mode `next_obs[i]` of a finished env is already the next episode's reset observation.
    """
    stored = np.array(next_obs, dtype=np.float32)  # a copy: the vector env reuses its buffer (copy=False)
    if done.any():
        final_obs = infos["final_obs"]
        for i in np.flatnonzero(done):
            stored[i] = final_obs[i]
    return stored


def finished_episodes(done: np.ndarray, infos: dict) -> list[tuple[float, int]]:
    """(return, length) of each episode that ended at this vector step, from RecordEpisodeStatistics."""
    if not done.any():
        return []
    episode = infos["final_info"]["episode"]
    return [(float(episode["r"][i]), int(episode["l"][i])) for i in np.flatnonzero(done)]


@dataclasses.dataclass(frozen=True)
class VectorStep:
    """One step of a vector env: what was acted on, and what came back."""

    obs: np.ndarray  # s_t [N, *obs_shape] float32, the observations the actions were chosen on
    action: np.ndarray  # a_t [N]
    reward: np.ndarray  # r_t [N]
    terminated: np.ndarray  # [N] bool: the episode reached a terminal state
    truncated: np.ndarray  # [N] bool: the episode was cut (time limit)
    next_obs: np.ndarray  # the env's output: already the next episode's first obs where one ended (SAME_STEP)
    infos: dict

    @property
    def done(self) -> np.ndarray:
        return self.terminated | self.truncated

    def final_obs(self) -> np.ndarray:
        """s_{t+1} [N, ...] float32: next_obs, with the true last obs where an episode ended (next_obs_for_storage)."""
        return next_obs_for_storage(self.next_obs, self.done, self.infos)


class VectorStepper:
    """A vector env and where the run is in it: its current observations and the env step count.

    `on_episode(env_step, return, length)` hears of every episode that ends.
    """

    def __init__(self, env: gym.vector.VectorEnv, on_episode: Callable[[int, float, int], None]):
        self.env = env
        self.num_envs = env.num_envs
        self.obs = env.first_obs  # [N, *obs_shape] float32
        self.env_step = 0  # transitions so far, summed over the envs
        self._on_episode = on_episode

    def step(self, action: np.ndarray) -> VectorStep:
        next_obs, reward, terminated, truncated, infos = self.env.step(action)
        self.env_step += self.num_envs
        step = VectorStep(self.obs, action, reward, terminated, truncated, next_obs, infos)
        for episode_return, length in finished_episodes(step.done, infos):
            self._on_episode(self.env_step, episode_return, length)
        self.obs = np.array(next_obs, dtype=np.float32)  # a copy: the vector env reuses its buffer
        return step

    def resume_at(self, seed: int, env_step: int) -> None:
        """Continue a restored run at `env_step` on fresh episodes (reset_for_resume)."""
        self.env_step = env_step
        self.obs = reset_for_resume(self.env, seed, env_step)

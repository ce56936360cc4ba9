"""Stepping a vector env in SAME_STEP autoreset mode, and the bookkeeping of what comes back.

When a sub-env's episode ends, `step` already returns the first observation of the next episode and puts the
true last observation in `infos["final_obs"]`. So no env step is wasted on a reset (as in NEXT_STEP mode), and a
transition's next observation is taken from `final_obs` for the envs that just finished (`next_obs_for_storage`).
Observations are in tfrl's form (tfrl.envs.observations: one array, or a structured array for Dict observations).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import gymnasium as gym
import numpy as np

from tfrl.envs.observations import ObsSpec, check_some_action_is_legal, to_batch, to_row
from tfrl.errors import RunError


class EnvStepError(RunError):
    """The env raised an error in a step (a wrong observation, a bug in the env), or left no legal action: training
    stops, exit code 1."""

    def __init__(self, reason: str, env_step: int, last_checkpoint: tuple[int, int] | None = None):
        self.reason, self.env_step, self.last_checkpoint = reason, env_step, last_checkpoint
        kept = ("no checkpoint had been written" if last_checkpoint is None
                else f"checkpoint {last_checkpoint[1]} (env step {last_checkpoint[0]}) is the newest")
        super().__init__(f"the env failed at env step {env_step} ({reason}); training stopped: {kept}")

    def __reduce__(self):  # pickled with its arguments (a rollout actor's error reaches the driver)
        return EnvStepError, (self.reason, self.env_step, self.last_checkpoint)

    def at(self, last_checkpoint: tuple[int, int] | None) -> EnvStepError:
        """The same error, naming the newest checkpoint."""
        return EnvStepError(self.reason, self.env_step, last_checkpoint)


def next_obs_for_storage(next_obs: np.ndarray, done: np.ndarray, infos: dict, spec: ObsSpec | None = None) -> np.ndarray:
    """The observation each transition ends in: `next_obs`, except the true final obs where an episode ended.

    In SAME_STEP mode `next_obs[i]` of a finished env is already the next episode's reset observation.
    spec: the observations' (None: one array, as it comes).
    """
    stored = np.array(next_obs)  # a copy: the vector env reuses its buffer (copy=False)
    if done.any():
        final_obs = infos["final_obs"]
        for i in np.flatnonzero(done):
            stored[i] = final_obs[i] if spec is None else to_row(spec, final_obs[i])
    return stored


def finished_episodes(done: np.ndarray, infos: dict) -> list[tuple[float, int]]:
    """(return, length) of each episode that ended at this vector step, from RecordEpisodeStatistics.

    An env can be done without an episode to report: Atari training ends an "episode" at each lost life, while
    the game's score and length are recorded when the game ends."""
    if not done.any():
        return []
    final_info = infos["final_info"]
    if "episode" not in final_info:
        return []
    episode, recorded = final_info["episode"], final_info.get("_episode", done)
    return [(float(episode["r"][i]), int(episode["l"][i])) for i in np.flatnonzero(done & recorded)]


def resume_seed(*entropy: int) -> int:
    """The reset seed of a resumed run's envs, from (seed, env_step, ...): reproducible, and unlike the first's."""
    return int(np.random.SeedSequence(list(entropy)).generate_state(1)[0])


def reset_for_resume(env: gym.vector.VectorEnv, seed: int, env_step: int, first_env: int = 0) -> np.ndarray:
    """Fresh episodes for a run resumed at `env_step`: the episodes in flight at the checkpoint are lost.

    Seeded from (seed, env_step), so a resume is reproducible and differs from the run's first reset; env i of
    the vector env gets resume_seed + first_env + i (first_env: where a rollout actor's share starts).
    """
    obs, _ = env.reset(seed=resume_seed(seed, env_step) + first_env)
    return to_batch(env.obs_spec, obs)


@dataclasses.dataclass(frozen=True)
class VectorStep:
    """One step of a vector env: what was acted on, and what came back."""

    obs: np.ndarray  # s_t [N, ...] in tfrl's form, the observations the actions were chosen on
    action: np.ndarray  # a_t [N] (or [N, dims])
    reward: np.ndarray  # r_t [N]
    terminated: np.ndarray  # [N] bool: the episode reached a terminal state
    truncated: np.ndarray  # [N] bool: the episode was cut (time limit)
    next_obs: np.ndarray  # the env's next observations: already the next episode's first where one ended
    infos: dict
    spec: ObsSpec | None = None

    @property
    def done(self) -> np.ndarray:
        return self.terminated | self.truncated

    def final_obs(self) -> np.ndarray:
        """s_{t+1} [N, ...]: next_obs, with the true last obs where an episode ended (next_obs_for_storage)."""
        return next_obs_for_storage(self.next_obs, self.done, self.infos, self.spec)


class VectorStepper:
    """A vector env (tfrl.envs.make_vector_env's) and where the run is in it: its current observations and the
    env step count. `on_episode(env_step, return, length)` hears of every episode that ends."""

    def __init__(self, env: gym.vector.VectorEnv, on_episode: Callable[[int, float, int], None]):
        self.env = env
        self.num_envs = env.num_envs
        self.obs = env.first_obs  # [N, ...] in tfrl's form
        self.env_step = 0  # transitions so far, summed over the envs
        self._on_episode = on_episode
        self._check_mask(self.obs)

    def step(self, action: np.ndarray) -> VectorStep:
        try:
            next_obs, reward, terminated, truncated, infos = self.env.step(action)
            next_batch = to_batch(self.env.obs_spec, next_obs)  # a copy: the vector env reuses its buffer
        except Exception as e:  # noqa: BLE001 - the env's own code, or gymnasium refusing what it returned
            message = (str(e).splitlines() or [""])[0]
            raise EnvStepError(f"{type(e).__name__}: {message}", self.env_step) from e
        self.env_step += self.num_envs
        self._check_mask(next_batch)
        step = VectorStep(self.obs, action, reward, terminated, truncated, next_batch, infos, self.env.obs_spec)
        for episode_return, length in finished_episodes(step.done, infos):
            self._on_episode(self.env_step, episode_return, length)
        self.obs = next_batch
        return step

    def resume_at(self, seed: int, env_step: int, first_env: int = 0) -> None:
        """Continue a restored run at `env_step` on fresh episodes (reset_for_resume)."""
        self.env_step = env_step
        self.obs = reset_for_resume(self.env, seed, env_step, first_env)
        self._check_mask(self.obs)

    def log_values(self) -> dict[str, float]:
        """What the envs add to a log record: nothing in this process (rollout actors report their rates)."""
        return {}

    def close(self) -> None:
        self.env.close()

    def _check_mask(self, batch: np.ndarray) -> None:
        """EnvStepError where an action mask leaves an env no legal action to take next (the last observation of
        an episode, which nothing acts on, may)."""
        try:
            check_some_action_is_legal(batch, getattr(self.env, "action_nvec", ()))
        except ValueError as e:
            raise EnvStepError(str(e), self.env_step) from None

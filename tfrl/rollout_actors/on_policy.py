"""On-policy rollouts (A2C, PPO) stepped in Ray actors, gathered synchronously.

Each of the actors holds a contiguous share of the num_envs envs (env i keeps seed + i, as in one process) and
runs tfrl.agents.actor_critic.collection.collect_steps on them with the mirror it is sent, the weights the
learner has now. The driver writes each share's [T, n_i] arrays into its own RolloutStorage side by side, so
that RolloutStorage.finish (reward scaler, truncation bootstrap, GAE) sees the same rollout as in one process:
with one actor and the same seed, the rollout is the in-process one, bit for bit.

Not yet here (issue 33): observation normalization in the actors, the training loop's --actors, restarts.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from tfrl.agents.actor_critic.actor import ActorCriticActor
from tfrl.agents.actor_critic.collection import collect_steps
from tfrl.agents.actor_critic.rollout import STEP_FIELDS, RolloutStorage
from tfrl.normalization import NoNormalization


def shares(num_envs: int, num_actors: int) -> list[tuple[int, int]]:
    """(first env, number of envs) of each actor: contiguous, sizes differing by at most one."""
    if not 1 <= num_actors <= num_envs:
        raise ValueError(f"actors must be between 1 and num_envs={num_envs}, got {num_actors}")
    base, extra = divmod(num_envs, num_actors)
    sizes = [base + (i < extra) for i in range(num_actors)]
    return [(sum(sizes[:i]), size) for i, size in enumerate(sizes)]


class RolloutWorker:
    """Lives in a Ray actor: num_envs envs seeded seed.., stepped for one rollout per collect()."""

    def __init__(self, env_spec, num_envs: int, seed: int, vector_mode: str, rollout_length: int, obs_row_shape,
                 obs_dtype: str, head):
        from tfrl import envs  # in the actor's process

        self._episodes: list[tuple[int, float, int]] = []
        env = envs.make_vector_env(env_spec, num_envs, seed=seed, vector_mode=vector_mode, training=True)
        self._stepper = envs.VectorStepper(env, on_episode=lambda *episode: self._episodes.append(episode))
        self._storage = RolloutStorage(rollout_length, num_envs, obs_row_shape, head, obs_dtype)
        self._head, self._seed = head, seed
        self._actor: ActorCriticActor | None = None

    def collect(self, mirror) -> dict[str, Any]:
        """One rollout with `mirror` (a NumpyActorCritic holding the learner's weights): the step arrays,
        "last_value" (V(s_T) [n]) and "episodes" ((env steps into this rollout, return, length) of each that
        ended)."""
        if self._actor is None:
            self._actor = ActorCriticActor(mirror, self._head, seed=self._seed)
        else:
            self._actor.use(mirror)
        start, self._episodes = self._stepper.env_step, []
        last_value = collect_steps(self._stepper, self._actor, NoNormalization(), self._head, self._storage)
        episodes = [(env_step - start, episode_return, length) for env_step, episode_return, length in self._episodes]
        return {**{name: getattr(self._storage, name) for name in STEP_FIELDS}, "last_value": last_value,
                "episodes": episodes}


class RayRollouts:
    """The driver's side: `num_actors` RolloutWorkers in Ray actors (Ray must be initialized), one rollout of
    all num_envs envs per collect()."""

    def __init__(self, env_spec, num_envs: int, num_actors: int, seed: int, vector_mode: str, rollout_length: int,
                 obs_row_shape, obs_dtype: str, head):
        import ray

        remote = ray.remote(num_cpus=1)(RolloutWorker)
        self._shares = shares(num_envs, num_actors)
        self._workers = [remote.remote(env_spec, size, seed + first, vector_mode, rollout_length, obs_row_shape,
                                       obs_dtype, head) for first, size in self._shares]
        self.num_envs = num_envs
        self.env_step = 0

    def collect(self, mirror, storage: RolloutStorage, on_episode: Callable[[int, float, int], None]) -> np.ndarray:
        """Fills storage with one rollout of every actor, made with `mirror`; returns V(s_T) [num_envs]. Episodes
        are reported to on_episode with the run's env step (all of them once the rollout is gathered)."""
        import ray

        mirror_ref = ray.put(mirror)
        results = ray.get([worker.collect.remote(mirror_ref) for worker in self._workers])
        for (first, size), result in zip(self._shares, results):
            storage.write_share(slice(first, first + size), result)
        start = self.env_step
        self.env_step += storage.rollout_length * self.num_envs
        for (first, size), result in zip(self._shares, results):
            for steps_in, episode_return, length in result["episodes"]:
                # steps_in counts this actor's n envs; the run's clock counts all num_envs per vector step
                on_episode(start + steps_in // size * self.num_envs, episode_return, length)
        return np.concatenate([result["last_value"] for result in results])

    def close(self) -> None:
        import ray

        for worker in self._workers:
            ray.kill(worker)

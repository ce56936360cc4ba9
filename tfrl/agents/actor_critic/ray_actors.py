"""On-policy rollouts (A2C, PPO) stepped in Ray actors, gathered synchronously: the learner's --actors=N.

Each of the N actors holds a contiguous share of the num_envs envs (env i keeps seed + i, as in one process) and
runs tfrl.agents.actor_critic.collection.collect_steps on them with what it is sent for each rollout: the
learner's NumPy mirror (the weights it has now) and a snapshot of its observation statistics, which the actor
goes on counting in as one process would. The driver writes each share's [T, n_i] arrays into its own
RolloutStorage side by side, takes the observations each actor counted into its statistics (Chan's merge, in
actor order), and reports the episodes on the run's env-step clock. RolloutStorage.finish (reward scaler,
truncation bootstrap, GAE) then sees the rollout one process would have made: with one actor, the same seed and
no observation normalization, the in-process rollout bit for bit.

--actor_mode=async (IMPALA's actors): every actor always has a rollout in flight. An update takes the first
`actors` share rollouts that arrive, whichever actors made them (a fast actor may give two), in arrival order, and
each actor that delivered is sent the next rollout at once with the newest weights, so the actors step while the
learner trains. The weights a rollout acted with are up to a few updates old (its policy lag, logged): the
learner's policy pi evaluates every step again (its values and log pi(a|s), NumPy) and the targets are V-trace's
(tfrl.agents.actor_critic.advantages; RolloutStorage.set_target). --weight_sync_period=K sends new weights only
every K updates.

Faults and resume: tfrl.rollout_actors.pool (a failed actor's rollout is dropped and collected again by a fresh
actor with the same weights). A resumed run's actors start fresh episodes, seeded from (seed, env step) as one
process's envs are, and fresh RNGs.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from tfrl.agents.actor_critic.actor import ActorCriticActor, RecurrentActor, policy_at
from tfrl.agents.actor_critic.collection import collect_steps
from tfrl.agents.actor_critic.rollout import RolloutStorage
from tfrl.envs.stepping import resume_seed
from tfrl.rollout_actors import ActorSettings
from tfrl.rollout_actors.pool import ActorPool, ShareWorker


@dataclasses.dataclass(frozen=True)
class ShareSetup:
    """What every rollout worker is built from (sent to the actors once)."""

    env_spec: Any  # tfrl.envs.EnvSpec or a gymnasium id
    vector_mode: str
    rollout_length: int
    obs_row_shape: tuple
    obs_dtype: str
    head: Any  # the policy head (tfrl.agents.actor_critic.networks)
    state_size: int = 0  # with memory, the actor's state per env


class RolloutWorker(ShareWorker):
    """Lives in a Ray actor: its share of the envs, stepped for one rollout per collect()."""

    def __init__(self, setup: ShareSetup, first: int, size: int, seed: int):
        super().__init__(setup.env_spec, setup.vector_mode, first, size, seed)
        self._setup = setup
        self._storage = RolloutStorage(setup.rollout_length, size, setup.obs_row_shape, setup.head,
                                       setup.obs_dtype, setup.state_size)
        self._actor_seed = seed + first  # the in-process actor's seed for the first share
        self._actor: ActorCriticActor | None = None

    def resume_at(self, seed: int, env_step: int) -> None:
        super().resume_at(seed, env_step)
        self._actor_seed, self._actor = resume_seed(seed, env_step, 1) + self.first, None

    def collect(self, mirror, obs_normalizer) -> dict[str, Any]:
        """One rollout acting with `mirror` (the learner's weights) on observations normalized by
        `obs_normalizer` (a snapshot of the learner's: tfrl.models.normalization.CountingNormalizer or NoNormalization):
        the step arrays, "last_value" (V(s_T) [size]), "counted" (the observation statistics it took in) and
        ShareWorker.end_round's."""
        self.begin_round()
        if self._actor is None:
            setup = self._setup
            self._actor = (RecurrentActor(mirror, setup.head, self._actor_seed, self.size, setup.state_size)
                           if setup.state_size else ActorCriticActor(mirror, setup.head, seed=self._actor_seed))
        else:
            self._actor.use(mirror)
        last_value = collect_steps(self.stepper, self._actor, obs_normalizer, self._setup.head, self._storage)
        return {**{name: getattr(self._storage, name) for name in self._storage.step_fields()},
                "last_value": last_value, "last_obs": obs_normalizer(self.stepper.obs),
                "counted": obs_normalizer.counted(), **self.end_round()}


class RayRollouts(ActorPool):
    """The driver's side: RolloutWorkers in Ray actors (Ray must be initialized), one rollout of all num_envs envs
    per collect(). It stands where the loop's VectorStepper stands (env_step, resume_at, log_values, close)."""

    def __init__(self, setup: ShareSetup, num_envs: int, num_actors: int, seed: int,
                 on_episode: Callable[[int, float, int], None], mode: str = "sync", weight_sync_period: int = 1):
        super().__init__(RolloutWorker, (setup,), num_envs, num_actors, seed, on_episode, weight_sync_period)
        self._mode = mode
        self._updates = 0  # collect() calls so far: each is followed by one update
        self._lags: list[int] = []  # the last rollout's shares' policy lags, in updates
        self._waiting = 0

    @classmethod
    def for_agent(cls, agent, env_spec, settings: ActorSettings, seed: int, vector_mode: str,
                  on_episode: Callable[[int, float, int], None]) -> RayRollouts:
        """For an ActorCriticAgent (its config, head, observations and memory)."""
        config, observations = agent.config, agent.env_info.observations
        setup = ShareSetup(env_spec, vector_mode, config.rollout_length, tuple(observations.row_shape),
                           observations.numpy_dtype, agent.learner.head, agent.state_size)
        return cls(setup, config.num_envs, settings.count, seed, on_episode, settings.mode,
                   settings.weight_sync_period)

    def collect(self, mirror, obs_normalizer, storage: RolloutStorage) -> np.ndarray:
        """Fills storage with one rollout of every actor acting with `mirror` (async: of the first shares to
        arrive, with the learner's policy set as V-trace's target); `obs_normalizer` (the learner's) takes in the
        observations the actors counted, in the order their shares are written. Returns V(s_T) [num_envs] (the
        learner's)."""
        last_value = (self._gather_async if self._mode == "async" else self._gather)(mirror, obs_normalizer, storage)
        self._updates += 1
        return last_value

    def _gather(self, mirror, obs_normalizer, storage: RolloutStorage) -> np.ndarray:
        results = self.call("collect", self.weights_ref(mirror, self._updates)[0], obs_normalizer.snapshot())
        for (first, size), result in zip(self.shares, results):
            storage.write_share(slice(first, first + size), result)
            obs_normalizer.absorb(result["counted"])
        self.finish_round(results, storage.rollout_length)
        return np.concatenate([result["last_value"] for result in results])

    def _gather_async(self, mirror, obs_normalizer, storage: RolloutStorage) -> np.ndarray:
        import ray

        (weights, weights_at), stats = self.weights_ref(mirror, self._updates), ray.put(obs_normalizer.snapshot())
        if not self._in_flight:  # the first rollout, or after a resume
            for i in range(len(self.shares)):
                self.submit(i, "collect", weights, stats, tag=weights_at)
        size, results, order, self._lags = self.shares[0][1], [], [], []
        for slot in range(len(self.shares)):
            i, result, weights_updates = self.next_result()
            self.submit(i, "collect", weights, stats, tag=weights_at)  # the next, while the learner trains
            columns, (first, _) = slice(slot * size, (slot + 1) * size), self.shares[i]
            storage.write_share(columns, result)
            order.append((columns, slice(first, first + size)))
            obs_normalizer.absorb(result["counted"])
            self._lags.append(self._updates - weights_updates)
            results.append(result)
        storage.set_shares(order)
        self._waiting = self.results_waiting()
        self.finish_round(results, storage.rollout_length)
        return self._target(mirror, storage, np.concatenate([result["last_obs"] for result in results]))

    @staticmethod
    def _target(mirror, storage: RolloutStorage, last_obs: np.ndarray) -> np.ndarray:
        """The learner's policy (`mirror`) at every step of the rollout, for V-trace; returns its V(s_T)."""
        t, n = storage.values.shape
        obs = storage.obs.reshape(t * n, *storage.obs.shape[2:])
        policy_params, values = policy_at(mirror, obs)
        storage.set_target(policy_params.reshape(t, n, -1), values.reshape(t, n))
        return mirror.value(last_obs)

    def log_values(self) -> dict[str, float]:
        values = super().log_values()
        if self._mode == "async" and self._lags:
            values.update(policy_lag_mean=float(np.mean(self._lags)), policy_lag_max=max(self._lags),
                          rollouts_waiting=self._waiting)
        return values

"""On-policy rollouts (A2C, PPO) stepped in Ray actors, gathered synchronously: the learner's --actors=N.

Each of the N actors holds a contiguous share of the num_envs envs (env i keeps seed + i, as in one process) and
runs tfrl.agents.actor_critic.collection.collect_steps on them with what it is sent for each rollout: the
learner's NumPy mirror (the weights it has now) and a snapshot of its observation statistics, which the actor
goes on counting in as one process would. The driver writes each share's [T, n_i] arrays into its own
RolloutStorage side by side, takes the observations each actor counted into its statistics (Chan's merge, in
actor order), and reports the episodes on the run's env-step clock. RolloutStorage.finish (reward scaler,
truncation bootstrap, GAE) then sees the rollout one process would have made: with one actor, the same seed and
no observation normalization, the in-process rollout bit for bit.

Faults: an actor whose process dies is restarted by Ray (max_restarts=-1); one whose envs raise is killed and
restarted. Either way its rollout is dropped and collected again with the same weights, on fresh episodes, and
counted (actor_restarts); MAX_ATTEMPTS failures of one actor in a row stop the run with the cause. A resumed
run's actors start fresh episodes, seeded from (seed, env step) as one process's envs are.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable

import numpy as np
from absl import logging

from tfrl.agents.actor_critic.actor import ActorCriticActor, RecurrentActor
from tfrl.agents.actor_critic.collection import collect_steps
from tfrl.agents.actor_critic.rollout import RolloutStorage
from tfrl.stepping import EnvStepError, resume_seed

MAX_ATTEMPTS = 3  # failed collections of one actor's share in a row before the run stops
RESTART_TIMEOUT_S = 300.0  # for a restarted actor to be up (its process imports TensorFlow, maybe on a busy node)


def shares(num_envs: int, num_actors: int) -> list[tuple[int, int]]:
    """(first env, number of envs) of each actor: contiguous, sizes differing by at most one."""
    if not 1 <= num_actors <= num_envs:
        raise ValueError(f"actors must be between 1 and num_envs={num_envs}, got {num_actors}")
    base, extra = divmod(num_envs, num_actors)
    sizes = [base + (i < extra) for i in range(num_actors)]
    return [(sum(sizes[:i]), size) for i, size in enumerate(sizes)]


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


class RolloutWorker:
    """Lives in a Ray actor: the envs first..first+size-1 of the run, stepped for one rollout per collect()."""

    def __init__(self, setup: ShareSetup, first: int, size: int, seed: int):
        from tfrl import envs  # in the actor's process

        self._setup, self._first, self._size = setup, first, size
        self._episodes: list[tuple[int, float, int]] = []
        env = envs.make_vector_env(setup.env_spec, size, seed=seed + first, vector_mode=setup.vector_mode,
                                   training=True)
        self._stepper = envs.VectorStepper(env, on_episode=lambda *episode: self._episodes.append(episode))
        self._storage = RolloutStorage(setup.rollout_length, size, setup.obs_row_shape, setup.head,
                                       setup.obs_dtype, setup.state_size)
        self._actor_seed = seed + first  # the in-process actor's seed for the first share
        self._actor: ActorCriticActor | None = None

    def pid(self) -> int:
        return os.getpid()

    def resume_at(self, seed: int, env_step: int) -> None:
        """Fresh episodes (the in-process envs' resume seeds for these envs) and a fresh actor."""
        self._stepper.resume_at(seed, env_step, self._first)
        self._actor_seed, self._actor = resume_seed(seed, env_step, 1) + self._first, None

    def collect(self, mirror, obs_normalizer) -> dict[str, Any]:
        """One rollout acting with `mirror` (the learner's weights) on observations normalized by
        `obs_normalizer` (a snapshot of the learner's: tfrl.normalization.CountingNormalizer or NoNormalization):
        the step arrays, "last_value" (V(s_T) [size]), "episodes" ((env steps into this rollout, return, length)
        of each that ended), "counted" (the observation statistics it took in) and "seconds" (stepping time)."""
        start_time = time.perf_counter()
        if self._actor is None:
            setup = self._setup
            self._actor = (RecurrentActor(mirror, setup.head, self._actor_seed, self._size, setup.state_size)
                           if setup.state_size else ActorCriticActor(mirror, setup.head, seed=self._actor_seed))
        else:
            self._actor.use(mirror)
        start, self._episodes = self._stepper.env_step, []
        last_value = collect_steps(self._stepper, self._actor, obs_normalizer, self._setup.head, self._storage)
        episodes = [(env_step - start, episode_return, length) for env_step, episode_return, length in self._episodes]
        return {**{name: getattr(self._storage, name) for name in self._storage.step_fields()},
                "last_value": last_value, "episodes": episodes, "counted": obs_normalizer.counted(),
                "seconds": time.perf_counter() - start_time}


class RayRollouts:
    """The driver's side: num_actors RolloutWorkers in Ray actors (Ray must be initialized), one rollout of all
    num_envs envs per collect(). It stands where the loop's VectorStepper stands (env_step, resume_at,
    log_values); on_episode(env_step, return, length) hears of every episode that ends."""

    def __init__(self, setup: ShareSetup, num_envs: int, num_actors: int, seed: int,
                 on_episode: Callable[[int, float, int], None]):
        import ray

        self._remote = ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=0)(RolloutWorker)
        self._seed, self._on_episode = seed, on_episode
        self._shares = shares(num_envs, num_actors)
        self._workers = [self._remote.remote(setup, first, size, seed) for first, size in self._shares]
        self.num_envs, self.env_step = num_envs, 0
        self.restarts = 0
        self._rates: list[float] = []  # each actor's env steps per second of stepping, in the last rollout
        self._overhead_s = 0.0  # the last gather's wall time beyond its slowest actor's stepping

    @classmethod
    def for_agent(cls, agent, env_spec, num_actors: int, seed: int, vector_mode: str,
                  on_episode: Callable[[int, float, int], None]) -> RayRollouts:
        """For an ActorCriticAgent (its config, head, observations and memory)."""
        config, observations = agent.config, agent.env_info.observations
        setup = ShareSetup(env_spec, vector_mode, config.rollout_length, tuple(observations.row_shape),
                           observations.numpy_dtype, agent.learner.head, agent.state_size)
        return cls(setup, config.num_envs, num_actors, seed, on_episode)

    def collect(self, mirror, obs_normalizer, storage: RolloutStorage) -> np.ndarray:
        """Fills storage with one rollout of every actor acting with `mirror`; `obs_normalizer` (the learner's)
        takes in the observations the actors counted. Returns V(s_T) [num_envs]."""
        import ray

        start = time.perf_counter()
        sent = (ray.put(mirror), ray.put(obs_normalizer.snapshot()))
        calls = [worker.collect.remote(*sent) for worker in self._workers]
        results = [self._result(i, call, sent) for i, call in enumerate(calls)]
        for (first, size), result in zip(self._shares, results):
            storage.write_share(slice(first, first + size), result)
            obs_normalizer.absorb(result["counted"])
        rollout_start = self.env_step
        self.env_step += storage.rollout_length * self.num_envs
        for (first, size), result in zip(self._shares, results):
            for steps_in, episode_return, length in result["episodes"]:
                # steps_in counts this actor's envs; the run's clock counts all num_envs per vector step
                self._on_episode(rollout_start + steps_in // size * self.num_envs, episode_return, length)
        self._rates = [size * storage.rollout_length / result["seconds"]
                       for (_, size), result in zip(self._shares, results)]
        self._overhead_s = time.perf_counter() - start - max(result["seconds"] for result in results)
        return np.concatenate([result["last_value"] for result in results])

    def _result(self, i: int, call, sent) -> dict[str, Any]:
        """Actor i's rollout; if its process died or its envs raised, it is restarted and collects again."""
        import ray

        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                return ray.get(call)
            except ray.exceptions.RayActorError as error:  # the process died (killed, out of memory, a node lost)
                cause, task_failed = f"its process died: {_first_line(error)}", False
            except ray.exceptions.RayTaskError as error:  # the envs (or the code stepping them) raised
                cause, task_failed = _cause(error), True
            except ray.exceptions.RayError as error:  # e.g. an exception of the env's that cannot be pickled
                cause, task_failed = _first_line(error), True
            if attempt == MAX_ATTEMPTS:
                raise EnvStepError(f"rollout actor {i} failed {MAX_ATTEMPTS} times in a row; the last time {cause}",
                                   self.env_step)
            logging.warning("rollout actor %d failed (%s): its rollout is dropped and collected again by a fresh "
                            "actor", i, cause)
            self._restart(i, kill=task_failed)
            call = self._workers[i].collect.remote(*sent)
        raise AssertionError("unreachable")

    def _restart(self, i: int, kill: bool) -> None:
        """A fresh process for actor i (Ray restarts a dead one by itself) on fresh episodes, once it is up."""
        import ray

        if kill:
            ray.kill(self._workers[i], no_restart=False)
        self.restarts += 1
        deadline = time.monotonic() + RESTART_TIMEOUT_S
        while True:
            try:
                ray.get(self._workers[i].resume_at.remote(resume_seed(self._seed, self.restarts), self.env_step))
                return
            except ray.exceptions.ActorUnavailableError:  # still restarting
                if time.monotonic() > deadline:
                    raise EnvStepError(f"rollout actor {i} was not back {RESTART_TIMEOUT_S:.0f} s after a restart",
                                       self.env_step) from None
                time.sleep(0.2)

    def resume_at(self, seed: int, env_step: int) -> None:
        """A restored run continues at `env_step`: every actor on fresh episodes (tfrl.stepping.reset_for_resume)."""
        import ray

        self.env_step = env_step
        ray.get([worker.resume_at.remote(seed, env_step) for worker in self._workers])

    def log_values(self) -> dict[str, float]:
        if not self._rates:
            return {"actor_restarts": self.restarts}
        return {"actor_env_steps_per_s_mean": float(np.mean(self._rates)),
                "actor_env_steps_per_s_min": float(np.min(self._rates)),
                "actor_overhead_s": self._overhead_s, "actor_restarts": self.restarts}

    def pids(self) -> list[int]:
        import ray

        return ray.get([worker.pid.remote() for worker in self._workers])

    def close(self) -> None:
        import ray

        for worker in self._workers:
            ray.kill(worker, no_restart=True)
        self._workers = []


def _cause(error) -> str:
    """What a RayTaskError's task raised, in a line (an EnvStepError's reason)."""
    cause = error.cause if error.cause is not None else error
    return cause.reason if isinstance(cause, EnvStepError) else _first_line(cause)


def _first_line(error: BaseException) -> str:
    lines = [line for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")

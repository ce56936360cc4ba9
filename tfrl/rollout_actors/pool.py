"""What every kind of rollout actor shares: N Ray actors, each stepping a contiguous share of the run's num_envs
envs (env i keeps seed + i, as in one process), called together and gathered, and kept alive.

    ShareWorker   the actor's side: its envs (a VectorStepper), the episodes they end, resume and pid
    ActorPool     the driver's side: creates the actors, calls one method on all of them and gathers the results
                  in actor order (call), or keeps calls in flight and takes each result as it arrives (submit,
                  next_result); restarts a failed one, resumes, reports its rates, stops them

Faults: an actor whose process dies is restarted by Ray (max_restarts=-1); one whose envs raise is killed and
restarted. Either way its round is dropped and asked again of the fresh actor, with the same arguments (the same
weights), on fresh episodes, and counted (actor_restarts); MAX_ATTEMPTS failures of one actor in a row stop the
run with the cause (an EnvStepError, as a broken env in one process).
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

import numpy as np
from absl import logging

from tfrl.envs.stepping import EnvStepError, resume_seed

MAX_ATTEMPTS = 3  # failed rounds of one actor in a row before the run stops
RESTART_TIMEOUT_S = 300.0  # for a restarted actor to be up (its process imports TensorFlow, maybe on a busy node)


def shares(num_envs: int, num_actors: int) -> list[tuple[int, int]]:
    """(first env, number of envs) of each actor: contiguous, sizes differing by at most one."""
    if not 1 <= num_actors <= num_envs:
        raise ValueError(f"actors must be between 1 and num_envs={num_envs}, got {num_actors}")
    base, extra = divmod(num_envs, num_actors)
    sizes = [base + (i < extra) for i in range(num_actors)]
    return [(sum(sizes[:i]), size) for i, size in enumerate(sizes)]


class ShareWorker:
    """The envs first..first+size-1 of the run, in a Ray actor; a subclass steps them (`stepper`) and reports the
    episodes that ended (take_episodes)."""

    def __init__(self, env_spec, vector_mode: str, first: int, size: int, seed: int):
        from tfrl import envs  # in the actor's process

        self.first, self.size = first, size
        self._episodes: list[tuple[int, float, int]] = []
        env = envs.make_vector_env(env_spec, size, seed=seed + first, vector_mode=vector_mode, training=True)
        self.stepper = envs.VectorStepper(env, on_episode=lambda *episode: self._episodes.append(episode))
        self._round_start = (0, 0.0)  # (stepper env step, time) when the round began

    def pid(self) -> int:
        return os.getpid()

    def resume_at(self, seed: int, env_step: int) -> None:
        """Fresh episodes (the in-process envs' resume seeds for these envs); the subclass resets its acting."""
        self.stepper.resume_at(seed, env_step, self.first)

    def begin_round(self) -> None:
        self._episodes, self._round_start = [], (self.stepper.env_step, time.perf_counter())

    def end_round(self) -> dict[str, Any]:
        """"episodes" ((env steps of these envs into the round, return, length) of each that ended) and "seconds"."""
        start, started_at = self._round_start
        episodes = [(env_step - start, episode_return, length) for env_step, episode_return, length in self._episodes]
        return {"episodes": episodes, "seconds": time.perf_counter() - started_at}


class ActorPool:
    """num_actors actors of `worker_class` (a ShareWorker made with (*args, first, size, seed)); Ray must be
    initialized. on_episode(env_step, return, length) hears of every episode that ends, on the run's clock."""

    def __init__(self, worker_class, args: tuple, num_envs: int, num_actors: int, seed: int,
                 on_episode: Callable[[int, float, int], None], weight_sync_period: int = 1):
        import ray

        remote = ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=0)(worker_class)
        self.shares = shares(num_envs, num_actors)
        self._workers = [remote.remote(*args, first, size, seed) for first, size in self.shares]
        self._seed, self._on_episode = seed, on_episode
        self.num_envs, self.env_step, self.restarts = num_envs, 0, 0
        self._rates: list[float] = []  # each actor's env steps per second of stepping, in the last round
        self._overhead_s = 0.0  # the last round's wall time beyond its slowest actor's stepping
        self._in_flight: dict[Any, tuple[int, str, tuple, Any]] = {}  # submitted: ref -> (actor, method, args, tag)
        self._failures = [0] * num_actors  # failed rounds of each actor in a row, of submitted calls
        self._weight_sync_period = weight_sync_period
        self._weights: tuple[Any, int] | None = None  # (ObjectRef, clock) of the weights the actors are sent
        self._put_s: float | None = None  # seconds the last put of the weights took

    def call(self, method: str, *args) -> list[dict[str, Any]]:
        """Every actor's `method`(*args) (a round), in actor order; objects in args are sent once (an ObjectRef
        is passed as it is)."""
        start = time.perf_counter()
        sent = _put(args)
        calls = [getattr(worker, method).remote(*sent) for worker in self._workers]
        results = [self._result(i, call, method, sent) for i, call in enumerate(calls)]
        self._overhead_s = time.perf_counter() - start - max(result["seconds"] for result in results)
        return results

    def weights_ref(self, mirror, clock: int) -> tuple[Any, int]:
        """(ObjectRef, the clock it was put at) of the weights to send at `clock` (updates or rounds): `mirror` put
        into Ray's store once weight_sync_period have passed since the last put, else the last ones."""
        import ray

        if self._weights is None or clock - self._weights[1] >= self._weight_sync_period:
            start = time.perf_counter()
            self._weights = (ray.put(mirror), clock)
            self._put_s = time.perf_counter() - start
        return self._weights

    def submit(self, i: int, method: str, *args, tag: Any = None) -> None:
        """Starts actor i's `method`(*args) and returns; next_result() gives its result, with `tag`."""
        sent = _put(args)
        self._in_flight[getattr(self._workers[i], method).remote(*sent)] = (i, method, sent, tag)

    def next_result(self) -> tuple[int, dict[str, Any], Any]:
        """(actor, result, tag) of the submitted call that ends first. A failed call's actor is restarted and the
        call submitted again, as call() does."""
        import ray

        while True:
            ready, _ = ray.wait(list(self._in_flight), num_returns=1)
            i, method, sent, tag = self._in_flight.pop(ready[0])
            try:
                result = ray.get(ready[0])
            except ray.exceptions.RayError as error:
                self._failures[i] += 1
                self._recover(i, self._failures[i], error)
                self._in_flight[getattr(self._workers[i], method).remote(*sent)] = (i, method, sent, tag)
                continue
            self._failures[i] = 0
            return i, result, tag

    def results_waiting(self) -> int:
        """Submitted calls that ended and wait for next_result()."""
        import ray

        ready, _ = ray.wait(list(self._in_flight), num_returns=len(self._in_flight), timeout=0)
        return len(ready)

    def finish_round(self, results: list[dict[str, Any]], vector_steps: int) -> None:
        """Advances the run's clock by `vector_steps` steps of every env and reports the round's episodes."""
        start = self.env_step
        self.env_step += vector_steps * self.num_envs
        for (_, size), result in zip(self.shares, results):
            for steps_in, episode_return, length in result["episodes"]:
                # steps_in counts this actor's envs; the run's clock counts all num_envs per vector step
                self._on_episode(start + steps_in // size * self.num_envs, episode_return, length)
        self._rates = [size * vector_steps / result["seconds"] for (_, size), result in zip(self.shares, results)]

    def _result(self, i: int, call, method: str, sent) -> dict[str, Any]:
        """Actor i's result; if its process died or its envs raised, it is restarted and asked again."""
        import ray

        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                return ray.get(call)
            except ray.exceptions.RayError as error:
                self._recover(i, attempt, error)
                call = getattr(self._workers[i], method).remote(*sent)
        raise AssertionError("unreachable")

    def _recover(self, i: int, attempt: int, error) -> None:
        """After actor i's `attempt`-th failed round in a row: the run stops (EnvStepError) at MAX_ATTEMPTS, else
        the actor is restarted (its round is asked again by the caller)."""
        import ray

        if isinstance(error, ray.exceptions.RayActorError):  # the process died (killed, out of memory, node lost)
            cause, task_failed = f"its process died: {_first_line(error)}", False
        elif isinstance(error, ray.exceptions.RayTaskError):  # the envs (or the code stepping them) raised
            cause, task_failed = _cause(error), True
        else:  # e.g. an exception of the env's that cannot be pickled
            cause, task_failed = _first_line(error), True
        if attempt >= MAX_ATTEMPTS:
            raise EnvStepError(f"rollout actor {i} failed {MAX_ATTEMPTS} times in a row; the last time {cause}",
                               self.env_step)
        logging.warning("rollout actor %d failed (%s): its round is dropped and asked again of a fresh actor",
                        i, cause)
        self._restart(i, kill=task_failed)

    def _restart(self, i: int, kill: bool) -> None:
        """A fresh process for actor i (Ray restarts a dead one by itself) on fresh episodes, once it is up."""
        import ray

        worker, old_pid = self._workers[i], None
        if kill:  # ray.kill only asks: until the process is gone, calls may still reach it
            try:
                old_pid = ray.get(worker.pid.remote(), timeout=30)
            except ray.exceptions.RayError:
                pass
            ray.kill(worker, no_restart=False)
        self.restarts += 1
        deadline = time.monotonic() + RESTART_TIMEOUT_S
        while True:
            try:
                if old_pid is None or ray.get(worker.pid.remote()) != old_pid:
                    ray.get(worker.resume_at.remote(resume_seed(self._seed, self.restarts), self.env_step))
                    return
            except ray.exceptions.RayActorError:  # still restarting
                pass
            if time.monotonic() > deadline:
                raise EnvStepError(f"rollout actor {i} was not back {RESTART_TIMEOUT_S:.0f} s after a restart",
                                   self.env_step)
            time.sleep(0.2)

    def resume_at(self, seed: int, env_step: int) -> None:
        """A restored run continues at `env_step`: every actor on fresh episodes (tfrl.envs.stepping.reset_for_resume)."""
        import ray

        self.env_step, self._in_flight = env_step, {}  # calls in flight, if any, end on episodes that are dropped
        ray.get([worker.resume_at.remote(seed, env_step) for worker in self._workers])

    def log_values(self) -> dict[str, float]:
        values = {} if self._put_s is None else {"actor_weights_put_s": self._put_s}
        if not self._rates:
            return {**values, "actor_restarts": self.restarts}
        return {"actor_env_steps_per_s_mean": float(np.mean(self._rates)),
                "actor_env_steps_per_s_min": float(np.min(self._rates)),
                "actor_overhead_s": self._overhead_s, "actor_restarts": self.restarts, **values}

    def pids(self) -> list[int]:
        import ray

        return ray.get([worker.pid.remote() for worker in self._workers])

    def close(self) -> None:
        import ray

        for worker in self._workers:
            ray.kill(worker, no_restart=True)
        self._workers, self._in_flight = [], {}


def _put(args: tuple) -> tuple:
    """args in Ray's object store, once each (an ObjectRef stays as it is)."""
    import ray

    return tuple(arg if isinstance(arg, ray.ObjectRef) else ray.put(arg) for arg in args)


def _cause(error) -> str:
    """What a RayTaskError's task raised, in a line (an EnvStepError's reason)."""
    cause = error.cause if error.cause is not None else error
    return cause.reason if isinstance(cause, EnvStepError) else _first_line(cause)


def _first_line(error: BaseException) -> str:
    lines = [line for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")

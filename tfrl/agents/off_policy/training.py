"""The replay-backed training that DQN and SAC (and TD3) share: a replay, when a train call falls due, the call
itself (at once or in a background thread), and their share of a checkpoint.

    collect:  agent -> training.replay.add(...)               (training.replay.observe(step) gives what to store)
    train:    if training.due(env_step): batch = training.sample(...); training.run(batch, context)
    apply:    the agent's apply(update, context), in call order: at once, or at the next call / settle()

A train call falls due once env_step reaches the deadline (first learning_starts, then every
train_period_env_steps) and the replay holds a batch.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, Callable, Mapping

import numpy as np

from tfrl.agents.core import LearnerUpdate
from tfrl.agents.off_policy.config import OffPolicyConfig
from tfrl.envs import VectorStepper
from tfrl.hardware import distribute
from tfrl.schedules import next_deadline


class TrainCalls:
    """Makes a learner's update calls and hands each result to `apply(update, context)`.

    In the background (train_in_background), one call at a time runs in a thread while the caller goes on
    collecting; its result is applied at the next call or settle(). Results are applied in call order either way.
    """

    def __init__(self, learner, apply: Callable[[LearnerUpdate, Any], None], background: bool):
        self._learner, self._apply = learner, apply
        self._pool = concurrent.futures.ThreadPoolExecutor(1) if background else None
        self._in_flight: tuple[concurrent.futures.Future, Any] | None = None

    def run(self, batch, context: Any = None) -> None:
        """One update on `batch`; `context` goes with its result to apply (e.g. the replay indices)."""
        self.settle()
        if self._pool is None:
            self._apply(self._learner.update(batch), context)
        else:
            self._in_flight = (self._pool.submit(self._learner.update, batch), context)

    def settle(self) -> None:
        """Applies the call in flight, if any (its NonFiniteError is raised here)."""
        if self._in_flight is not None:
            future, context = self._in_flight
            self._in_flight = None
            self._apply(future.result(), context)

    def close(self) -> None:
        """Ends the thread once the call in flight, if any, is over (its result or error is dropped: close runs
        when the run ends, also on an error)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool, self._in_flight = None, None

    @property
    def in_flight(self) -> concurrent.futures.Future | None:
        return None if self._in_flight is None else self._in_flight[0]


class ReplayTraining:
    """A replay, the train deadline and the train calls of one replay-based agent (see the module docstring)."""

    def __init__(self, learner, config: OffPolicyConfig, replay, apply: Callable[[LearnerUpdate, Any], None]):
        self.replay = replay
        self.train_at = config.first_train_at  # env step of the next train call
        self._config = config
        self._calls = TrainCalls(learner, apply, background=config.train_in_background)

    def due(self, env_step: int) -> bool:
        """Whether a train call falls due at `env_step`; if so, the next deadline is set."""
        if env_step < self.train_at or self.replay.size < self._config.batch_size:
            return False
        self.train_at = next_deadline(self.train_at, env_step, self._config.train_period_env_steps)
        return True

    def sample(self, **options) -> dict[str, np.ndarray]:
        """K = gradient_steps_per_train batches [K, B, ...] for the next call, drawn once the call before it is
        applied (its priorities, with prioritized replay). options: the replay's (beta)."""
        self._calls.settle()
        return self.replay.sample(self._config.batch_size, self._config.gradient_steps_per_train, **options)

    def run(self, batch, context: Any = None) -> None:
        self._calls.run(batch, context)

    def settle(self) -> None:
        self._calls.settle()

    def close(self) -> None:
        self._calls.close()

    def checkpoint_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        """({"next_train_at", "replay"}, the replay's arrays), after the call in flight is applied."""
        self.settle()
        arrays, replay_state = self.replay.checkpoint_state()
        return {"next_train_at": self.train_at, "replay": replay_state}, arrays

    def restore(self, state: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        self.train_at = state["next_train_at"]
        self.replay.restore_checkpoint_state(arrays, state["replay"])


def collect_transitions(env, acting, mirror, obs_normalizer, replay, observe=None) -> None:
    """One vector step of the envs in this process (env: a VectorStepper, stepped by `acting`), or one round of
    the rollout actors (env: tfrl.agents.off_policy.ray_actors.RayTransitions, which act with copies of `mirror`
    and of the observation statistics): every transition into the replay."""
    if isinstance(env, VectorStepper):
        batches = [acting.step(env, env.env_step, obs_normalizer, observe)]
    else:
        batches = env.collect(mirror, obs_normalizer)
    for transitions in batches:
        if transitions is not None:
            replay.add(*transitions)


def check_first_batch(agent: str, config: OffPolicyConfig, runtime, lag: int = 0, steps_per_unit: int = 1) -> None:
    """With several workers every train call is a collective, so all workers must make it at the same env steps:
    the first deadline must find a full batch in every worker's replay. After v vector steps each of the
    num_envs envs has emitted at least v - lag units of steps_per_unit trained steps each (a transition; DQN's
    n-step returns hold lag = n - 1 back; a sequence replay's window of W steps, lag W - 1, steps_per_unit its
    sequence_length). DistributeConfigError naming the learning_starts that guarantees it."""
    if runtime.cluster.num_workers == 1:
        return
    first, num_envs = config.first_train_at, config.num_envs
    vector_steps = -(-first // num_envs)
    guaranteed = num_envs * max(0, vector_steps - lag) * steps_per_unit
    if guaranteed < config.batch_size:
        needed = num_envs * (-(-config.batch_size // (num_envs * steps_per_unit)) + lag)
        raise distribute.DistributeConfigError(
            f"multi_worker {agent}: at the first train call (env step {first}) a worker's replay may hold fewer "
            f"than batch_size={config.batch_size} trained steps, and workers must train at the same env steps; "
            f"raise learning_starts to at least {needed}")


def check_windows(agent: str, config: OffPolicyConfig, runtime) -> None:
    """An agent with memory (a sequence replay): its C = batch_size / sequence_length windows split evenly over
    the worker's replicas (a replica without a window would learn nothing, silently), and the first train call
    finds C windows in every worker's replay (check_first_batch)."""
    if runtime.strategy is not None:
        distribute.check_batch_split("batch_size / sequence_length (windows per gradient step)",
                                     config.batch_size // config.sequence_length, runtime.local_replicas)
    check_first_batch(agent, config, runtime, lag=config.window_steps - 1, steps_per_unit=config.sequence_length)

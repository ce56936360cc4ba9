"""The contracts between an agent and the run loop (tfrl.run.training_loop), after Acme's actor / learner / loop split.

    Learner   owns the networks, the optimizer and the train step. All its state is in tf.Variables
              (checkpoint_items()); update(batch) runs one TF call and returns a LearnerUpdate.
    Agent     what the loop asks of an algorithm: collect (act on the vector env and store what it saw) and
              train (hand what it stored to its learner, and refresh its NumPy actor with the new weights).
              It also names the policy the loop evaluates and saves, and its own share of a checkpoint.
    Loop      owns the run's life: restore, logging, stop requests, evaluation and checkpoint cadences, the
              best policy, the final evaluation and the divergence error. It knows no algorithm.

Nothing here imports TensorFlow.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable, Mapping, Protocol

import numpy as np

from tfrl.envs import VectorStepper


@dataclasses.dataclass(frozen=True)
class LearnerUpdate:
    """What one update call returns."""

    metrics: dict[str, float]  # named scalars for the log line (loss, ...)
    weights: list[np.ndarray]  # the acting network's trainable variables, in their order, for the NumPy mirror
    row_errors: np.ndarray | None = None  # per trained row, its error (DQN: |TD error| [K, B], for priorities)


class Learner(Protocol):
    def checkpoint_items(self) -> Mapping[str, Any]:
        """name -> TF trackable (networks, optimizer, step counters): everything a checkpoint must hold."""

    def update(self, batch: Any) -> LearnerUpdate:
        """One TF call on `batch` (the agent's type: a replay sample, a rollout); raises
        tfrl.models.numerics.NonFiniteError on a NaN or Inf."""


class Agent(Protocol):
    learner: Learner

    def collect(self, env: VectorStepper) -> None:
        """Act on `env` and store what happened: one vector step (DQN) or one rollout (A2C, PPO). With --actors,
        `env` is the agent's rollout actors (AgentSpec.rollout_actors) instead: one round of them."""

    def train(self, env_step: int) -> None:
        """Train on what was collected if a train call is due at `env_step`, and refresh the actor's weights."""

    def log_values(self) -> dict[str, float]:
        """The train metrics for the next log record: their means over the train calls since the last record
        (tfrl.agents.interval_means), and the schedules' current values."""

    def counters(self) -> dict[str, int]:
        """The learner's progress counters (e.g. {"gradient_steps": n}), logged with every record."""

    def settle(self) -> None:
        """Finishes any train call still running (DQN's train_in_background), so that the learner's variables
        and the actor's weights are final; the loop calls it before it evaluates, checkpoints or ends."""

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        """The evaluated policy: observations [N, ...] -> actions [N], no exploration. An agent with memory makes
        `greedy` a property giving a fresh tfrl.models.policy_memory.StatefulPolicy each time (evaluation resets it)."""

    def serving_policy(self):
        """tfrl.models.export.ServingPolicy over the live network: what the best policy saves and exports."""

    def checkpoint_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        """(JSON-able state, arrays) the agent needs to continue after a restore (RNG states, replay...)."""

    def restore(self, state: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        """Inverse of checkpoint_state, after the learner's variables were restored."""

    def reload_weights(self) -> None:
        """The learner's variables were assigned outside a train call (a restore, a warm start: tfrl.run.warm_start):
        refresh what the agent keeps of them (the NumPy actor, the observation statistics)."""

    def close(self) -> None:
        """The run is over (or failed): end whatever the agent runs besides the loop (a background train thread)."""


def _no_check(config, env_info) -> None:
    """An agent without observation checks of its own."""


@dataclasses.dataclass(frozen=True)
class AgentSpec:
    """What the registry (tfrl.agents), the launcher and the loop know of an agent, all answered by its package.

    config, learner, agent, policy: "module:attribute" (or module) paths, imported only when used, so that
    nothing here imports TensorFlow (a learner or agent path may name a ByMemory, which picks the class by config):
        config    its hyperparameter dataclass (an extension of tfrl.config.LoopConfig)
        learner   Learner(config, env_info, runtime, seed), with check_runtime(config, runtime)
        agent     Agent(learner, config, env_info, seed), with check_runtime(config, runtime)
        policy    the module whose serving_policy(config, env_info, ...) is the exported greedy policy
    actions: the action spaces it acts in: "discrete" (Discrete), "multi_discrete" (MultiDiscrete, MultiBinary),
      "continuous" (Box), "hybrid" (a Dict or Tuple of those). refusals: why it does not act in one of the others, where that needs saying.
    images: whether it takes uint8 (image) observations.
    check_observations(config, env_info): UsageError if `config` cannot take the env's observations.
    estimate_memory(config, env_info, vector_mode): {component: bytes} (tfrl.memory does the arithmetic).
    convolves(config, env_info): whether its networks start with a CNN (the loop then advises on precision).
    rollout_actors: "module:attribute" of the class whose for_agent(agent, env_spec, settings, seed,
      vector_mode, on_episode) steps its envs in Ray actors (--actors; settings: tfrl.rollout_actors.ActorSettings)
      and stands in the loop where the VectorStepper stands (tfrl.rollout_actors); None: its envs are stepped in
      the learner's process only.
    check_actors(config, settings): UsageError if `config` cannot step its envs in rollout actors so (no
      TensorFlow).
    search_space: what `tfrl tune` samples by default, {hyperparameter: entry} (the form of tfrl.tuning.spaces);
      empty: the user gives one with --space.
    """

    name: str
    config: str
    learner: str
    agent: str
    policy: str
    estimate_memory: Callable[[Any, Any, str], dict[str, int]]
    actions: tuple[str, ...] = ("discrete",)
    refusals: Mapping[str, str] = dataclasses.field(default_factory=dict)
    images: bool = True
    check_observations: Callable[[Any, Any], None] = _no_check
    convolves: Callable[[Any, Any], bool] = lambda config, env_info: False
    rollout_actors: str | None = None
    check_actors: Callable[[Any, Any], None] = lambda config, settings: None  # UsageError: not with these actors
    search_space: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class ByMemory:
    """An AgentSpec's learner or agent entry that is one class ("module:attribute") for a config without memory
    and another for one with lstm_units > 0: called and checked as the class it picks. config_arg: where the
    config sits among the call's arguments (a learner's first, an agent's second)."""

    plain: str
    recurrent: str
    config_arg: int

    def pick(self, config) -> type:
        module, _, attribute = (self.recurrent if getattr(config, "lstm_units", 0) else self.plain).partition(":")
        return getattr(importlib.import_module(module), attribute)

    def __call__(self, *args):
        return self.pick(args[self.config_arg])(*args)

    def check_runtime(self, config, runtime) -> None:
        self.pick(config).check_runtime(config, runtime)


def rng_state(generator: np.random.Generator) -> dict:
    """A NumPy Generator's bit_generator.state, JSON-serializable (Python ints are unbounded): an agent's share
    of a checkpoint."""
    return generator.bit_generator.state


def set_rng_state(generator: np.random.Generator, state: Mapping[str, Any]) -> None:
    generator.bit_generator.state = dict(state)

"""Off-policy transitions (DQN, SAC, TD3) stepped in Ray actors and streamed into the learner's replay: --actors=N.

Each actor holds a contiguous share of the num_envs envs and the agent's acting for them (its acting_factory's:
epsilon-greedy with n-step returns for DQN, the explorer for SAC and TD3, each with its own RNG), and steps them
one round at a time: train_period_env_steps / num_envs vector steps (round_vector_steps), one train period. Each
round it is sent the weights the learner has now (the acting mirror) and, for SAC and TD3, a snapshot of the
observation statistics, which it goes on counting in; it sends back its transitions, ready for the replay, which
the driver adds in actor order, and what it counted.

So the ratio of gradient steps to env steps stays the configured one: the loop makes at most one train call per
round, as it would after the same env steps in one process. The actors wait for the learner between rounds (the
weights of round k+1 come from the train call after round k), and the learner waits for the slowest actor; with
train_in_background the train call runs while the actors step the next round, with weights one call older, as
in one process. --weight_sync_period=K sends new weights every K rounds only (the actors act with older ones in
between). Faults and resume: tfrl.rollout_actors.pool.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from tfrl.envs.stepping import resume_seed
from tfrl.errors import UsageError
from tfrl.rollout_actors import ActorSettings
from tfrl.rollout_actors.pool import ActorPool, ShareWorker


ROLLOUT_ACTORS = "tfrl.agents.off_policy.ray_actors:RayTransitions"  # an AgentSpec's rollout_actors


def check_config(config, settings: ActorSettings) -> None:
    """UsageError unless a round of the actors is a whole number of vector steps and the mode is sync (an
    AgentSpec's check_actors)."""
    if settings.mode != "sync":
        raise UsageError(f"--actor_mode={settings.mode} is A2C's and PPO's (V-trace); DQN, SAC and TD3 actors step "
                         "one train period per round (with train_in_background, while the learner trains)")
    round_vector_steps(config)


def round_vector_steps(config) -> int:
    """Vector steps of a round: one train period (one vector step where the period is shorter, as one process
    then trains once per vector step); UsageError if a longer period is not a whole number of vector steps."""
    period, num_envs = config.train_period_env_steps, config.num_envs
    if period <= num_envs:
        return 1
    if period % num_envs:
        raise UsageError(f"--actors: train_period_env_steps={period} must be a multiple of num_envs={num_envs}, "
                         "so that each round of the actors is one train period")
    return period // num_envs


class TransitionWorker(ShareWorker):
    """Lives in a Ray actor: its share of the envs and the agent's acting for them (acting_factory(mirror, size,
    seed), made when the first weights arrive: the actor's constructor gets nothing large)."""

    def __init__(self, env_spec, vector_mode: str, acting_factory, vector_steps: int, num_envs: int, first: int,
                 size: int, seed: int):
        super().__init__(env_spec, vector_mode, first, size, seed)
        self._acting_factory, self._vector_steps, self._num_envs = acting_factory, vector_steps, num_envs
        self._acting_seed, self._acting = seed + first, None  # the in-process acting's seed for the first share

    def resume_at(self, seed: int, env_step: int) -> None:
        super().resume_at(seed, env_step)
        self._acting_seed, self._acting = resume_seed(seed, env_step, 1) + self.first, None

    def collect(self, mirror, obs_normalizer, env_step: int) -> dict[str, Any]:
        """One round from the run's `env_step`, acting with `mirror`: "transitions" (the replay's fields, stacked
        over the round, or None), "counted" (the observation statistics taken in) and ShareWorker.end_round's."""
        self.begin_round()
        if self._acting is None:
            self._acting = self._acting_factory(mirror, self.size, self._acting_seed)
        else:
            self._acting.use(mirror)
        batches = []
        for t in range(self._vector_steps):
            transitions = self._acting.step(self.stepper, env_step + t * self._num_envs, obs_normalizer)
            if transitions is not None:
                batches.append(transitions)
        stacked = tuple(np.concatenate(field) for field in zip(*batches)) if batches else None
        return {"transitions": stacked, "counted": obs_normalizer.counted(), **self.end_round()}


class RayTransitions(ActorPool):
    """The driver's side: TransitionWorkers in Ray actors (Ray must be initialized), one round per collect(). It
    stands where the loop's VectorStepper stands (env_step, resume_at, log_values, close)."""

    @classmethod
    def for_agent(cls, agent, env_spec, settings: ActorSettings, seed: int, vector_mode: str,
                  on_episode: Callable[[int, float, int], None]) -> RayTransitions:
        """For an agent with acting_factory() (DQNAgent, ContinuousAgent)."""
        config = agent.config
        self = cls(TransitionWorker, (env_spec, vector_mode, agent.acting_factory(), round_vector_steps(config),
                                      config.num_envs), config.num_envs, settings.count, seed, on_episode,
                   settings.weight_sync_period)
        self.vector_steps, self._rounds = round_vector_steps(config), 0
        return self

    def collect(self, mirror, obs_normalizer) -> list[tuple[np.ndarray, ...]]:
        """One round of every actor acting with `mirror` (or the weights sent up to weight_sync_period - 1 rounds
        before): their transitions, in actor order; `obs_normalizer` (the learner's) takes in the observations
        they counted."""
        weights, _ = self.weights_ref(mirror, self._rounds)
        self._rounds += 1
        results = self.call("collect", weights, obs_normalizer.snapshot(), self.env_step)
        for result in results:
            obs_normalizer.absorb(result["counted"])
        self.finish_round(results, self.vector_steps)
        return [result["transitions"] for result in results if result["transitions"] is not None]

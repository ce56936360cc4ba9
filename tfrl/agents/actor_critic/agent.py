"""The actor-critic agent (A2C, PPO): collect a rollout on the vector env, then hand it to the learner.

collect: rollout_length vector steps of num_envs envs, acting with a NumPy mirror of the network (no TF
call; tfrl.agents.actor_critic.collection), then what needs the whole rollout in time order
(RolloutStorage.finish). A time-limit truncation bootstraps from V(the episode's last obs) through the reward
(tfrl.agents.actor_critic.advantages); V(s_T) bootstraps the rollout's end. The advantages and
log pi_old(a|s) are computed in NumPy once per rollout.
train: one learner update, one TF call (A2C: one gradient step; PPO: n_epochs passes of minibatch steps),
which also returns the weights that refresh the mirror. That is 1 / (num_envs * rollout_length) TF calls per
env step.

With normalize_observations, the rollout holds observations normalized by the running statistics of their
vector step (tfrl.models.normalization); with normalize_rewards, rewards scaled by the running std of the return.

Its share of a checkpoint, always taken between updates: the actor's RNG state, the log interval's train metrics
so far (tfrl.agents.interval_means) and the reward scaler's statistics (the rollout storage is empty between
updates; the observation statistics are the learner's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import numpy as np

from tfrl.agents.actor_critic import policy as ac_policy, recurrent
from tfrl.agents.actor_critic.actor import ActorCriticActor, RecurrentActor
from tfrl.agents.actor_critic.collection import collect_steps
from tfrl.agents.actor_critic.config import ActorCriticConfig
from tfrl.agents.actor_critic.rollout import Rollout, RolloutStorage
from tfrl.agents.core import rng_state, set_rng_state
from tfrl.agents.interval_means import IntervalMeans
from tfrl.envs import EnvInfo, VectorStepper
from tfrl.models import networks, numpy_networks, running_stats
from tfrl.models.policy_memory import StatefulPolicy

if TYPE_CHECKING:  # the type only: Ray loads with --actors
    from tfrl.agents.actor_critic.ray_actors import RayRollouts

# The learners' schedule values among their metrics: a log record shows the newest, not the interval's mean.
SCHEDULE_VALUES = ("learning_rate", "clip_range")


class ActorCriticAgent:
    def __init__(self, learner, config: ActorCriticConfig, env: EnvInfo, seed: int):
        """learner: an A2C or PPO learner (its `network`, `head` and update(Rollout))."""
        self.learner = learner
        self.config = config
        self.env_info = env
        self.state_size = recurrent.state_size_of(config)
        if self.state_size:
            self._mirror = recurrent.acting_network(learner.network)
            self.actor = RecurrentActor(self._mirror, learner.head, seed, config.num_envs, self.state_size)
        else:
            self._mirror = networks.acting_network(learner.network, numpy_networks.NumpyActorCritic)
            self.actor = ActorCriticActor(self._mirror, learner.head, seed=seed)
        self._storage = RolloutStorage(config.rollout_length, config.num_envs, env.observations.row_shape,
                                       learner.head, env.observations.numpy_dtype, self.state_size)
        self._rollout: Rollout | None = None
        self._metrics = IntervalMeans(latest=SCHEDULE_VALUES)
        self._obs_normalizer = learner.obs_normalizer
        self._reward_scaler = (running_stats.RewardScaler(config.num_envs, config.gamma, config.reward_clip)
                               if config.normalize_rewards else None)

    def collect(self, env: VectorStepper | RayRollouts) -> None:
        """One rollout of the envs in this process, or of the rollout actors' (--actors), which act with a copy of
        the mirror and of the observation statistics."""
        start_env_step = env.env_step
        if isinstance(env, VectorStepper):
            last_value = collect_steps(env, self.actor, self._obs_normalizer, self.learner.head, self._storage)
        else:
            last_value = env.collect(self._mirror, self._obs_normalizer, self._storage)
        self._rollout = self._storage.finish(last_value, self.config.gamma, self.config.gae_lambda,
                                             self.learner.head, start_env_step, self._reward_scaler)

    def train(self, env_step: int) -> None:
        del env_step  # every rollout is trained on
        update = self.learner.update(self._rollout)
        self._mirror.update(update.weights)
        self._metrics.add(update.metrics)

    def log_values(self) -> dict[str, float]:
        return {**self._metrics.take(), "explained_variance": self._storage.explained_variance()}

    def counters(self) -> dict[str, int]:
        # updates counts rollouts trained on; gradient_steps, as DQN's and SAC's, counts optimizer steps.
        updates = int(self.learner.updates.numpy())
        return {"updates": updates, "gradient_steps": updates * self.config.gradient_steps_per_update}

    def settle(self) -> None:
        """Nothing runs in the background (every update ends in train()); the observation statistics go into the
        layer that checkpoints and the best policy save."""
        self._obs_normalizer.sync()

    @property
    def greedy(self):
        """The evaluated policy (frozen statistics: its observations are not counted); with memory, a
        tfrl.models.policy_memory.StatefulPolicy."""
        if not self.state_size:
            return self._greedy_without_memory
        return StatefulPolicy(lambda obs, state: self.actor.greedy_step(self._obs_normalizer(obs), state),
                              self.state_size)

    def _greedy_without_memory(self, obs: np.ndarray) -> np.ndarray:
        return self.actor.greedy(self._obs_normalizer(obs))

    def serving_policy(self):
        return ac_policy.serving_policy(self.config, self.env_info, self.learner.network,
                                        self.learner.obs_normalizer.layer)

    def checkpoint_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        self.settle()
        arrays = {} if self._reward_scaler is None else self._reward_scaler.state()
        return {"actor_rng": rng_state(self.actor.rng), "train_metrics": self._metrics.state()}, arrays

    def restore(self, state: Mapping, arrays: Mapping[str, np.ndarray]) -> None:
        set_rng_state(self.actor.rng, state["actor_rng"])
        self._metrics.restore(state.get("train_metrics", {}))  # none in checkpoints before 2026-12-06
        self.reload_weights()
        if self._reward_scaler is not None:
            self._reward_scaler.restore(arrays)

    def reload_weights(self) -> None:
        self._mirror.update([v.numpy() for v in self.learner.network.trainable_variables])
        self._obs_normalizer.load()

    def close(self) -> None:
        """Nothing runs besides the loop."""

    @staticmethod
    def check_runtime(config: ActorCriticConfig, runtime) -> None:
        """Workers stay in step without more checks: every worker's update follows a fixed-length rollout and
        makes the same number of gradient steps."""
        del config, runtime

"""The DQN agent: act epsilon-greedily, store n-step transitions, and train every train_period_env_steps.

collect: one vector step, acting on a NumPy mirror of the online network (no TF call).
train: once env_step reaches the train deadline and the replay holds a batch, one TF call: the target update
if one fell due since the last call, then gradient_steps_per_train gradient steps on fresh samples. That is
1 / train_period_env_steps TF calls per env step. With train_in_background the call runs in a thread while
collection goes on, and its weights reach the actor at the next train deadline.

Its share of a checkpoint: the replay buffer (arrays), the exploration RNG, the train and target-update
deadlines and the log interval's train metrics so far. A resumed run restarts its envs from a fresh reset, so
episodes in flight at the checkpoint, and their n-step transitions, are lost.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np

from tfrl.agents.core import rng_state, set_rng_state
from tfrl.agents.dqn import policy as dqn_policy
from tfrl.agents.dqn.actor import DQNActing, epsilon_schedule
from tfrl.agents.dqn.config import DQNConfig
from tfrl.agents.dqn.learning import DQNLearner, ReplayBatch
from tfrl.agents.interval_means import IntervalMeans
from tfrl.agents.off_policy.training import ReplayTraining, check_first_batch, collect_transitions
from tfrl.envs import EnvInfo, VectorStepper
from tfrl.models.running_stats import NoNormalization
from tfrl.replay import UniformReplay
from tfrl.replay.frames import FrameStackReplay
from tfrl.replay.prioritized import PrioritizedReplay
from tfrl.schedules import Schedule, next_deadline

if TYPE_CHECKING:  # the type only: Ray loads with --actors
    from tfrl.agents.off_policy.ray_actors import RayTransitions


def importance_sampling_beta(env_step: int, config: DQNConfig) -> float:
    """beta of prioritized replay's weights: importance_sampling_start at env step 0, 1 at total_env_steps."""
    return Schedule(config.importance_sampling_start, 1.0, config.total_env_steps).at(env_step)


def _make_replay(config: DQNConfig, env: EnvInfo, seed: int):
    """Uniform or prioritized; for frame-stacked observations, over frame refs (tfrl.replay.frames)."""
    stacked = env.frame_stack > 0
    observations = env.observations
    obs_shape, obs_dtype = ((), np.int64) if stacked else (observations.row_shape, observations.numpy_dtype)
    if config.prioritized_replay:
        replay = PrioritizedReplay(config.replay_capacity, obs_shape, seed, config.priority_exponent,
                                   config.priority_epsilon, obs_dtype=obs_dtype)
    else:
        replay = UniformReplay(config.replay_capacity, obs_shape, seed=seed, obs_dtype=obs_dtype)
    if not stacked:
        return replay
    return FrameStackReplay(replay, env.obs_shape[:-1], env.frame_stack, config.num_envs, config.n_step_return)


class DQNAgent:
    POLICY = dqn_policy  # the exported policy's module, and what the actor calls for Q-values (acting_mirror)

    def __init__(self, learner: DQNLearner, config: DQNConfig, env: EnvInfo, seed: int):
        self.learner = learner
        self.config = config
        self._env_info = env
        self._mirror = self.POLICY.acting_mirror(learner.online)
        self.acting = self.acting_factory()(self._mirror, config.num_envs, seed)
        self.actor = self.acting.actor
        self.training = ReplayTraining(learner, config, self._new_replay(config, env, seed), self._apply)
        self._target_update_at = config.target_update_period_env_steps  # env step of the next target update
        self._metrics = IntervalMeans(initial={"loss": float("nan"), "q_mean": float("nan")})
        self._epsilon = epsilon_schedule(config)
        self._last_acted_at = 0  # the env step of the last vector step taken, whose epsilon is logged

    @staticmethod
    def _new_replay(config: DQNConfig, env: EnvInfo, seed: int):
        return _make_replay(config, env, seed)

    @property
    def replay(self):
        return self.training.replay

    def acting_factory(self) -> Callable[[Any, int, int], DQNActing]:
        """(mirror, num_envs, seed) -> acting for that many envs: this agent's, or a rollout actor's (picklable)."""
        return functools.partial(DQNActing, config=self.config, num_actions=self._env_info.num_actions)

    def collect(self, env: VectorStepper | RayTransitions) -> None:
        """One vector step here, or one round of the rollout actors (--actors); frame refs for a frame-stack
        replay, else whole observations."""
        collect_transitions(env, self.acting, self._mirror, NoNormalization(), self.replay, self.replay.observe)
        self._last_acted_at = env.env_step - self.config.num_envs

    def train(self, env_step: int) -> None:
        config = self.config
        if not self.training.due(env_step):
            return
        # A target update that fell due since the last train call happens first in this one:
        # no gradient step ran in between, so it is the same as updating on time.
        update_target = env_step >= self._target_update_at
        if update_target:
            self._target_update_at = next_deadline(self._target_update_at, env_step,
                                                   config.target_update_period_env_steps)
        options = {"beta": importance_sampling_beta(env_step, config)} if config.prioritized_replay else {}
        transitions = self.training.sample(**options)
        index = transitions.pop("index", None)  # prioritized replay: the rows' slots, for their new priorities
        self.training.run(ReplayBatch(transitions, update_target), index)

    def settle(self) -> None:
        self.training.settle()

    def close(self) -> None:
        self.training.close()

    def _apply(self, update, index: np.ndarray | None) -> None:
        if index is not None:
            self.replay.update_priorities(index, update.row_errors)
        self._mirror.update(update.weights)
        self._metrics.add(update.metrics)

    def log_values(self) -> dict[str, float]:
        return {**self._metrics.take(), "epsilon": self._epsilon.at(self._last_acted_at)}

    def counters(self) -> dict[str, int]:
        return {"gradient_steps": int(self.learner.gradient_steps.numpy())}

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        return self.actor.greedy(obs)

    def serving_policy(self):
        return self.POLICY.serving_policy(self.config, self._env_info, self.learner.online)

    def checkpoint_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        training_state, arrays = self.training.checkpoint_state()
        state = {**training_state, "next_target_update_at": self._target_update_at,
                 "train_metrics": self._metrics.state(),
                 "actor_rng": rng_state(self.actor.rng)}
        return state, arrays

    def restore(self, state: Mapping, arrays: Mapping[str, np.ndarray]) -> None:
        self.training.restore(state, arrays)
        self._target_update_at = state["next_target_update_at"]
        self._metrics.restore(state["train_metrics"])
        set_rng_state(self.actor.rng, state["actor_rng"])
        self.reload_weights()

    def reload_weights(self) -> None:
        self._mirror.update([v.numpy() for v in self.learner.online.trainable_variables])

    @staticmethod
    def check_runtime(config: DQNConfig, runtime) -> None:
        """UsageError if `config` cannot train under `runtime`'s strategy; writes nothing: the first train call
        must find a full batch on every worker, and n-step returns hold n - 1 transitions of each env back."""
        check_first_batch("DQN", config, runtime, lag=config.n_step_return - 1)

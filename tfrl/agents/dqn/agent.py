"""The DQN agent: act epsilon-greedily, store n-step transitions, and train every train_period_env_steps.

collect: one vector step, acting on a NumPy mirror of the online network (no TF call).
train: once env_step reaches the train deadline and the replay holds a batch, one TF call: the target update
if one fell due since the last call, then gradient_steps_per_train gradient steps on fresh samples. That is
1 / train_period_env_steps TF calls per env step. With train_in_background the call runs in a thread while
collection goes on, and its weights reach the actor at the next train deadline.

Its share of a checkpoint: the replay buffer (arrays), the exploration RNG, the train and target-update
deadlines and the last train metrics. A resumed run restarts its envs from a fresh reset, so episodes in
flight at the checkpoint, and their n-step transitions, are lost.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

import numpy as np

from tfrl import checkpoints, distribute, networks
from tfrl.agents.dqn import policy as dqn_policy
from tfrl.agents.dqn.actor import EpsilonGreedyActor, linear_epsilon
from tfrl.agents.dqn.config import DQNConfig
from tfrl.agents.dqn.learning import DQNLearner, ReplayBatch
from tfrl.agents.off_policy import TrainCalls
from tfrl.deadlines import next_deadline
from tfrl.envs import EnvInfo, VectorStepper
from tfrl.frame_replay import FrameStackReplay
from tfrl.prioritized_replay import PrioritizedReplay
from tfrl.replay import NStepBuilder, UniformReplay


def importance_sampling_beta(env_step: int, config: DQNConfig) -> float:
    """beta of prioritized replay's weights: importance_sampling_start at env step 0, 1 at total_env_steps."""
    progress = min(env_step / config.total_env_steps, 1.0)
    return config.importance_sampling_start + progress * (1.0 - config.importance_sampling_start)


def _make_replay(config: DQNConfig, env: EnvInfo, seed: int):
    """Uniform or prioritized; for frame-stacked observations, over frame refs (tfrl.frame_replay)."""
    stacked = env.frame_stack > 0
    obs_shape, obs_dtype = ((), np.int64) if stacked else (env.obs_shape, env.obs_dtype)
    if config.prioritized_replay:
        replay = PrioritizedReplay(config.replay_capacity, obs_shape, seed, config.priority_exponent,
                                   config.priority_epsilon, obs_dtype=obs_dtype)
    else:
        replay = UniformReplay(config.replay_capacity, obs_shape, seed=seed, obs_dtype=obs_dtype)
    if not stacked:
        return replay
    return FrameStackReplay(replay, env.obs_shape[:-1], env.frame_stack, config.num_envs, config.n_step_return)


@dataclasses.dataclass
class TrainDeadlines:
    """Env steps at which the next train call and the next target update fall due."""

    train_at: int
    target_update_at: int

    def to_json(self) -> dict:
        return {"next_train_at": self.train_at, "next_target_update_at": self.target_update_at}


class DQNAgent:
    def __init__(self, learner: DQNLearner, config: DQNConfig, env: EnvInfo, seed: int):
        self.learner = learner
        self.config = config
        self._env_info = env
        self._mirror = networks.acting_network(learner.online, networks.NumpyMLP)
        self.actor = EpsilonGreedyActor(self._mirror, env.num_actions, seed=seed)
        self.replay = _make_replay(config, env, seed)
        self._nstep = NStepBuilder(config.n_step_return, config.gamma, config.num_envs)
        self._deadlines = TrainDeadlines(max(config.learning_starts, config.train_period_env_steps),
                                         config.target_update_period_env_steps)
        self._metrics = {"loss": float("nan"), "q_mean": float("nan")}
        self._epsilon = linear_epsilon(0, config)
        self._calls = TrainCalls(learner, self._apply, background=config.train_in_background)

    def collect(self, env: VectorStepper) -> None:
        self._epsilon = linear_epsilon(env.env_step, self.config)
        step = env.step(self.actor.act(env.obs, self._epsilon))
        if isinstance(self.replay, FrameStackReplay):  # transitions of frame refs, not of stacks
            obs, final_obs = self.replay.observe(step)
        else:
            obs, final_obs = step.obs, step.final_obs()
        transitions = self._nstep.step(obs, step.action, step.reward, step.terminated, step.truncated, final_obs)
        if transitions is not None:
            self.replay.add(*transitions)

    def train(self, env_step: int) -> None:
        config, deadlines = self.config, self._deadlines
        if env_step < deadlines.train_at or self.replay.size < config.batch_size:
            return
        deadlines.train_at = next_deadline(deadlines.train_at, env_step, config.train_period_env_steps)
        # A target update that fell due since the last train call happens first in this one:
        # no gradient step ran in between, so it is the same as updating on time.
        update_target = env_step >= deadlines.target_update_at
        if update_target:
            deadlines.target_update_at = next_deadline(deadlines.target_update_at, env_step,
                                                       config.target_update_period_env_steps)
        self._calls.settle()  # the call before this one: its weights and priorities first
        index = None
        if config.prioritized_replay:
            transitions = self.replay.sample(config.batch_size, config.gradient_steps_per_train,
                                             beta=importance_sampling_beta(env_step, config))
            index = transitions.pop("index")
        else:
            transitions = self.replay.sample(config.batch_size, config.gradient_steps_per_train)
        self._calls.run(ReplayBatch(transitions, update_target), index)

    def settle(self) -> None:
        self._calls.settle()

    def _apply(self, update, index: np.ndarray | None) -> None:
        if index is not None:
            self.replay.update_priorities(index, update.row_errors)
        self._mirror.update(update.weights)
        self._metrics = update.metrics

    def log_values(self) -> dict[str, float]:
        return {**self._metrics, "epsilon": self._epsilon}

    def counters(self) -> dict[str, int]:
        return {"gradient_steps": int(self.learner.gradient_steps_done.numpy())}

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        return self.actor.greedy(obs)

    def serving_policy(self):
        return dqn_policy.serving_policy(self.config, self._env_info, self.learner.online)

    def checkpoint_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        self.settle()
        replay_arrays, replay_state = self.replay.checkpoint_state()
        state = {**self._deadlines.to_json(), "train_metrics": self._metrics,
                 "actor_rng": checkpoints.rng_state(self.actor.rng), "replay": replay_state}
        return state, replay_arrays

    def restore(self, state: Mapping, arrays: Mapping[str, np.ndarray]) -> None:
        self._deadlines = TrainDeadlines(state["next_train_at"], state["next_target_update_at"])
        self._metrics = dict(state["train_metrics"])
        checkpoints.set_rng_state(self.actor.rng, state["actor_rng"])
        self.replay.restore_checkpoint_state(arrays, state["replay"])
        self.reload_weights()

    def reload_weights(self) -> None:
        self._mirror.update([v.numpy() for v in self.learner.online.trainable_variables])

    def close(self) -> None:
        self._calls.close()

    @staticmethod
    def check_runtime(config: DQNConfig, runtime) -> None:
        """UsageError if `config` cannot train under `runtime`'s strategy; writes nothing.

        With several workers, every train call is a collective: all workers must make it at the same env step.
        The agent trains once env_step reaches the deadline *and* the replay holds a batch; the replay's size
        depends on when each worker's episodes ended (n-step flushes), so the first deadline must guarantee a
        full batch everywhere. After v vector steps each of the num_envs envs has emitted at least
        v - n_step_return + 1 transitions.
        """
        if runtime.cluster.num_workers == 1:
            return
        first_train_at = max(config.learning_starts, config.train_period_env_steps)
        vector_steps = -(-first_train_at // config.num_envs)
        guaranteed = config.num_envs * max(0, vector_steps - config.n_step_return + 1)
        if guaranteed < config.batch_size:
            needed = config.num_envs * (-(-config.batch_size // config.num_envs) + config.n_step_return - 1)
            raise distribute.DistributeConfigError(
                f"multi_worker DQN: at the first train call (env step {first_train_at}) a worker's replay may "
                f"hold fewer than batch_size={config.batch_size} transitions, and workers must train at the same "
                f"env steps; raise learning_starts to at least {needed}")

"""The DQN agent with memory (lstm_units > 0): DQNAgent's train calls, target updates, metrics and checkpoint
share, with acting that carries one LSTM state per env and a sequence replay (tfrl.replay.sequences).

Its share of a checkpoint adds nothing to DQNAgent's but the replay's rings. A resumed run starts fresh episodes
from zero states; the replay marks each env's last stored row as the end of a cut episode.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from tfrl.agents.dqn.agent import DQNAgent
from tfrl.agents.dqn.config import DQNConfig
from tfrl.agents.dqn.recurrent import RecurrentDQNActing
from tfrl.agents.off_policy.training import check_windows, collect_transitions
from tfrl.envs import EnvInfo
from tfrl.models.policy_memory import StatefulPolicy
from tfrl.replay.sequences import SequenceReplay


class RecurrentDQNAgent(DQNAgent):
    @staticmethod
    def _new_replay(config: DQNConfig, env: EnvInfo, seed: int) -> SequenceReplay:
        observations = env.observations
        return SequenceReplay(config.replay_capacity, config.num_envs, observations.row_shape, 2 * config.lstm_units,
                              seed, burn_in=config.burn_in, sequence_length=config.sequence_length,
                              n_step=config.n_step_return, gamma=config.gamma, obs_dtype=observations.numpy_dtype)

    def collect(self, env) -> None:
        """One vector step (no rollout actors: see the spec's check_actors): its rows into the sequence replay."""
        collect_transitions(env, self.acting, self._mirror, None, self.replay)
        self._last_acted_at = env.env_step - self.config.num_envs

    def acting_factory(self) -> Callable[[Any, int, int], RecurrentDQNActing]:
        return functools.partial(RecurrentDQNActing, config=self.config, num_actions=self._env_info.num_actions)

    @property
    def greedy(self) -> StatefulPolicy:
        """A fresh policy with one state per row, zeros first (the loop's evaluation resets it per episode)."""
        return StatefulPolicy(self.acting.greedy_step, 2 * self.config.lstm_units)

    @staticmethod
    def check_runtime(config: DQNConfig, runtime) -> None:
        """Its windows split evenly over the replicas, and found in every worker's replay at the first train call
        (tfrl.agents.off_policy.training.check_windows)."""
        check_windows("DQN", config, runtime)

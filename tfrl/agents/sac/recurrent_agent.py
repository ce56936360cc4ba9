"""The SAC agent with memory (lstm_units > 0): ContinuousAgent's train calls, metrics, observation statistics and
checkpoint share, with acting that carries every network's LSTM state per env (tfrl.agents.sac.recurrent) and a
sequence replay (tfrl.replay.sequences). A resumed run starts fresh episodes from zero states."""

from __future__ import annotations

import functools

import numpy as np

from tfrl.agents.off_policy.continuous import ContinuousAgent
from tfrl.agents.off_policy.training import check_windows
from tfrl.agents.sac.agent import SACAgent
from tfrl.agents.sac.config import SACConfig
from tfrl.agents.sac.recurrent import NumpyRecurrentSAC, RecurrentSACActing
from tfrl.envs import EnvInfo
from tfrl.models.policy_memory import StatefulPolicy
from tfrl.replay.sequences import SequenceReplay


class RecurrentSACAgent(SACAgent):
    def __init__(self, learner, config: SACConfig, env: EnvInfo, seed: int):
        ContinuousAgent.__init__(self, learner, config, env, seed, NumpyRecurrentSAC(learner.actor, learner.critics))

    @staticmethod
    def _new_replay(config: SACConfig, env: EnvInfo, seed: int) -> SequenceReplay:
        observations = env.observations
        return SequenceReplay(config.replay_capacity, config.num_envs, observations.row_shape, 6 * config.lstm_units,
                              seed, burn_in=config.burn_in, sequence_length=config.sequence_length, n_step=1,
                              gamma=config.gamma, obs_dtype=observations.numpy_dtype,
                              action_shape=(env.action_size,), action_dtype=np.float32)

    def acting_factory(self):
        return functools.partial(RecurrentSACActing, env=self._env_info, config=self.config)

    def train(self, env_step: int) -> None:
        """A train call on windows: their raw observations normalized with this call's statistics, and the noise of
        the actions sampled at the bootstrap rows and the trained rows [K, C, L, D]."""
        if not self.training.due(env_step):
            return
        windows = self.training.sample()
        windows["obs"] = self._obs_normalizer(windows["obs"])
        for name in self.NOISE_FIELDS:
            windows[name] = self._noise_rng.standard_normal((*windows["action"].shape,)).astype(np.float32)
        self.training.run(windows)

    @property
    def greedy(self) -> StatefulPolicy:
        """A fresh policy with one actor state per row, zeros first (the loop's evaluation resets it)."""
        return self.acting.greedy(self._obs_normalizer, self.config.lstm_units)

    @classmethod
    def check_runtime(cls, config, runtime) -> None:
        """Its windows split evenly over the replicas, and found in every worker's replay at the first train call
        (tfrl.agents.off_policy.training.check_windows)."""
        check_windows(cls.NAME, config, runtime)

"""DQN with memory (lstm_units > 0), R2D2-style (Kapturowski et al. 2019): the network's step in NumPy for the
actor, its pass along stored windows for the learner, and acting with one state per env.

Acting keeps one LSTM state per env, zeroed where an episode starts, and stores every row with the state it read
(tfrl.replay.sequences). The learner runs the online and the target network along each sampled window from the
first row's stored state: the burn_in rows only warm the state (no gradient flows into them), and the
sequence_length rows after them are trained on, each towards its n-step target inside the window:

    state_t = (1 - start_t) * state_{t-1}            (state_{-1}: the stored state of the window's first row)
    q_t, state_{t+1} = Q(obs_t, state_t)
    target_t = return_t + discount_t * Q_target(row b_t)[a*],  a* = argmax Q_online(row b_t) (double DQN)
"""

from __future__ import annotations

import numpy as np

from tfrl.agents.dqn.actor import EpsilonGreedyActor, epsilon_schedule, masked_argmax
from tfrl.agents.dqn.config import DQNConfig
from tfrl.agents.dqn.networks import LSTM_LAYER
from tfrl.envs.observations import legal_actions
from tfrl.lazy_import import LazyModule
from tfrl.models import numpy_networks
from tfrl.models.lstm import GraphStep, LSTMAlong, NumpyLSTM

dqn_networks = LazyModule("tfrl.agents.dqn.networks")
networks = LazyModule("tfrl.models.networks")
tf = LazyModule("tensorflow")


class NumpyRecurrentQ:
    """A recurrent_q_network's step in NumPy: (obs [N, ...], state [N, 2U]) -> (Q-values [N, A], next state)."""

    def __init__(self, model):
        self._mirror = mirror = numpy_networks.NumpyMirror(model)
        self._torso = mirror.names("torso")
        self._dueling = mirror.has("value_head")

    def update(self, values) -> None:
        self._mirror.update(values)

    def __call__(self, obs: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mirror = self._mirror
        x = mirror.chain(self._torso, numpy_networks.numpy_input(obs))
        h, c = np.split(state, 2, axis=-1)
        h, c = NumpyLSTM.step(*mirror.lstm(LSTM_LAYER), x, h, c)
        if self._dueling:
            value, advantage = mirror.dense("value_head", h), mirror.dense("advantage_head", h)
            q = value + advantage - advantage.mean(axis=-1, keepdims=True)
        else:
            q = mirror.dense("q_head", h)
        return q, np.concatenate([h, c], axis=-1).astype(np.float32)


def acting_network(model):
    """NumpyRecurrentQ(model) when it has no convolutions, else the live model (GraphStep)."""
    return NumpyRecurrentQ(model) if networks.acts_in_numpy(model) else GraphStep(model)


class SequenceQ:
    """A recurrent_q_network run along windows in the graph (the learner's pass): (obs [C, W, ...], state [C, 2U],
    start [C, W]) -> Q-values [C, W - burn_in, A] of the rows after the burn-in (tfrl.models.lstm.LSTMAlong)."""

    def __init__(self, model, burn_in: int):
        self._along = LSTMAlong(model, burn_in, LSTM_LAYER)
        self._head = dqn_networks.head_layers(model)

    def __call__(self, obs, state, start, training: bool = False):
        h = self._along(obs, state, start, training)  # [C, T, U]
        q = dqn_networks.apply_head(self._head, tf.reshape(h, [-1, h.shape[-1]]))
        return tf.reshape(q, [tf.shape(h)[0], -1, q.shape[-1]])


class RecurrentDQNActing:
    """DQN's side of a vector step with memory: epsilon-greedy actions on (obs, each env's state), then the rows of
    each env for tfrl.replay.sequences.SequenceReplay.add. In the learner's process only."""

    def __init__(self, network, num_envs: int, seed: int, *, config: DQNConfig, num_actions: int):
        self._network = network  # (obs, state) -> (Q-values, next state)
        self.actor = EpsilonGreedyActor(None, num_actions, seed=seed)
        self._epsilon = epsilon_schedule(config)
        self._state = np.zeros((num_envs, 2 * config.lstm_units), np.float32)
        self._starting = np.ones(num_envs, bool)  # the next row of each env starts an episode

    @property
    def rng(self) -> np.random.Generator:
        return self.actor.rng

    def use(self, network) -> None:
        self._network = network

    def step(self, env, env_step: int, obs_normalizer=None, observe=None):
        """One vector step of `env` (a VectorStepper) -> the arguments of SequenceReplay.add."""
        del obs_normalizer, observe
        state = np.where(self._starting[:, None], np.float32(0), self._state)
        q, next_state = self._network(env.obs, state)
        step = env.step(self.actor.choose(q, env.obs, self._epsilon.at(env_step)))
        starting, self._state, self._starting = self._starting, next_state, step.done.copy()
        return (step.obs, state, step.action, step.reward, starting, step.terminated, step.truncated,
                step.final_obs(), next_state)

    def greedy_step(self, obs: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The evaluated policy's step: (argmax over the legal actions [N], next state [N, 2U])."""
        q, next_state = self._network(obs, state)
        return masked_argmax(q, legal_actions(obs)), next_state

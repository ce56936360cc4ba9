"""SAC with memory (lstm_units > 0): the actor and each critic read the observations with an LSTM, whose state
each carries through the episode; acting steps all three, so that the sequence replay (tfrl.replay.sequences)
stores every network's state (R2D2's stored state).

    actor:   (obs, state) -> LSTM -> hidden_sizes (ReLU) -> [mean, log std],  next state
    critic:  (obs, action, state) -> LSTM on obs -> [h, action] -> hidden_sizes (ReLU) -> Q,  next state

The LSTM reads the observations directly (sb3-contrib's MlpLstmPolicy layout, the one the PPO memory presets
use). The state of one env: [actor (h, c) | critic 1 (h, c) | critic 2 (h, c)], float32 [N, 6U]; the exported
policy carries the actor's part [N, 2U] only. The learner runs every network along the sampled windows from its
stored state (the target critics from their critics'), and SAC's losses are those of tfrl.agents.sac.learning
on the trained rows that have an action, with the next state's row as the bootstrap:

    y_t = r_t + discount_t * (min_i Q'_i(h'_i,t+1, a') - alpha log pi(a' | h_pi,t+1)),   a' ~ pi(. | h_pi,t+1)
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tfrl.agents.off_policy.continuous import to_env_action
from tfrl.agents.sac.explorer import LOG_STD_MAX, LOG_STD_MIN
from tfrl.lazy_import import LazyModule
from tfrl.models import numpy_networks
from tfrl.models.lstm import STATE_INPUT, LSTMAlong, NumpyLSTM
from tfrl.models.policy_memory import StatefulPolicy

keras = LazyModule("keras")
networks = LazyModule("tfrl.models.networks")
tf = LazyModule("tensorflow")

LSTM_LAYER = "lstm"
POST = "post"  # the Dense layers after the LSTM: post_0, post_1, ...


def recurrent_actor(observations, action_size: int, hidden_sizes: Sequence[int], lstm_units: int,
                    name: str = "sac_actor", layer_init: str = "glorot"):
    """[obs [B, ...], state [B, 2U]] -> ([mean, log std] [B, 2D], next state [B, 2U]), float32."""
    obs, x = networks.observation_input(observations, "float32", "mlp")
    out, next_state, state = _lstm(x, lstm_units)
    out = networks.mlp_torso(out, hidden_sizes, "relu", name=POST, layer_init=layer_init)
    mean, log_std = (keras.layers.Dense(action_size, name=head, dtype="float32",
                                        **networks.dense_initializers(layer_init, out.shape[-1]))(out)
                     for head in ("mean_head", "log_std_head"))
    return keras.Model([obs, state], (keras.ops.concatenate([mean, log_std], axis=-1), next_state), name=name)


def recurrent_critic(observations, action_size: int, hidden_sizes: Sequence[int], lstm_units: int, name: str,
                     layer_init: str = "glorot"):
    """[obs [B, ...], action [B, D], state [B, 2U]] -> (Q [B], next state [B, 2U]), float32."""
    obs, x = networks.observation_input(observations, "float32", "mlp")
    action = keras.Input(shape=(action_size,), name="action", dtype="float32")
    out, next_state, state = _lstm(x, lstm_units)
    out = keras.layers.Concatenate(name="h_action")([out, action])
    out = networks.mlp_torso(out, hidden_sizes, "relu", name=POST, layer_init=layer_init)
    q = keras.layers.Dense(1, name="q_head", dtype="float32", **networks.dense_initializers(layer_init,
                                                                                          out.shape[-1]))(out)
    return keras.Model([obs, action, state], (keras.ops.squeeze(q, axis=-1), next_state), name=name)


def _lstm(x, lstm_units: int):
    state = keras.Input((2 * lstm_units,), name=STATE_INPUT, dtype="float32")
    h, c = keras.ops.split(state, 2, axis=-1)
    out, (h, c) = keras.layers.LSTMCell(lstm_units, name=LSTM_LAYER, dtype="float32")(x, [h, c])
    return out, keras.ops.concatenate([h, c], axis=-1), state


def _post_layers(model) -> list:
    return [layer for layer in model.layers if layer.name.rsplit("_", 1)[0] == POST]


class ActorAlong:
    """A recurrent_actor along windows: (obs [C, W, ...], state [C, 2U], start [C, W]) -> (mean, log std), each
    [C, W - burn_in, D]."""

    def __init__(self, model, burn_in: int):
        self._along = LSTMAlong(model, burn_in, LSTM_LAYER)
        self._post = _post_layers(model)
        self._heads = model.get_layer("mean_head"), model.get_layer("log_std_head")

    def __call__(self, obs, state, start, training: bool = False):
        h = self._along(obs, state, start, training)
        x = tf.reshape(h, [-1, h.shape[-1]])
        for layer in self._post:
            x = layer(x)
        return tuple(tf.reshape(head(x), [tf.shape(h)[0], tf.shape(h)[1], head.units]) for head in self._heads)


class CriticAlong:
    """A recurrent_critic along windows: `states(obs, state, start)` -> h [C, W - burn_in, U]; `q(h, action)` ->
    Q [R] for rows h [R, U] and actions [R, D]."""

    def __init__(self, model, burn_in: int):
        self.states = LSTMAlong(model, burn_in, LSTM_LAYER)
        self._post = _post_layers(model)
        self._head = model.get_layer("q_head")

    def q(self, h, action):
        x = tf.concat([h, action], axis=-1)
        for layer in self._post:
            x = layer(x)
        return tf.squeeze(self._head(x), axis=-1)


class NumpyRecurrentSAC:
    """The actor's step in NumPy and the critics' LSTM steps: (obs [N, ...], state [N, 6U]) -> ((mean, log std)
    [N, D] each, next state [N, 6U]). update(values) takes the learner's acting variables: the actor's trainable
    variables, then each critic's LSTM (kernel, recurrent kernel, bias)."""

    def __init__(self, actor, critics):
        self._actor = numpy_networks.NumpyMirror(actor)
        self._size = len(actor.trainable_variables)
        self._post = self._actor.names(POST)
        self.update(acting_variables(actor, critics))

    def update(self, values) -> None:
        values = [np.asarray(v, np.float32) for v in values]
        self._actor.update(values[:self._size])
        cells = values[self._size:]
        self._critic_cells = [cells[i:i + 3] for i in range(0, len(cells), 3)]

    def actor_step(self, obs: np.ndarray, state: np.ndarray):
        """((mean, log std), next actor state [N, 2U]) from the actor's state [N, 2U]."""
        h, c = NumpyLSTM.step(*self._actor.lstm(LSTM_LAYER), numpy_networks.numpy_input(obs),
                              *np.split(state, 2, axis=-1))
        x = self._actor.chain(self._post, h)
        return (self._actor.dense("mean_head", x), self._actor.dense("log_std_head", x)), \
            np.concatenate([h, c], axis=-1).astype(np.float32)

    def __call__(self, obs: np.ndarray, state: np.ndarray):
        parts = np.split(state, 1 + len(self._critic_cells), axis=-1)
        outputs, actor_state = self.actor_step(obs, parts[0])
        x, states = numpy_networks.numpy_input(obs), [actor_state]
        for cell, part in zip(self._critic_cells, parts[1:]):
            states.append(np.concatenate(NumpyLSTM.step(*cell, x, *np.split(part, 2, axis=-1)), axis=-1))
        return outputs, np.concatenate(states, axis=-1).astype(np.float32)


def acting_variables(actor, critics) -> list:
    """What the acting mirror reads: the actor's trainable variables, then each critic's LSTM weights."""
    cells = [critic.get_layer(LSTM_LAYER) for critic in critics]
    return [*actor.trainable_variables, *[w for cell in cells for w in (cell.kernel, cell.recurrent_kernel,
                                                                         cell.bias)]]


class RecurrentSACActing:
    """SAC's side of a vector step with memory: uniform actions before learning_starts (the states still step),
    then tanh(mean + std * noise) of the actor's step; the rows for SequenceReplay.add (raw observations)."""

    def __init__(self, mirror: NumpyRecurrentSAC, num_envs: int, seed: int, *, env, config):
        self._mirror = mirror
        self.rng = np.random.default_rng(seed)
        self._low, self._high = (np.asarray(b, np.float32).reshape(env.action_size)
                                 for b in (env.action_low, env.action_high))
        self._action_shape = tuple(env.action_shape)
        self._learning_starts = config.learning_starts
        self._state = np.zeros((num_envs, 6 * config.lstm_units), np.float32)
        self._starting = np.ones(num_envs, bool)

    def use(self, mirror) -> None:
        self._mirror = mirror

    def env_action(self, squashed: np.ndarray) -> np.ndarray:
        return to_env_action(squashed, self._low, self._high).reshape(len(squashed), *self._action_shape)

    def step(self, env, env_step: int, obs_normalizer, observe=None):
        del observe
        obs = obs_normalizer.observe(env.obs)
        state = np.where(self._starting[:, None], np.float32(0), self._state)
        (mean, log_std), next_state = self._mirror(obs, state)
        if env_step < self._learning_starts:
            squashed = self.rng.uniform(-1.0, 1.0, mean.shape).astype(np.float32)
        else:
            std = np.exp(np.clip(log_std, LOG_STD_MIN, LOG_STD_MAX))
            squashed = np.tanh(mean + std * self.rng.standard_normal(mean.shape)).astype(np.float32)
        step = env.step(self.env_action(squashed))
        starting, self._state, self._starting = self._starting, next_state, step.done.copy()
        return (step.obs, state, squashed, step.reward, starting, step.terminated, step.truncated, step.final_obs(),
                next_state)

    def greedy(self, obs_normalizer, lstm_units: int) -> StatefulPolicy:
        """The evaluated policy: tanh(mean) of the actor's step, its state [N, 2U] kept per row."""
        def step(obs, state):
            (mean, _), next_state = self._mirror.actor_step(obs_normalizer(obs), state)
            return self.env_action(np.tanh(mean)), next_state

        return StatefulPolicy(step, 2 * lstm_units)

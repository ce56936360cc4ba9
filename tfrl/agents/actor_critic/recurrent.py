"""Memory for A2C and PPO (lstm_units > 0): an LSTM after the torso (hidden_sizes, possibly none) and before the
heads (after post_lstm_sizes Dense layers, possibly none), its NumPy mirror, and training on whole sequences of a
rollout.

The network is one step: (observation, state) -> (policy params, value, next state). The state is float32
[B, state_size]: (h, c) of each LSTM side by side, one LSTM shared by the policy and the value (shared_torso) or
one each ("policy_lstm", "value_lstm": [h_pi, c_pi, h_v, c_v]). Zeros start an episode.

Acting keeps one state per env and zeroes it where an episode starts; the rollout stores, for every step, the
state the actor had (after that reset) and whether an episode started there. Training cuts each env's rollout
into sequences of sequence_length consecutive steps, starts each from its stored state and runs the LSTM along it,
zeroing the state again where an episode starts inside it:

    state_t = (1 - start_t) * state_{t-1}  (state_{-1}: the stored state of the sequence's first step)
    latent_t, state_{t+1} = LSTM(torso(obs_t), state_t)

so that the first epoch of a PPO update replays exactly the actor's computation (the tests check it).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tfrl.envs.observations import ObsSpec
from tfrl.lazy_import import LazyModule
from tfrl.models import numpy_networks
from tfrl.models.lstm import STATE_INPUT, GraphStep, NumpyLSTM, input_gates, lstm_step

# The network and its graph forward passes use Keras and TensorFlow; NumpyRecurrentActorCritic, which a rollout
# actor receives, must not load them.
keras = LazyModule("keras")
feedforward = LazyModule("tfrl.agents.actor_critic.feedforward")
networks = LazyModule("tfrl.models.networks")
tf = LazyModule("tensorflow")


def branches(shared_torso: bool) -> tuple[str, ...]:
    """The LSTMs, by layer name, in the order their (h, c) sit in the state."""
    return ("lstm",) if shared_torso else ("policy_lstm", "value_lstm")


def torso_prefixes(shared_torso: bool) -> tuple[str, ...]:
    """The torsos' Dense layer name prefixes (tfrl.agents.actor_critic.feedforward.dense_chain), in the order of branches()."""
    return ("torso",) if shared_torso else ("policy_torso", "value_torso")


def state_size(lstm_units: int, shared_torso: bool) -> int:
    """Floats of one env's state: h and c of every LSTM."""
    return 2 * lstm_units * len(branches(shared_torso))


def state_size_of(config) -> int:
    """An actor-critic config's state size: 0 without memory (lstm_units = 0)."""
    return state_size(config.lstm_units, config.shared_torso)


def post_prefix(torso_prefix: str) -> str:
    """The name prefix of the Dense layers between a torso's LSTM and its head."""
    return f"{torso_prefix}_post"


def recurrent_actor_critic_network(observations: ObsSpec, num_policy_params: int, hidden_sizes: Sequence[int],
                                   lstm_units: int, activation: str = "tanh", shared_torso: bool = False,
                                   log_std_size: int = 0, torso: str = "mlp", post_lstm_sizes: Sequence[int] = (),
                                   name: str = "recurrent_actor_critic", layer_init: str = "orthogonal",
                                   log_std_init: float = 0.0) -> keras.Model:
    """[observation, state [B, S]] -> (policy params [B, P], value [B], next state [B, S]), float32.

    The torsos and heads are those of tfrl.agents.actor_critic.feedforward.actor_critic_network (same names and initialization); an
    LSTMCell of lstm_units (float32 under every precision: the state crosses the export) sits after each torso
    (hidden_sizes may be empty: the LSTM reads the observation features), followed by Dense layers of
    post_lstm_sizes (<torso prefix>_post_<i>, initialized as the torso's) before the head.
    """
    obs, x = networks.observation_input(
        observations, "float32", torso, lambda fan_in: networks.dense_initializers(layer_init, fan_in, np.sqrt(2.0)))
    state = keras.Input((state_size(lstm_units, shared_torso),), name=STATE_INPUT, dtype="float32")
    prefixes = torso_prefixes(shared_torso)
    parts = keras.ops.split(state, 2 * len(prefixes), axis=-1)
    outputs, next_state = [], []
    for i, (prefix, cell_name) in enumerate(zip(prefixes, branches(shared_torso))):
        latent = feedforward.dense_chain(x, hidden_sizes, activation, prefix, layer_init)
        cell = keras.layers.LSTMCell(lstm_units, name=cell_name, dtype="float32")
        out, (h, c) = cell(latent, [parts[2 * i], parts[2 * i + 1]])
        outputs.append(feedforward.dense_chain(out, post_lstm_sizes, activation, post_prefix(prefix), layer_init))
        next_state += [h, c]
    policy_params, value = feedforward.actor_critic_heads(outputs[0], outputs[-1], num_policy_params, log_std_size,
                                                       layer_init, log_std_init)
    return keras.Model([obs, state], (policy_params, value, keras.ops.concatenate(next_state, axis=-1)), name=name)


class SequenceForward:
    """The step network run along whole sequences, in the graph (the learners' training forward pass).

    __call__(obs [R, ...], states [R, S], starts [R]) with R = C * L rows: C sequences of L consecutive steps of one
    env each, row c * L + t being step t of sequence c -> (policy params [R, P], values [R]). Only the stored state
    of each sequence's first row is read. The torsos, the LSTMs' input projections and the heads run on all R rows
    at once; only the recurrent half of the LSTM steps through time (tf.scan).
    """

    def __init__(self, model: keras.Model, sequence_length: int, shared_torso: bool):
        self._length = sequence_length
        cells = branches(shared_torso)
        self._cells = [model.get_layer(name) for name in cells]
        prefixes = torso_prefixes(shared_torso)
        # model.input is [observation(s), state]; model.inputs would flatten a Dict observation's fields.
        self._encoder = keras.Model(model.input[0], [lstm_input(cell) for cell in self._cells])
        self._post = [[model.get_layer(name) for name in dense_names(model, post_prefix(prefix))]
                      for prefix in prefixes]
        self._policy_head = model.get_layer("policy_head")
        self._log_std = _layer_or_none(model, "log_std")
        self._value_head = model.get_layer("value_head")

    def __call__(self, obs, states, starts):
        latents = self._encoder(networks.network_input(obs), training=True)
        latents = latents if isinstance(latents, (list, tuple)) else [latents]
        length = self._length
        keep = tf.transpose(1.0 - tf.reshape(starts, [-1, length]))[..., None]  # [L, C, 1]
        first = tf.reshape(states, [-1, length, states.shape[-1]])[:, 0]  # [C, S]
        initial = tuple(tf.split(first, 2 * len(self._cells), axis=-1))  # (h, c) of each LSTM
        # The input half of every gate, x W + b, for all steps in one matmul; only h U steps through time.
        projected = [input_gates(cell, x, length) for cell, x in zip(self._cells, latents)]  # each [L, C, 4U]

        def step(carry, inputs):
            *gates, keep_t = inputs
            new = []
            for i, (cell, gate) in enumerate(zip(self._cells, gates)):
                new += lstm_step(gate, carry[2 * i] * keep_t, carry[2 * i + 1] * keep_t, cell.recurrent_kernel)
            return tuple(new)

        history = tf.scan(step, (*projected, keep), initializer=initial)  # each [L, C, U]
        hs = [run_chain(post, tf.reshape(tf.transpose(history[2 * i], [1, 0, 2]), [-1, history[2 * i].shape[-1]]))
              for i, post in enumerate(self._post)]
        params = self._policy_head(hs[0])
        if self._log_std is not None:
            params = self._log_std(params)
        return params, tf.squeeze(self._value_head(hs[-1]), axis=-1)


def lstm_input(cell: keras.layers.LSTMCell):
    """The tensor an LSTMCell of the step network reads: its torso's output, or the observation features."""
    return cell.input[0]  # the cell's inputs are (x, h, c)


def dense_names(model: keras.Model, prefix: str) -> list[str]:
    """The model's layers named <prefix>_<i>, in order."""
    return [layer.name for layer in model.layers if layer.name.rsplit("_", 1)[0] == prefix]


def run_chain(layers, x):
    for layer in layers:
        x = layer(x)
    return x


def _layer_or_none(model: keras.Model, name: str):
    try:
        return model.get_layer(name)
    except ValueError:
        return None


def sequence_rows(rollout_length: int, num_envs: int, sequence_length: int) -> np.ndarray:
    """[K * N, L] int32: the rows (t * N + n, a Rollout's order) of each sequence, in time order; each env's
    rollout_length steps are cut into K = rollout_length / L sequences."""
    k = np.arange(rollout_length // sequence_length)
    t = (k * sequence_length)[:, None, None] + np.arange(sequence_length)[None, None, :]  # [K, 1, L]
    rows = t * num_envs + np.arange(num_envs)[None, :, None]  # [K, N, L]
    return rows.reshape(-1, sequence_length).astype(np.int32)


def sequence_minibatches(seed: int, update: int, n_epochs: int, rollout_length: int, num_envs: int,
                         sequence_length: int, batch_size: int) -> np.ndarray:
    """[n_epochs * T * N / batch_size, batch_size] int32 rows: each epoch a fresh permutation of the rollout's
    sequences (sequence_rows), batch_size / L whole sequences per minibatch, each in time order. Keyed by (seed,
    update) as tfrl.agents.ppo.learning.minibatch_indices."""
    rng = np.random.default_rng([seed, update])
    rows = sequence_rows(rollout_length, num_envs, sequence_length)
    return np.concatenate([rows[rng.permutation(len(rows))] for _ in range(n_epochs)]).reshape(-1, batch_size)


class NumpyRecurrentActorCritic:
    """A recurrent_actor_critic_network's step in NumPy: (obs [N, ...], state [N, S]) -> (policy params [N, P],
    value [N], next state [N, S])."""

    def __init__(self, model: keras.Model):
        self._mirror = mirror = numpy_networks.NumpyMirror(model)
        shared = mirror.has_lstm("lstm")
        self._cells = branches(shared)
        prefixes = torso_prefixes(shared)
        self._torsos = [mirror.names(prefix) for prefix in prefixes]
        self._post = [mirror.names(post_prefix(prefix)) for prefix in prefixes]
        self._gaussian = mirror.has("log_std")

    def update(self, values) -> None:
        self._mirror.update(values)

    def __call__(self, obs: np.ndarray, state: np.ndarray):
        mirror = self._mirror
        x = numpy_networks.numpy_input(obs)
        parts = np.split(state, 2 * len(self._cells), axis=-1)
        outputs, next_state = [], []
        for i, (cell, torso, post) in enumerate(zip(self._cells, self._torsos, self._post)):
            h, c = NumpyLSTM.step(*mirror.lstm(cell), mirror.chain(torso, x), parts[2 * i], parts[2 * i + 1])
            outputs.append(mirror.chain(post, h))
            next_state += [h, c]
        policy = mirror.dense("policy_head", outputs[0])
        if self._gaussian:
            log_std = mirror.weight("log_std")  # [D]: the last D params (a hybrid head has logits before)
            policy = np.concatenate([policy, np.broadcast_to(log_std, (len(policy), len(log_std)))], axis=-1)
        value = mirror.dense("value_head", outputs[-1])[:, 0]
        return policy, value, np.concatenate(next_state, axis=-1).astype(np.float32)


def acting_network(model: keras.Model):
    """NumpyRecurrentActorCritic(model) when it has no convolutions, else GraphStep(model)."""
    return NumpyRecurrentActorCritic(model) if networks.acts_in_numpy(model) else GraphStep(model)

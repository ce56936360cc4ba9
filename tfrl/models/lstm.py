"""The LSTM step every network with memory shares (A2C's, PPO's, DQN's, SAC's), as keras.layers.LSTMCell computes it:

    z = x W + h U + b;  i, f, g, o = split(z, 4);  c' = sigmoid(f) c + sigmoid(i) tanh(g);  h' = sigmoid(o) tanh(c')

in the graph (a training pass along stored sequences, where x W + b is computed for all steps at once and only h U
steps through time) and in NumPy (the actors). The state of one LSTM is (h, c) side by side, float32 [B, 2U].
"""

from __future__ import annotations

import numpy as np

from tfrl.lazy_import import LazyModule

# The NumPy step, which a rollout actor runs, must not load TensorFlow or Keras.
keras = LazyModule("keras")
networks = LazyModule("tfrl.models.networks")
tf = LazyModule("tensorflow")

STATE_INPUT = "state"  # the step networks' and the exports' state input (and output) name


def lstm_step(gates, h, c, recurrent_kernel) -> list:
    """[h', c'] of keras.layers.LSTMCell, given its input half x W + b of the gates [C, 4U]."""
    i, f, g, o = tf.split(gates + tf.matmul(h, recurrent_kernel), 4, axis=-1)
    c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
    return [tf.sigmoid(o) * tf.tanh(c), c]


def input_gates(cell, x, length: int):
    """x W + b of `cell` for R = C * length rows of C sequences [R, F], time-major: [length, C, 4U]."""
    gates = tf.matmul(tf.cast(x, tf.float32), cell.kernel) + cell.bias
    return tf.transpose(tf.reshape(gates, [-1, length, 4 * cell.units]), [1, 0, 2])


class NumpyLSTM:
    """keras.layers.LSTMCell's step in NumPy."""

    @staticmethod
    def step(kernel, recurrent_kernel, bias, x, h, c):
        z = x @ kernel + h @ recurrent_kernel + bias
        i, f, g, o = np.split(z, 4, axis=-1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        return _sigmoid(o) * np.tanh(c), c


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


class GraphStep:
    """A step network's forward pass, (obs, state) -> its outputs, as one TF call per batch: the acting stand-in for
    a recurrent network with convolutions (as tfrl.models.networks.GraphForward). It reads the learner's variables:
    `update` has nothing to copy."""

    def __init__(self, model):
        obs_input = model.input[0]
        spec = [tf.nest.map_structure(lambda x: tf.TensorSpec([None, *x.shape[1:]], x.dtype), obs_input),
                tf.TensorSpec([None, model.input[1].shape[-1]], tf.float32)]
        self._structured = isinstance(obs_input, dict)
        self._forward = tf.function(lambda obs, state: model([obs, state]),
                                    input_signature=spec).get_concrete_function()
        self._keys = list(obs_input) if self._structured else None

    def update(self, values) -> None:
        del values

    def __call__(self, obs: np.ndarray, state: np.ndarray):
        obs = {key: tf.constant(obs[key]) for key in self._keys} if self._structured else tf.constant(obs)
        return tuple(out.numpy() for out in self._forward(obs, tf.constant(state, tf.float32)))


class LSTMAlong:
    """The LSTMCell `layer_name` of a step network (inputs [observation(s), ..., state]; the cell reads the
    observation features, directly or after a torso) run along stored windows in the graph: a learner's pass.

    __call__(obs [C, W, ...], state [C, 2U], start [C, W]) -> h [C, W - burn_in, U] of the rows after the burn-in:
    state_t = (1 - start_t) * state_{t-1} from the window's first row's stored state. The features and the input
    half of the gates run on all rows at once; only h U steps through time (tf.scan). The burn-in's final state is
    a constant to the gradient (R2D2's burn-in only warms the state).
    """

    def __init__(self, model, burn_in: int, layer_name: str = "lstm"):
        self._burn_in = burn_in
        self.cell = model.get_layer(layer_name)
        self._encoder = keras.Model(model.input[0], self.cell.input[0])  # the cell's inputs are (x, h, c)

    def __call__(self, obs, state, start, training: bool = False):
        x = self._encoder(networks.network_input(networks.merge_leading(obs)), training=training)
        gates = input_gates(self.cell, x, tf.shape(start)[1])  # [W, C, 4U]
        keep = tf.transpose(1.0 - start)[..., None]  # [W, C, 1]
        carry = tuple(tf.split(state, 2, axis=-1))
        if self._burn_in:
            warmed = tf.scan(self._step, (gates[:self._burn_in], keep[:self._burn_in]), initializer=carry)
            carry = tuple(tf.stop_gradient(part[-1]) for part in warmed)
        h = tf.scan(self._step, (gates[self._burn_in:], keep[self._burn_in:]), initializer=carry)[0]  # [T, C, U]
        return tf.transpose(h, [1, 0, 2])

    def _step(self, carry, inputs):
        gates, keep_t = inputs
        return tuple(lstm_step(gates, carry[0] * keep_t, carry[1] * keep_t, self.cell.recurrent_kernel))

"""DQN's Q-networks (plain or dueling, with or without memory) on tfrl.models.networks' observation inputs and
torsos."""

from __future__ import annotations

from typing import Sequence

import keras

from tfrl.envs.observations import ObsSpec
from tfrl.models.lstm import STATE_INPUT
from tfrl.models.networks import dense_initializers, mlp_torso, observation_input

LSTM_LAYER = "lstm"


def q_network(obs_shape: Sequence[int] | ObsSpec, num_actions: int, hidden_sizes: Sequence[int],
              dueling: bool = False, name: str = "q_network", layer_init: str = "glorot",
              obs_dtype: str = "float32", torso: str = "mlp") -> keras.Model:
    """obs [B, *obs_shape] -> Q-values [B, num_actions], always float32 (also under a mixed precision policy).
    torso: a resolved one (resolved_torso)."""
    obs, x = observation_input(obs_shape, obs_dtype, torso, lambda fan_in: dense_initializers(layer_init, fan_in))
    x = mlp_torso(x, hidden_sizes, "relu", layer_init=layer_init)
    return keras.Model(obs, q_head(x, num_actions, dueling, layer_init), name=name)


def recurrent_q_network(observations: ObsSpec, num_actions: int, hidden_sizes: Sequence[int], lstm_units: int,
                        dueling: bool = False, name: str = "recurrent_q_network", layer_init: str = "glorot",
                        torso: str = "mlp") -> keras.Model:
    """[obs [B, ...], state [B, 2U]] -> (Q-values [B, A], next state [B, 2U]), float32: q_network's torso, an
    LSTMCell of lstm_units (float32 under every precision: the state crosses the export; its state is (h, c) side
    by side, zeros at an episode's start), then q_network's head."""
    obs, x = observation_input(observations, "float32", torso, lambda fan_in: dense_initializers(layer_init, fan_in))
    x = mlp_torso(x, hidden_sizes, "relu", layer_init=layer_init)
    state = keras.Input((2 * lstm_units,), name=STATE_INPUT, dtype="float32")
    h, c = keras.ops.split(state, 2, axis=-1)
    out, (h, c) = keras.layers.LSTMCell(lstm_units, name=LSTM_LAYER, dtype="float32")(x, [h, c])
    q = q_head(out, num_actions, dueling, layer_init)
    return keras.Model([obs, state], (q, keras.ops.concatenate([h, c], axis=-1)), name=name)


def q_head(x, num_actions: int, dueling: bool, layer_init: str):
    """features [B, F] -> Q-values [B, A] (float32): one Dense layer "q_head", or the dueling pair."""
    def initializers():  # fresh ones for each layer: a Keras initializer draws the same values at every call
        return dense_initializers(layer_init, x.shape[-1])

    if not dueling:
        return keras.layers.Dense(num_actions, name="q_head", dtype="float32", **initializers())(x)
    # Wang et al. 2016, eq. 9: subtracting the mean advantage makes V and A identifiable.
    value = keras.layers.Dense(1, name="value_head", dtype="float32", **initializers())(x)  # [B, 1]
    advantage = keras.layers.Dense(num_actions, name="advantage_head", dtype="float32", **initializers())(x)
    return value + advantage - keras.ops.mean(advantage, axis=-1, keepdims=True)


def head_layers(model: keras.Model) -> tuple:
    """A Q-network's head layers by role: (q_head,) or (value_head, advantage_head)."""
    names = [layer.name for layer in model.layers]
    return tuple(model.get_layer(name) for name in (("q_head",) if "q_head" in names
                                                    else ("value_head", "advantage_head")))


def apply_head(layers: tuple, x):
    """head_layers' Q-values of features x [R, F] (the graph pass along sequences)."""
    if len(layers) == 1:
        return layers[0](x)
    value, advantage = layers[0](x), layers[1](x)
    return value + advantage - keras.ops.mean(advantage, axis=-1, keepdims=True)

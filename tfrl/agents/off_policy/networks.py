"""The continuous-action Q critic of SAC and TD3."""

from __future__ import annotations

from typing import Sequence

import keras

from tfrl.envs.observations import ObsSpec
from tfrl.models.networks import dense_initializers, mlp_torso, observation_input


def q_critic(obs_shape: Sequence[int] | ObsSpec, action_size: int, hidden_sizes: Sequence[int], name: str,
             layer_init: str = "glorot", num_outputs: int = 1) -> keras.Model:
    """A continuous-action critic: (obs [B, *obs_shape], action [B, D]) -> Q(s, a) [B] (ReLU torso), or with
    num_outputs > 1 that many values [B, num_outputs] (TQC's quantiles of the return)."""
    obs, x = observation_input(obs_shape, "float32", "mlp")
    action = keras.Input(shape=(action_size,), name="action", dtype="float32")
    x = mlp_torso(keras.layers.Concatenate(name="obs_action")([x, action]), hidden_sizes, "relu",
                  layer_init=layer_init)
    q = keras.layers.Dense(num_outputs, name="q_head", dtype="float32",
                           **dense_initializers(layer_init, x.shape[-1]))(x)
    return keras.Model([obs, action], keras.ops.squeeze(q, axis=-1) if num_outputs == 1 else q, name=name)

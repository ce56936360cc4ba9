"""TD3's deterministic actor."""

from __future__ import annotations

from typing import Sequence

import keras

from tfrl.envs.observations import ObsSpec
from tfrl.models.networks import dense_initializers, mlp_torso, observation_input


def deterministic_actor(obs_shape: Sequence[int] | ObsSpec, action_size: int, hidden_sizes: Sequence[int],
                        name: str = "td3_actor", layer_init: str = "glorot") -> keras.Model:
    """TD3's actor: obs [B, *obs_shape] -> action in [-1, 1]^D [B, D] (ReLU torso, tanh head "action_head")."""
    obs, x = observation_input(obs_shape, "float32", "mlp")
    x = mlp_torso(x, hidden_sizes, "relu", layer_init=layer_init)
    action = keras.layers.Dense(action_size, activation="tanh", name="action_head", dtype="float32",
                                **dense_initializers(layer_init, x.shape[-1]))(x)
    return keras.Model(obs, action, name=name)

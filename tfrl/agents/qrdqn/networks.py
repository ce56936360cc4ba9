"""QR-DQN's quantile network: DQN's inputs and torso, and a head of num_actions x num_quantiles outputs."""

from __future__ import annotations

from typing import Sequence

import keras

from tfrl.envs.observations import ObsSpec
from tfrl.models.networks import dense_initializers, mlp_torso, observation_input


def quantile_network(obs_shape: Sequence[int] | ObsSpec, num_actions: int, num_quantiles: int,
                     hidden_sizes: Sequence[int], name: str = "quantile_network", layer_init: str = "glorot",
                     obs_dtype: str = "float32", torso: str = "mlp") -> keras.Model:
    """obs [B, *obs_shape] -> quantiles [B, num_actions, num_quantiles], float32 under any precision policy.
    The head is one Dense layer named "q_head" (as DQN's), so DQN's NumPy mirror reads it: [B, A * N]."""
    obs, x = observation_input(obs_shape, obs_dtype, torso, lambda fan_in: dense_initializers(layer_init, fan_in))
    x = mlp_torso(x, hidden_sizes, "relu", layer_init=layer_init)
    flat = keras.layers.Dense(num_actions * num_quantiles, name="q_head", dtype="float32",
                              **dense_initializers(layer_init, x.shape[-1]))(x)  # [B, A * N]
    quantiles = keras.layers.Reshape((num_actions, num_quantiles), name="quantiles", dtype="float32")(flat)
    return keras.Model(obs, quantiles, name=name)

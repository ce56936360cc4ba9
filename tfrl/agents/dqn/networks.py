"""DQN's Q-network (plain or dueling) on tfrl.models.networks' observation inputs and torsos."""

from __future__ import annotations

from typing import Sequence

import keras

from tfrl.envs.observations import ObsSpec
from tfrl.models.networks import dense_initializers, mlp_torso, observation_input


def q_network(obs_shape: Sequence[int] | ObsSpec, num_actions: int, hidden_sizes: Sequence[int],
              dueling: bool = False, name: str = "q_network", layer_init: str = "glorot",
              obs_dtype: str = "float32", torso: str = "mlp") -> keras.Model:
    """obs [B, *obs_shape] -> Q-values [B, num_actions], always float32 (also under a mixed precision policy).
    torso: a resolved one (resolved_torso)."""
    obs, x = observation_input(obs_shape, obs_dtype, torso, lambda fan_in: dense_initializers(layer_init, fan_in))
    x = mlp_torso(x, hidden_sizes, "relu", layer_init=layer_init)
    def head():  # fresh initializers for each layer: a Keras initializer draws the same values at every call
        return dense_initializers(layer_init, x.shape[-1])

    if dueling:
        # Wang et al. 2016, eq. 9: subtracting the mean advantage makes V and A identifiable.
        value = keras.layers.Dense(1, name="value_head", dtype="float32", **head())(x)  # [B, 1]
        advantage = keras.layers.Dense(num_actions, name="advantage_head", dtype="float32", **head())(x)  # [B, A]
        q = value + advantage - keras.ops.mean(advantage, axis=-1, keepdims=True)
    else:
        q = keras.layers.Dense(num_actions, name="q_head", dtype="float32", **head())(x)
    return keras.Model(obs, q, name=name)

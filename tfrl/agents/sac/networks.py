"""SAC's squashed-Gaussian actor."""

from __future__ import annotations

from typing import Sequence

import keras

from tfrl.envs.observations import ObsSpec
from tfrl.models.networks import dense_initializers, mlp_torso, observation_input


def squashed_gaussian_actor(obs_shape: Sequence[int] | ObsSpec, action_size: int, hidden_sizes: Sequence[int],
                            name: str = "sac_actor", layer_init: str = "glorot") -> keras.Model:
    """SAC's actor: obs [B, *obs_shape] -> [mean, log std] [B, 2D] (ReLU torso, heads "mean_head" and
    "log_std_head"); the policy squashes mean + std * noise with tanh (tfrl.agents.sac.learning)."""
    obs, x = observation_input(obs_shape, "float32", "mlp")
    x = mlp_torso(x, hidden_sizes, "relu", layer_init=layer_init)
    # One call of dense_initializers per layer: a Keras initializer draws the same values at every call.
    mean = keras.layers.Dense(action_size, name="mean_head", dtype="float32",
                              **dense_initializers(layer_init, x.shape[-1]))(x)
    log_std = keras.layers.Dense(action_size, name="log_std_head", dtype="float32",
                                 **dense_initializers(layer_init, x.shape[-1]))(x)
    return keras.Model(obs, keras.ops.concatenate([mean, log_std], axis=-1), name=name)

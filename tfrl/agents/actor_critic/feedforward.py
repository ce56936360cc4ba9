"""The feed-forward actor-critic network (A2C, PPO): torsos, the policy and value heads, a Gaussian
policy's state-independent log std. The recurrent one (tfrl.agents.actor_critic.recurrent) shares the heads."""

from __future__ import annotations

from typing import Sequence

import keras
import numpy as np

from tfrl.envs.observations import ObsSpec
from tfrl.models.networks import dense_initializers, observation_input


class AppendLogStd(keras.layers.Layer):
    """x [B, P] -> [x, log_std] [B, P + D]: a Gaussian policy's state-independent log std [D] after its mean (and,
    for a hybrid action, the discrete parts' logits), one trainable variable (initialized to log_std_init: 0, a
    standard deviation of 1, as SB3)."""

    def __init__(self, size: int, log_std_init: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.size, self.log_std_init = size, log_std_init

    def build(self, input_shape):
        self.log_std = self.add_weight(shape=(self.size,), name="log_std",
                                       initializer=keras.initializers.Constant(self.log_std_init))

    def call(self, x):
        rows = keras.ops.shape(x)[0]
        return keras.ops.concatenate([x, keras.ops.broadcast_to(self.log_std, (rows, self.size))], axis=-1)


def actor_critic_network(obs_shape: Sequence[int] | ObsSpec, num_policy_params: int, hidden_sizes: Sequence[int],
                         activation: str = "tanh", shared_torso: bool = False, log_std_size: int = 0,
                         name: str = "actor_critic", obs_dtype: str = "float32", torso: str = "mlp",
                         layer_init: str = "orthogonal", log_std_init: float = 0.0) -> keras.Model:
    """obs [B, *obs_shape] -> (policy params [B, num_policy_params], value [B]), both float32 under every policy.

    The policy params are whatever the policy head reads (the logits [B, A] of a
    categorical head; the mean [B, D] and a state-independent log std of a Gaussian one, num_policy_params = 2D
    and log_std_size = D; a hybrid head's logits and means, then its log_std_size log stds). With `shared_torso`
    one MLP ("torso_i") feeds both heads;
    otherwise the policy and the value have their own ("policy_torso_i",
    "value_torso_i"), as SB3's default `net_arch=dict(pi=[64, 64], vf=[64, 64])`.

    A CNN torso (torso, resolved) is always shared by both heads, as in SB3's CnnPolicy; the Dense layers
    after it follow shared_torso.

    Initialization (layer_init) as in OpenAI baselines / SB3 (`ortho_init=True`): orthogonal
    kernels with gain sqrt(2) in the torsos, 0.01 for the policy head (a near-uniform
    first policy) and 1 for the value head; zero biases. "torch": PyTorch's defaults, as SB3's
    `ortho_init=False`. A Gaussian policy's log std starts at log_std_init.
    """
    obs, x = observation_input(obs_shape, obs_dtype, torso,
                               lambda fan_in: dense_initializers(layer_init, fan_in, np.sqrt(2.0)))
    if shared_torso:
        policy_latent = value_latent = dense_chain(x, hidden_sizes, activation, "torso", layer_init)
    else:
        policy_latent = dense_chain(x, hidden_sizes, activation, "policy_torso", layer_init)
        value_latent = dense_chain(x, hidden_sizes, activation, "value_torso", layer_init)
    policy_params, value = actor_critic_heads(policy_latent, value_latent, num_policy_params, log_std_size,
                                              layer_init, log_std_init)
    return keras.Model(obs, (policy_params, value), name=name)


def dense_chain(inputs, hidden_sizes: Sequence[int], activation: str, prefix: str, layer_init: str = "orthogonal"):
    """An actor-critic torso: Dense layers <prefix>_<i>, orthogonal kernels with gain sqrt(2) (layer_init)."""
    h = inputs
    for i, units in enumerate(hidden_sizes):
        h = keras.layers.Dense(units, activation=activation, name=f"{prefix}_{i}",
                               **dense_initializers(layer_init, h.shape[-1], np.sqrt(2.0)))(h)
    return h


def actor_critic_heads(policy_latent, value_latent, num_policy_params: int, log_std_size: int = 0,
                       layer_init: str = "orthogonal", log_std_init: float = 0.0):
    """(policy params [B, P], value [B]), float32: "policy_head" (gain 0.01: P - log_std_size logits and means),
    followed by log_std_size state-independent log stds ("log_std", from log_std_init), and "value_head" (gain 1)."""
    outputs = num_policy_params - log_std_size
    policy_params = keras.layers.Dense(outputs, name="policy_head", dtype="float32",
                                       **dense_initializers(layer_init, policy_latent.shape[-1], 0.01))(policy_latent)
    if log_std_size:
        policy_params = AppendLogStd(log_std_size, log_std_init, name="log_std", dtype="float32")(policy_params)
    value = keras.layers.Dense(1, name="value_head", dtype="float32",
                               **dense_initializers(layer_init, value_latent.shape[-1], 1.0))(value_latent)
    return policy_params, keras.ops.squeeze(value, axis=-1)

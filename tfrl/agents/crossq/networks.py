"""CrossQ's networks: SAC's actor and critic shapes with batch renormalization on the input and after every
hidden layer (SBX's and sb3-contrib's placement), and wider critics."""

from __future__ import annotations

from typing import Sequence

import keras

from tfrl.agents.crossq.batch_renorm import BatchRenorm
from tfrl.agents.crossq.config import CrossQConfig
from tfrl.envs.observations import ObsSpec
from tfrl.models.networks import dense_initializers, observation_input


def _renormalized_torso(x, hidden_sizes: Sequence[int], config: CrossQConfig, name: str, renorm: bool = True):
    """[BatchRenorm] then Dense(ReLU) [BatchRenorm] per hidden size; layers <name>_<i> and <name>_renorm_<i>."""
    def renormalized(x, i):
        if not renorm:
            return x
        return BatchRenorm(config.batch_norm_momentum, config.batch_norm_epsilon, config.renorm_warmup_steps,
                           name=f"{name}_renorm_{i}")(x)

    x = renormalized(x, 0)
    for i, units in enumerate(hidden_sizes):
        x = keras.layers.Dense(units, activation="relu", name=f"{name}_{i}",
                               **dense_initializers(config.layer_init, x.shape[-1]))(x)
        x = renormalized(x, i + 1)
    return x


def crossq_actor(obs_shape: Sequence[int] | ObsSpec, action_size: int, config: CrossQConfig,
                 name: str = "crossq_actor") -> keras.Model:
    """obs [B, *obs_shape] -> [mean, log std] [B, 2D], as SAC's actor (heads "mean_head", "log_std_head"), its
    torso renormalized when config.actor_batch_norm."""
    obs, x = observation_input(obs_shape, "float32", "mlp")
    x = _renormalized_torso(x, config.hidden_sizes, config, "torso", renorm=config.actor_batch_norm)
    heads = [keras.layers.Dense(action_size, name=head, dtype="float32",
                                **dense_initializers(config.layer_init, x.shape[-1]))(x)
             for head in ("mean_head", "log_std_head")]
    return keras.Model(obs, keras.ops.concatenate(heads, axis=-1), name=name)


def crossq_critic(obs_shape: Sequence[int] | ObsSpec, action_size: int, config: CrossQConfig,
                  name: str) -> keras.Model:
    """(obs [B, *obs_shape], action [B, D]) -> Q(s, a) [B]: the concatenated input renormalized, then
    config.critic_hidden_sizes ReLU layers each followed by batch renormalization."""
    obs, x = observation_input(obs_shape, "float32", "mlp")
    action = keras.Input(shape=(action_size,), name="action", dtype="float32")
    x = keras.layers.Concatenate(name="obs_action")([x, action])
    x = _renormalized_torso(x, config.critic_hidden_sizes, config, "torso")
    q = keras.layers.Dense(1, name="q_head", dtype="float32", **dense_initializers(config.layer_init, x.shape[-1]))(x)
    return keras.Model([obs, action], keras.ops.squeeze(q, axis=-1), name=name)

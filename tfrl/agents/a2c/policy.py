"""The A2C policy that is exported and evaluated: the most likely action of the actor-critic network, no sampling.

tfrl.runs finds this module by the convention `tfrl.agents.<agent>.policy` and
calls `serving_policy(config, env)`; an agent without such a module cannot be
exported or evaluated from a checkpoint.
"""

from __future__ import annotations

import tensorflow as tf

from tfrl.agents.a2c.config import A2CConfig
from tfrl.agents.a2c.networks import make_head, make_network
from tfrl.envs import EnvInfo
from tfrl.export import ServingPolicy


def greedy_outputs(network):
    """observation [B, *obs_shape] -> {"action": argmax_a logits int64 [B], "logits": float32 [B, A],
    "value": V(s) float32 [B]}: the mode of the categorical policy (the greedy action the actor evaluates)."""

    def outputs(observation):
        logits, value = network(observation, training=False)  # float32 under every precision policy
        return {"action": tf.argmax(logits, axis=-1, output_type=tf.int64), "logits": logits, "value": value}

    return outputs


def serving_policy(config: A2CConfig, env: EnvInfo, network=None) -> ServingPolicy:
    """The greedy policy of `network`, or of a fresh actor-critic network to restore from a training checkpoint.

    "network" is the key of the network in A2CLearner.checkpoint_items().
    """
    if network is None:
        network = make_network(config, env, make_head(env))
    return ServingPolicy(model=network, outputs=greedy_outputs(network), checkpoint_items={"network": network})

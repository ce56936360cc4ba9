"""The actor-critic policy that is exported and evaluated (A2C, PPO): the most likely action of the network, no
sampling. The agent registry (tfrl.agents) names this module as their policy module."""

from __future__ import annotations

import tensorflow as tf

from tfrl.agents.actor_critic.config import ActorCriticConfig
from tfrl.agents.actor_critic.networks import make_head, make_network
from tfrl.envs import EnvInfo
from tfrl.export import ServingPolicy


def greedy_outputs(network):
    """observation [B, *obs_shape] -> {"action": argmax_a logits int64 [B], "logits": float32 [B, A],
    "value": V(s) float32 [B]}: the mode of the categorical policy (the greedy action the actor evaluates)."""

    def outputs(observation):
        logits, value = network(observation, training=False)  # float32 under every precision policy
        return {"action": tf.argmax(logits, axis=-1, output_type=tf.int64), "logits": logits, "value": value}

    return outputs


def serving_policy(config: ActorCriticConfig, env: EnvInfo, network=None) -> ServingPolicy:
    """The greedy policy of `network`, or of a fresh actor-critic network to restore from a training checkpoint.

    "network" is the key of the network in the A2C and PPO learners' checkpoint_items().
    """
    if network is None:
        network = make_network(config, env, make_head(env))
    return ServingPolicy(model=network, outputs=greedy_outputs(network), checkpoint_items={"network": network})

"""The DQN policy that is exported and evaluated: greedy over the online Q-network, no exploration. The agent
registry (tfrl.agents) names this module as DQN's policy module."""

from __future__ import annotations

import tensorflow as tf

from tfrl.agents.dqn.config import DQNConfig
from tfrl.agents.dqn.networks import q_network
from tfrl.envs import EnvInfo
from tfrl.models import networks, numpy_networks
from tfrl.models.export import ServingPolicy

ONLINE_KEY = "online"  # the online Q-network's key in DQNLearner.checkpoint_items() and in the serving policy's


def make_q_network(config: DQNConfig, env: EnvInfo, name: str = "q_network"):
    """The Q-network of `config` for `env`'s observations and actions: what the learner trains, twice (online and
    target), and what the export restores."""
    return q_network(env.observations, env.num_actions, config.hidden_sizes, config.dueling, name=name,
                     layer_init=config.layer_init, torso=config.torso)


def acting_mirror(q_network):
    """What the actor calls for Q-values: a NumPy mirror of `q_network` (the live model for a CNN)."""
    return networks.acting_network(q_network, numpy_networks.NumpyQNetwork)


def greedy_outputs(q_network):
    """observation [B, *obs_shape] (or a Dict observation's fields) -> {"action": argmax_a Q(s, a) int64 [B],
    "q_values": Q(s, .) float32 [B, A]}; with an action mask, the argmax over the legal actions and
    "no_legal_action" bool [B] (networks.greedy_scores)."""

    def outputs(observation):
        q_values = q_network(networks.network_input(observation), training=False)  # [B, A], float32 always
        scores, flags = networks.greedy_scores(observation, q_values)
        return {"action": tf.argmax(scores, axis=-1, output_type=tf.int64), "q_values": q_values, **flags}

    return outputs


def serving_policy(config: DQNConfig, env: EnvInfo, q_network=None) -> ServingPolicy:
    """The greedy policy of `q_network`, or of a fresh online network to restore from a training checkpoint
    (under ONLINE_KEY)."""
    if q_network is None:
        q_network = make_q_network(config, env)
    return ServingPolicy(model=q_network, outputs=greedy_outputs(q_network), checkpoint_items={ONLINE_KEY: q_network})

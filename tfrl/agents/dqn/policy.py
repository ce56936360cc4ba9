"""The DQN policy that is exported and evaluated: greedy over the online Q-network, no exploration. The agent
registry (tfrl.agents) names this module as DQN's policy module."""

from __future__ import annotations

import tensorflow as tf

from tfrl.agents.dqn.config import DQNConfig
from tfrl.agents.dqn import recurrent as recurrent_dqn
from tfrl.agents.dqn.networks import q_network, recurrent_q_network
from tfrl.envs import EnvInfo
from tfrl.models import networks, numpy_networks
from tfrl.models.export import ServingPolicy

ONLINE_KEY = "online"  # the online Q-network's key in DQNLearner.checkpoint_items() and in the serving policy's


def make_q_network(config: DQNConfig, env: EnvInfo, name: str = "q_network"):
    """The Q-network of `config` for `env`'s observations and actions: what the learner trains, twice (online and
    target), and what the export restores."""
    if config.recurrent:
        return recurrent_q_network(env.observations, env.num_actions, config.hidden_sizes, config.lstm_units,
                                   config.dueling, name=name, layer_init=config.layer_init,
                                   torso=config.torso)
    return q_network(env.observations, env.num_actions, config.hidden_sizes, config.dueling, name=name,
                     layer_init=config.layer_init, torso=config.torso)


def acting_mirror(q_network):
    """What the actor calls for Q-values: a NumPy mirror of `q_network` (the live model for a CNN); with memory,
    (obs, state) -> (Q-values, next state)."""
    if _recurrent(q_network):
        return recurrent_dqn.acting_network(q_network)
    return networks.acting_network(q_network, numpy_networks.NumpyQNetwork)


def _recurrent(q_network) -> bool:
    return isinstance(q_network.input, (list, tuple))  # [observation(s), state]


def greedy_outputs(q_network, recurrent: bool = False):
    """observation [B, *obs_shape] (or a Dict observation's fields) -> {"action": argmax_a Q(s, a) int64 [B],
    "q_values": Q(s, .) float32 [B, A]}; with an action mask, the argmax over the legal actions and
    "no_legal_action" bool [B] (networks.greedy_scores). recurrent (a recurrent_q_network): (observation, state
    [B, 2U]) -> the same and "state", the next state [B, 2U]."""

    def greedy(observation, q_values):
        scores, flags = networks.greedy_scores(observation, q_values)
        return {"action": tf.argmax(scores, axis=-1, output_type=tf.int64), "q_values": q_values, **flags}

    if recurrent:
        def step(observation, state):
            q_values, next_state = q_network([networks.network_input(observation), state], training=False)
            return {**greedy(observation, q_values), "state": next_state}

        return step
    return lambda observation: greedy(observation, q_network(networks.network_input(observation), training=False))


def serving_policy(config: DQNConfig, env: EnvInfo, q_network=None) -> ServingPolicy:
    """The greedy policy of `q_network`, or of a fresh online network to restore from a training checkpoint
    (under ONLINE_KEY)."""
    if q_network is None:
        q_network = make_q_network(config, env)
    return ServingPolicy(model=q_network, outputs=greedy_outputs(q_network, config.recurrent),
                         checkpoint_items={ONLINE_KEY: q_network}, state_size=2 * config.lstm_units)

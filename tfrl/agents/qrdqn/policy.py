"""The QR-DQN policy that is exported and evaluated: greedy over the mean of the online network's quantiles (its
Q-values), no exploration; the outputs are DQN's ("action", "q_values", "no_legal_action" with a mask)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfrl.agents.dqn import policy as dqn_policy
from tfrl.agents.qrdqn.config import QRDQNConfig
from tfrl.agents.qrdqn.networks import quantile_network
from tfrl.envs import EnvInfo
from tfrl.models import networks, numpy_networks
from tfrl.models.export import ServingPolicy

ONLINE_KEY = dqn_policy.ONLINE_KEY  # the online network's key in the learner's checkpoint and the serving policy's


def make_q_network(config: QRDQNConfig, env: EnvInfo, name: str = "quantile_network"):
    """The quantile network of `config` for `env`: obs -> [B, A, N]; trained twice (online, target), exported."""
    return quantile_network(env.observations, env.num_actions, config.num_quantiles, config.hidden_sizes,
                            name=name, layer_init=config.layer_init, torso=config.torso)


class QuantileMeans:
    """The actor's Q-values from a quantile network's forward pass (a NumPy mirror of its Dense layers, or the
    live model for a CNN): obs [n, ...] -> the mean over the quantiles [n, A]. Picklable, for rollout actors."""

    def __init__(self, forward, num_actions: int):
        self.forward, self.num_actions = forward, num_actions

    def update(self, values) -> None:
        self.forward.update(values)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        quantiles = np.asarray(self.forward(obs))  # [n, A * N] (the mirror's q_head) or [n, A, N] (the model)
        return quantiles.reshape(len(quantiles), self.num_actions, -1).mean(axis=-1)


def acting_mirror(q_network) -> QuantileMeans:
    """What the actor calls for Q-values (tfrl.agents.dqn.agent.DQNAgent's POLICY contract)."""
    return QuantileMeans(networks.acting_network(q_network, numpy_networks.NumpyQNetwork),
                         int(q_network.output.shape[1]))


def mean_q_values(q_network):
    """A callable like a Q-network: network input -> the mean of the quantiles [B, A], float32."""
    return lambda inputs, training=False: tf.reduce_mean(q_network(inputs, training=training), axis=-1)


def serving_policy(config: QRDQNConfig, env: EnvInfo, q_network=None) -> ServingPolicy:
    """The greedy policy of `q_network`, or of a fresh online network to restore from a training checkpoint."""
    if q_network is None:
        q_network = make_q_network(config, env)
    return ServingPolicy(model=q_network, outputs=dqn_policy.greedy_outputs(mean_q_values(q_network)),
                         checkpoint_items={ONLINE_KEY: q_network})

"""Actor-critic networks (A2C, PPO): the Keras model and the policy head that turns its output into a distribution.

The network's policy output is the head's parameters (logits for a categorical
head). The learner only calls `head.log_prob` and `head.entropy` (in the graph),
the actor only `head.sample` and `head.mode` (in NumPy), so a Gaussian head for
Box action spaces (params = mean and log std) would implement the same four
functions plus `num_params` and `action_spec`, and the learner would not change.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tfrl import networks
from tfrl.agents.actor_critic.config import ActorCriticConfig
from tfrl.envs import EnvInfo


class CategoricalHead:
    """A categorical policy over `num_actions` actions, parameterized by unnormalized logits [B, A]."""

    def __init__(self, num_actions: int):
        self.num_actions = num_actions
        self.num_params = num_actions  # width of the network's policy output
        self.action_spec = tf.TensorSpec([None], tf.int32, name="actions")  # a batch of actions [B]

    # ---- in the graph (learner) ------------------------------------------------

    def log_prob(self, logits, actions):
        """logits [B, A] float32, actions [B] int32 -> log pi(a | s) [B]."""
        log_pi = tf.nn.log_softmax(logits, axis=-1)  # [B, A]
        return tf.gather(log_pi, actions, axis=1, batch_dims=1)

    def entropy(self, logits):
        """logits [B, A] -> H(pi(. | s)) = -sum_a pi(a) log pi(a) [B], in nats."""
        log_pi = tf.nn.log_softmax(logits, axis=-1)
        return -tf.reduce_sum(tf.exp(log_pi) * log_pi, axis=-1)

    # ---- in NumPy (actor) ------------------------------------------------------

    def sample(self, rng: np.random.Generator, logits: np.ndarray) -> np.ndarray:
        """logits [N, A] -> actions [N] int32 drawn from softmax(logits).

        Gumbel-max trick: argmax_a (logits_a + G_a) with G_a ~ Gumbel(0, 1) i.i.d.
        is distributed as softmax(logits); no normalization needed.
        """
        return np.argmax(logits + rng.gumbel(size=logits.shape), axis=-1).astype(np.int32)

    def log_prob_numpy(self, logits: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """logits [N, A], actions [N] -> log pi(a | s) [N] float32: log_softmax(logits)[a], shifted by the max
        logit so exp cannot overflow."""
        shifted = logits - logits.max(axis=-1, keepdims=True)
        log_pi = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        return np.take_along_axis(log_pi, actions[:, None].astype(np.intp), axis=-1)[:, 0].astype(np.float32)

    def mode(self, logits: np.ndarray) -> np.ndarray:
        """logits [N, A] -> the most likely actions [N] int32 (the greedy policy)."""
        return np.argmax(logits, axis=-1).astype(np.int32)


def make_head(env: EnvInfo) -> CategoricalHead:
    return CategoricalHead(env.num_actions)


def make_network(config: ActorCriticConfig, env: EnvInfo, head: CategoricalHead) -> keras.Model:
    """obs [B, *obs_shape] -> (policy params [B, head.num_params], value [B])."""
    return networks.actor_critic_network(env.obs_shape, head.num_params, config.hidden_sizes,
                                         config.activation, config.shared_torso)

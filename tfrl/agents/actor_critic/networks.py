"""Actor-critic networks (A2C, PPO): the Keras model and the policy head that turns its output into a distribution.

The network's policy output is the head's parameters: logits for Discrete actions (CategoricalHead), the mean and
the state-independent log standard deviation for Box actions (GaussianHead, SB3's default). The learner only
calls `head.log_prob` and `head.entropy` (in the graph), the actor `head.sample`, `head.mode` and
`head.env_action` (in NumPy), so the learners do not depend on the action space.
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

    def env_action(self, actions: np.ndarray) -> np.ndarray:
        """What the env is given for actions [N]: the actions themselves."""
        return actions


LOG_2PI = float(np.log(2.0 * np.pi))


class GaussianHead:
    """A diagonal Gaussian over a Box's actions, flattened to D dims: params [B, 2D] = (mean [B, D], log std [B, D]).

        log pi(a | s) = sum_d -0.5 ((a_d - mean_d) / std_d)^2 - log std_d - 0.5 log(2 pi)
        H(pi(. | s))  = sum_d 0.5 + 0.5 log(2 pi) + log std_d

    The log std is state-independent: one variable of the network (AppendLogStd), as SB3's default. Samples are
    unbounded; the env gets them clipped to the Box (env_action), while the loss sees the sample itself (SB3 too).
    """

    def __init__(self, action_shape, low, high):
        self.action_shape = tuple(action_shape)
        self.action_size = int(np.prod(self.action_shape))
        self.num_params = 2 * self.action_size
        self.low = np.asarray(low, np.float32).reshape(self.action_size)
        self.high = np.asarray(high, np.float32).reshape(self.action_size)
        self.action_spec = tf.TensorSpec([None, self.action_size], tf.float32, name="actions")  # [B, D]

    # ---- in the graph (learner) ------------------------------------------------

    def log_prob(self, params, actions):
        """params [B, 2D], actions [B, D] -> log pi(a | s) [B]."""
        mean, log_std = tf.split(params, 2, axis=-1)
        z = (actions - mean) * tf.exp(-log_std)
        return tf.reduce_sum(-0.5 * tf.square(z) - log_std - 0.5 * LOG_2PI, axis=-1)

    def entropy(self, params):
        """params [B, 2D] -> H(pi(. | s)) [B], in nats."""
        _, log_std = tf.split(params, 2, axis=-1)
        return tf.reduce_sum(0.5 + 0.5 * LOG_2PI + log_std, axis=-1)

    # ---- in NumPy (actor) ------------------------------------------------------

    def sample(self, rng: np.random.Generator, params: np.ndarray) -> np.ndarray:
        """params [N, 2D] -> actions [N, D] float32 = mean + std * N(0, 1)."""
        mean, log_std = np.split(params, 2, axis=-1)
        return (mean + np.exp(log_std) * rng.standard_normal(mean.shape)).astype(np.float32)

    def log_prob_numpy(self, params: np.ndarray, actions: np.ndarray) -> np.ndarray:
        mean, log_std = np.split(np.asarray(params, np.float64), 2, axis=-1)
        z = (np.asarray(actions, np.float64) - mean) * np.exp(-log_std)
        return np.sum(-0.5 * z ** 2 - log_std - 0.5 * LOG_2PI, axis=-1).astype(np.float32)

    def mode(self, params: np.ndarray) -> np.ndarray:
        """params [N, 2D] -> the mean [N, D] (the greedy policy, before clipping)."""
        return np.split(params, 2, axis=-1)[0].astype(np.float32)

    def env_action(self, actions: np.ndarray) -> np.ndarray:
        """What the env is given for actions [N, D]: clipped to the Box, in its shape."""
        return np.clip(actions, self.low, self.high).reshape(len(actions), *self.action_shape)


def make_head(env: EnvInfo) -> CategoricalHead | GaussianHead:
    if env.continuous:
        return GaussianHead(env.action_shape, env.action_low, env.action_high)
    return CategoricalHead(env.num_actions)


def make_network(config: ActorCriticConfig, env: EnvInfo, head) -> keras.Model:
    """obs [B, *obs_shape] -> (policy params [B, head.num_params], value [B])."""
    return networks.actor_critic_network(env.observations, head.num_params, config.hidden_sizes,
                                         config.activation, config.shared_torso,
                                         gaussian=isinstance(head, GaussianHead), torso=config.torso)

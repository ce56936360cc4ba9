"""The policy heads of the actor-critic networks (A2C, PPO): what turns the network's policy output into a
distribution. Imports TensorFlow only when a learner calls a graph method, so that a rollout actor, which samples in
NumPy, never loads it.

The network's policy output is the head's parameters: logits for Discrete actions (CategoricalHead), the mean and
the state-independent log standard deviation for Box actions (GaussianHead, SB3's default). The learner only
calls `head.log_prob` and `head.entropy` (in the graph), the actor `head.sample`, `head.mode` and
`head.env_action` (in NumPy), so the learners do not depend on the action space.
"""

from __future__ import annotations

import numpy as np

from tfrl.envs.env_info import EnvInfo
from tfrl.lazy_import import LazyModule

tf = LazyModule("tensorflow")


class _Head:
    """What every head gives: one action as rollouts store it (stored_shape, action_dtype), and a batch of them as
    the graph takes it (action_spec)."""

    stored_shape: tuple[int, ...]
    action_dtype: np.dtype

    @property
    def action_spec(self):
        """tf.TensorSpec [None, *stored_shape] of action_dtype."""
        return tf.TensorSpec([None, *self.stored_shape], tf.as_dtype(self.action_dtype), name="actions")


class CategoricalHead(_Head):
    """A categorical policy over `num_actions` actions, parameterized by unnormalized logits [B, A]."""

    def __init__(self, num_actions: int):
        self.num_actions = num_actions
        self.num_params = num_actions  # width of the network's policy output
        self.stored_shape, self.action_dtype = (), np.dtype(np.int32)  # one action: an index

    # ---- in the graph (learner) ------------------------------------------------

    def log_prob(self, logits, actions, legal=None):
        """logits [B, A] float32, actions [B] int32 -> log pi(a | s) [B]. legal: bool [B, A], an action mask: pi
        is the softmax over the legal actions only."""
        log_pi = tf.nn.log_softmax(masked_logits(logits, legal), axis=-1)  # [B, A]
        return tf.gather(log_pi, actions, axis=1, batch_dims=1)

    def entropy(self, logits, legal=None):
        """logits [B, A] -> H(pi(. | s)) = -sum_a pi(a) log pi(a) [B], in nats (over the legal actions only)."""
        log_pi = tf.nn.log_softmax(masked_logits(logits, legal), axis=-1)
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


# An illegal action's logit: softmax gives it exactly 0 in float32, and unlike -inf it keeps every term of the
# entropy and its gradient finite (0 * -1e8 = 0, where 0 * -inf is NaN). sb3-contrib's MaskablePPO uses the same.
MASKED_LOGIT = -1e8


def masked_logits(logits, legal):
    """logits with the illegal actions' at MASKED_LOGIT (none without a mask), in the graph."""
    return logits if legal is None else tf.where(legal, logits, MASKED_LOGIT)


def masked_logits_numpy(logits: np.ndarray, legal: np.ndarray | None) -> np.ndarray:
    """masked_logits in NumPy, for the actor: sampling, the greedy action and log pi_old see the legal actions."""
    return logits if legal is None else np.where(legal, logits, MASKED_LOGIT).astype(np.float32)


class MultiCategoricalHead(_Head):
    """A factorized categorical policy over MultiDiscrete (or MultiBinary) actions: one categorical per dimension,
    independent given s, parameterized by their logits side by side [B, sum(nvec)].

        log pi(a | s) = sum_d log softmax(logits_d)[a_d]        H(pi(. | s)) = sum_d H(softmax(logits_d))

    An action mask has one entry per value of every dimension (sb3-contrib's MultiDiscrete convention).
    """

    def __init__(self, nvec, binary: bool = False):
        self.nvec = tuple(int(n) for n in nvec)
        self.num_params = sum(self.nvec)
        self.binary = binary  # the env takes int8 0/1 (MultiBinary)
        self._splits = np.cumsum(self.nvec)[:-1]
        self.stored_shape, self.action_dtype = (len(self.nvec),), np.dtype(np.int32)  # one action: [D]

    # ---- in the graph (learner) ------------------------------------------------

    def log_prob(self, logits, actions, legal=None):
        """logits [B, sum(nvec)], actions [B, D] int32 -> log pi(a | s) [B]."""
        parts = zip(tf.split(masked_logits(logits, legal), self.nvec, axis=-1), tf.unstack(actions, axis=-1))
        return tf.add_n([tf.gather(tf.nn.log_softmax(part, axis=-1), a, axis=1, batch_dims=1) for part, a in parts])

    def entropy(self, logits, legal=None):
        """logits [B, sum(nvec)] -> the sum of the dimensions' entropies [B], in nats."""
        entropies = []
        for part in tf.split(masked_logits(logits, legal), self.nvec, axis=-1):
            log_pi = tf.nn.log_softmax(part, axis=-1)
            entropies.append(-tf.reduce_sum(tf.exp(log_pi) * log_pi, axis=-1))
        return tf.add_n(entropies)

    # ---- in NumPy (actor) ------------------------------------------------------

    def sample(self, rng: np.random.Generator, logits: np.ndarray) -> np.ndarray:
        """logits [N, sum(nvec)] -> actions [N, D] int32, each dimension drawn by the Gumbel-max trick."""
        noisy = logits + rng.gumbel(size=logits.shape)
        return np.stack([part.argmax(axis=-1) for part in np.split(noisy, self._splits, axis=-1)], -1).astype(np.int32)

    def log_prob_numpy(self, logits: np.ndarray, actions: np.ndarray) -> np.ndarray:
        total = np.zeros(len(logits), np.float64)
        for d, part in enumerate(np.split(np.asarray(logits, np.float64), self._splits, axis=-1)):
            shifted = part - part.max(axis=-1, keepdims=True)
            log_pi = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
            total += np.take_along_axis(log_pi, actions[:, d:d + 1].astype(np.intp), axis=-1)[:, 0]
        return total.astype(np.float32)

    def mode(self, logits: np.ndarray) -> np.ndarray:
        """logits [N, sum(nvec)] -> the most likely value of each dimension [N, D] int32."""
        return np.stack([part.argmax(axis=-1) for part in np.split(logits, self._splits, axis=-1)], -1).astype(np.int32)

    def env_action(self, actions: np.ndarray) -> np.ndarray:
        """What the env is given for actions [N, D]: int64 values (int8 0/1 for MultiBinary)."""
        return actions.astype(np.int8 if self.binary else np.int64)


LOG_2PI = float(np.log(2.0 * np.pi))


class GaussianHead(_Head):
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
        self.stored_shape, self.action_dtype = (self.action_size,), np.dtype(np.float32)  # flattened: [D]

    # ---- in the graph (learner) ------------------------------------------------

    def log_prob(self, params, actions, legal=None):
        """params [B, 2D], actions [B, D] -> log pi(a | s) [B] (Box actions have no mask: legal is None)."""
        mean, log_std = tf.split(params, 2, axis=-1)
        z = (actions - mean) * tf.exp(-log_std)
        return tf.reduce_sum(-0.5 * tf.square(z) - log_std - 0.5 * LOG_2PI, axis=-1)

    def entropy(self, params, legal=None):
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


def make_head(env: EnvInfo) -> CategoricalHead | MultiCategoricalHead | GaussianHead:
    if env.continuous:
        return GaussianHead(env.action_shape, env.action_low, env.action_high)
    if env.action_nvec:
        return MultiCategoricalHead(env.action_nvec, env.binary_actions)
    return CategoricalHead(env.num_actions)

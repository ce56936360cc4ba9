"""The policy heads of the actor-critic networks (A2C, PPO): what turns the network's policy output into a
distribution. Imports TensorFlow only when a learner calls a graph method, so that a rollout actor, which samples in
NumPy, never loads it.

The network's policy output is the head's parameters: logits for Discrete actions (CategoricalHead), the mean and
the state-independent log standard deviation for Box actions (GaussianHead, SB3's default), both side by side for
a Dict or Tuple of parts (HybridHead). The last `log_std_size` of them are the state-independent log standard
deviations the network appends (tfrl.agents.actor_critic.feedforward.AppendLogStd). The learner only
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
    the graph takes it (action_spec); the width of its parameters (num_params), of which the last log_std_size are
    state-independent log standard deviations."""

    stored_shape: tuple[int, ...]
    action_dtype: np.dtype
    num_params: int
    log_std_size: int = 0

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
    """masked_logits in NumPy, for the actor: sampling, the greedy action and log pi_old see the legal actions.
    A mask narrower than the params (a hybrid action's: its discrete parts' logits come first) masks those."""
    if legal is None:
        return logits
    if legal.shape[-1] < logits.shape[-1]:
        legal = np.concatenate([legal, np.ones((len(legal), logits.shape[-1] - legal.shape[-1]), bool)], axis=-1)
    return np.where(legal, logits, MASKED_LOGIT).astype(np.float32)


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
        self.log_std_size = self.action_size
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


class HybridHead(_Head):
    """A Dict or Tuple action of parts (Discrete, MultiDiscrete, MultiBinary, Box), independent given s: one
    head per part, and

        log pi(a | s) = sum_parts log pi_part(a_part | s)        H(pi(. | s)) = sum_parts H(pi_part(. | s))

    The params [B, P] are the discrete parts' logits (in the parts' order; an action mask covers exactly these),
    then the Box parts' means, then their log stds. An action is stored as float32 [K]: each part's stored action
    side by side (a discrete value as a float, exact below 2^24). The env gets {key: part} (Tuple: a tuple).
    """

    def __init__(self, parts, container: str):
        self.parts, self.container = tuple(parts), container
        self.heads = [_part_head(part) for part in self.parts]
        self.num_logits = logits = sum(part.size for part in self.parts if part.discrete)
        self.log_std_size = sum(part.size for part in self.parts if not part.discrete)
        self.num_params = logits + 2 * self.log_std_size
        self.param_columns, self._legal, self._actions = [], [], []  # per part: columns of params, mask, stored action
        logit_at, mean_at, stored_at = 0, logits, 0
        for part, head in zip(self.parts, self.heads):
            if part.discrete:
                columns = np.arange(logit_at, logit_at + part.size)
                self._legal.append(columns)
                logit_at += part.size
            else:
                mean = np.arange(mean_at, mean_at + part.size)
                columns = np.concatenate([mean, mean + self.log_std_size])
                self._legal.append(None)
                mean_at += part.size
            width = int(np.prod(head.stored_shape))
            self.param_columns.append(columns)
            self._actions.append(slice(stored_at, stored_at + width))
            stored_at += width
        self.mask_groups = tuple(n for part in self.parts if part.discrete for n in part.nvec)
        self.stored_shape, self.action_dtype = (stored_at,), np.dtype(np.float32)

    def _split(self, params, actions, legal, gather, cast):
        """Per part: (its params, its actions as its head stores them, its mask or None)."""
        for head, columns, legal_columns, stored in zip(self.heads, self.param_columns, self._legal, self._actions):
            part_actions = None if actions is None else cast(actions[:, stored], head)
            part_legal = None if legal is None or legal_columns is None else gather(legal, legal_columns)
            yield head, gather(params, columns), part_actions, part_legal

    # ---- in the graph (learner) ------------------------------------------------

    def log_prob(self, params, actions, legal=None):
        """params [B, P], actions [B, K] float32, legal bool [B, A] or None -> the parts' summed log pi [B]."""
        parts = self._split(params, actions, legal, _gather, _graph_action)
        return tf.add_n([head.log_prob(p, a, m) for head, p, a, m in parts])

    def entropy(self, params, legal=None):
        return tf.add_n([head.entropy(p, m) for head, p, _, m in self._split(params, None, legal, _gather, None)])

    # ---- in NumPy (actor) ------------------------------------------------------

    def sample(self, rng: np.random.Generator, params: np.ndarray) -> np.ndarray:
        """params [N, P] (masked already) -> actions [N, K] float32, each part drawn by its head."""
        return self._joined([head.sample(rng, p) for head, p, _, _ in self._split(params, None, None, _take, None)])

    def log_prob_numpy(self, params: np.ndarray, actions: np.ndarray) -> np.ndarray:
        parts = self._split(params, actions, None, _take, _numpy_action)
        return np.sum([head.log_prob_numpy(p, a) for head, p, a, _ in parts], axis=0).astype(np.float32)

    def mode(self, params: np.ndarray) -> np.ndarray:
        """params [N, P] -> each part's most likely action (a Box part's mean), stored side by side [N, K]."""
        return self._joined([head.mode(p) for head, p, _, _ in self._split(params, None, None, _take, None)])

    def env_action(self, actions: np.ndarray):
        """What the env is given for actions [N, K]: {key: the part's actions, as its head gives them} (a tuple
        for a Tuple space)."""
        parts = [head.env_action(_numpy_action(actions[:, stored], head))
                 for head, stored in zip(self.heads, self._actions)]
        if self.container == "Tuple":
            return tuple(parts)
        return {part.key: value for part, value in zip(self.parts, parts)}

    def _joined(self, actions) -> np.ndarray:
        return np.concatenate([np.asarray(a, np.float32).reshape(len(a), -1) for a in actions], axis=-1)


def _part_head(part) -> CategoricalHead | MultiCategoricalHead | GaussianHead:
    if part.kind == "continuous":
        return GaussianHead(part.shape, part.low, part.high)
    if part.kind == "discrete":
        return CategoricalHead(part.nvec[0])
    return MultiCategoricalHead(part.nvec, binary=part.kind == "multi_binary")


def _gather(values, columns):
    return tf.gather(values, columns, axis=-1)


def _take(values, columns):
    return values[:, columns]


def _graph_action(actions, head):
    """A part's stored actions (float32 columns) as its head takes them in the graph."""
    actions = actions[:, 0] if head.stored_shape == () else actions
    return tf.cast(actions, tf.int32) if head.action_dtype == np.int32 else actions


def _numpy_action(actions: np.ndarray, head) -> np.ndarray:
    actions = actions[:, 0] if head.stored_shape == () else actions
    return np.rint(actions).astype(np.int32) if head.action_dtype == np.int32 else actions


def make_head(env: EnvInfo) -> CategoricalHead | MultiCategoricalHead | GaussianHead | HybridHead:
    if env.hybrid:
        return HybridHead(env.action_parts, env.action_container)
    if env.continuous:
        return GaussianHead(env.action_shape, env.action_low, env.action_high)
    if env.action_nvec:
        return MultiCategoricalHead(env.action_nvec, env.binary_actions)
    return CategoricalHead(env.num_actions)

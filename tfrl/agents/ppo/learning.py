"""PPO learner math: the clipped surrogate loss and the update (one TF call per rollout).

One update trains on one rollout of B = rollout_length * num_envs transitions, with the
advantages A_t and value targets G_t of GAE (tfrl.agents.actor_critic.advantages) and
the log-probabilities log pi_old(a_t | s_t) of the policy that acted. It makes
n_epochs passes, each over a fresh random order of the B rows cut into
B / batch_size minibatches; every minibatch is one Adam step on

    r = pi(a|s) / pi_old(a|s) = exp(log pi(a|s) - log pi_old(a|s))
    policy_loss = -mean_b(min(r * A, clip(r, 1 - epsilon, 1 + epsilon) * A))
    loss = policy_loss + value_coef * mean_b((G - V(s))^2) - entropy_coef * mean_b(H(pi(.|s)))

with A standardized within the minibatch when normalize_advantage is on (SB3's
PPO does the same). The value loss is not clipped (SB3's default, clip_range_vf=None).

All n_epochs * B / batch_size steps run inside one tf.function call: the call's
fixed cost is paid once per rollout, not once per minibatch step (which, for the
small networks, is cheaper than that fixed cost). The minibatch orders come in with the rollout,
drawn in NumPy from a generator keyed by (seed, update): a resumed or repeated
run shuffles the same way.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tfrl import schedules
from tfrl.agents import train_step
from tfrl.agents.actor_critic import learning as ac_learning, policy as ac_policy, recurrent
from tfrl.agents.actor_critic.heads import make_head
from tfrl.agents.actor_critic.networks import make_network
from tfrl.agents.actor_critic.rollout import Rollout
from tfrl.agents.core import LearnerUpdate
from tfrl.agents.ppo.config import PPOConfig
from tfrl.envs import EnvInfo
from tfrl.hardware import precision, runtime as runtime_lib
from tfrl.models import networks, normalization, numerics

# Each logged as its mean over all of an update's minibatch steps (SB3 logs approx_kl and the loss of the last
# epoch or step only).
METRICS = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "grad_norm")


def ppo_loss(head, policy_params, values, actions, advantages, returns, old_log_probs, clip_range,
             value_coef: float, entropy_coef: float, legal=None):
    """policy_params [B, P], values [B], actions [B], advantages [B], returns [B], old_log_probs [B],
    clip_range [] -> (loss [], terms). legal: the action mask (bool [B, A]): pi and its entropy range over the
    legal actions only, as the actor's did.

    terms: {"policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"}, each a batch mean.
    approx_kl = mean((r - 1) - log r), an unbiased, non-negative estimate of KL(pi_old || pi) (SB3 logs the
    same); clip_fraction is the share of rows with |r - 1| > clip_range. Advantages, returns and the old
    log-probabilities are constants: no gradient flows into them.
    """
    advantages, returns, old_log_probs = (tf.stop_gradient(x) for x in (advantages, returns, old_log_probs))
    log_ratio = head.log_prob(policy_params, actions, legal) - old_log_probs
    ratio = tf.exp(log_ratio)
    clipped_ratio = tf.clip_by_value(ratio, 1.0 - clip_range, 1.0 + clip_range)
    policy_loss = -tf.reduce_mean(tf.minimum(ratio * advantages, clipped_ratio * advantages))
    value_loss = tf.reduce_mean(tf.square(returns - values))
    entropy = tf.reduce_mean(head.entropy(policy_params, legal))
    loss = policy_loss + value_coef * value_loss - entropy_coef * entropy
    approx_kl = tf.stop_gradient(tf.reduce_mean((ratio - 1.0) - log_ratio))
    clip_fraction = tf.reduce_mean(tf.cast(tf.abs(ratio - 1.0) > clip_range, tf.float32))
    return loss, {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy,
                  "approx_kl": approx_kl, "clip_fraction": clip_fraction}


def minibatch_indices(seed: int, update: int, n_epochs: int, rows: int, batch_size: int) -> np.ndarray:
    """[n_epochs * rows / batch_size, batch_size] int32 row indices: each epoch a fresh permutation of the rows,
    cut into consecutive minibatches. Drawn in NumPy from a generator keyed by (seed, update), so a resumed or
    repeated run shuffles the same way, with or without XLA (TF's stateless RNG differs under XLA)."""
    rng = np.random.default_rng([seed, update])
    return np.concatenate([rng.permutation(rows) for _ in range(n_epochs)]).reshape(-1, batch_size).astype(np.int32)


def _make_optimizer(config: PPOConfig) -> keras.optimizers.Optimizer:
    # Keras adds epsilon to the uncorrected sqrt(v) (its bias correction is folded into the step size), PyTorch
    # to the corrected one: the same eps weighs more in Keras' first steps, until the correction fades.
    return keras.optimizers.Adam(config.learning_rate, epsilon=config.adam_epsilon,
                                 global_clipnorm=config.max_grad_norm or None)


class PPOLearner:
    """Owns the actor-critic network, the Adam optimizer and the update.

    All state is in tf.Variables (network, optimizer slots, learning rate and loss scale, `updates`), so one
    tf.train.Checkpoint of `checkpoint_items()` saves it; `updates` also keys the minibatch shuffles.

    Under a tf.distribute strategy (runtime.strategy) the variables are mirrored, and each minibatch step
    splits the worker's minibatch across its replicas (tfrl.hardware.distribute). Each worker shuffles its own rollout
    (with its own seed), and all take the same number of minibatch steps, so the all-reduces stay in step.
    """

    def __init__(self, config: PPOConfig, env: EnvInfo, runtime: runtime_lib.Runtime, seed: int):
        self.config = config
        self.head = make_head(env)
        self._seed = seed
        self._placement = train_step.Placement(runtime)
        self.check_runtime(config, runtime)
        with self._placement.scope():
            self.network = make_network(config, env, self.head)
            self.optimizer = precision.built_optimizer(_make_optimizer(config), self.network.trainable_variables,
                                                         runtime.options.mixed_precision)
            self.updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")
            # A variable rather than an argument of the per-replica function, which shards its arguments.
            self._clip_range = tf.Variable(config.clip_range, dtype=tf.float32, trainable=False, name="clip_range")
        self.obs_normalizer = normalization.make(config, env.observations)  # the agent updates it while collecting
        self.rows = ac_learning.rollout_rows(env.observations, self.head, with_log_probs=True,
                                             state_size=recurrent.state_size_of(config))
        self._forward = ac_learning.training_forward(self.network, config)
        self.output = train_step.OutputLayout(METRICS, networks.acting_variables(self.network))
        self._batch_gradients = self._placement.batch_gradients(self._gradients)
        self.train_step = self._placement.compile(self._train_step, [
            *self.rows.signature(batch_dims=1),  # the rollout [B, F] (and its uint8 images [B, ...])
            tf.TensorSpec([None, config.batch_size], tf.int32, name="minibatches"),  # [steps, batch_size] rows
            # Inputs rather than Python numbers, so decaying schedules never retrace.
            tf.TensorSpec([], tf.float32, name="learning_rate"),
            tf.TensorSpec([], tf.float32, name="clip_range"),
        ])
        self._call = train_step.concrete_call(self.train_step)

    @staticmethod
    def check_runtime(config: PPOConfig, runtime: runtime_lib.Runtime) -> None:
        """Each minibatch step splits the worker's batch_size rows (with memory: its whole sequences) evenly over its
        replicas."""
        if config.recurrent:
            train_step.Placement(runtime).check_batch_split("batch_size / sequence_length (sequences per minibatch)",
                                                            config.batch_size // config.sequence_steps)
        else:
            train_step.Placement(runtime).check_batch_split("batch_size", config.batch_size)

    def checkpoint_items(self) -> dict:
        return {ac_policy.NETWORK_KEY: self.network, "optimizer": self.optimizer, "updates": self.updates,
                **normalization.checkpoint_items(self.obs_normalizer.layer)}

    def update(self, rollout: Rollout) -> LearnerUpdate:
        """One TF call: n_epochs * B / batch_size minibatch steps on the flattened rollout [B].

        The learning rate and the clip range follow their schedules from the rollout's start. Metrics: the means
        of METRICS over the minibatch steps, and "learning_rate" and "clip_range".
        """
        config = self.config
        learning_rate = ac_learning.learning_rate_at(rollout.start_env_step, config)
        clip_range = schedules.Schedule.named(config.clip_range_schedule, config.clip_range,
                                              config.total_env_steps).at(rollout.start_env_step)
        rows = len(rollout.obs)
        if rows % config.batch_size:
            raise ValueError(f"a rollout of {rows} rows does not split into minibatches of {config.batch_size}")
        minibatches = self._minibatches(rows)
        flat = self._call(*self.rows.pack(rollout.rows(), batch_dims=1), minibatches, np.float32(learning_rate),
                          np.float32(clip_range)).numpy()
        steps_per_update = len(minibatches)
        done_before = (int(self.updates.numpy()) - 1) * steps_per_update
        update = train_step.finished_update(self.output, flat, self.optimizer, "policy logits or values",
                                            lambda k: done_before + k + 1)  # counted from 1, like DQN's
        update.metrics.update(learning_rate=learning_rate, clip_range=float(clip_range))
        return update

    def _minibatches(self, rows: int) -> np.ndarray:
        """This update's minibatch rows: shuffled rows, or with memory whole shuffled sequences in time order."""
        config, update = self.config, int(self.updates.numpy())
        if config.recurrent:
            return recurrent.sequence_minibatches(self._seed, update, config.n_epochs, config.rollout_length,
                                                  config.num_envs, config.sequence_steps, config.batch_size)
        return minibatch_indices(self._seed, update, config.n_epochs, rows, config.batch_size)

    # ---- inside the tf.function -------------------------------------------------

    def _train_step(self, *inputs):
        """(*rollout tensors, minibatches, learning_rate, clip_range) -> OutputLayout: the mean of each of METRICS
        over the steps, the first flagged step's flags, weights."""
        *rollout, minibatches, learning_rate, clip_range = inputs
        self.optimizer.learning_rate.assign(learning_rate)
        self._clip_range.assign(clip_range)
        num_steps = tf.shape(minibatches)[0]
        sums = tf.zeros([len(METRICS)])
        flags, flagged_step = tf.constant(0), tf.constant(0)
        for step in tf.range(num_steps):
            batch = self.rows.unpack([tf.gather(tensor, minibatches[step]) for tensor in rollout])
            advantages = batch["advantage"]
            if self.config.normalize_advantage:
                advantages = ac_learning.normalized(advantages)  # over the whole minibatch, before any sharding
            grads, terms = self._batch_gradients(batch["obs"], batch["action"], advantages, batch["return"],
                                                 batch["log_prob"], *ac_learning.memory_of(batch))
            metrics, step_flags = ac_learning.apply_step(self.optimizer, grads, self.network.trainable_variables,
                                                         terms)
            sums += tf.stack([tf.cast(metrics[name], tf.float32) for name in METRICS])
            flags, flagged_step = numerics.keep_first_flags(flags, flagged_step, step_flags, step)
        self.updates.assign_add(1)
        means = sums / tf.cast(tf.maximum(num_steps, 1), tf.float32)
        return self.output.pack(dict(zip(METRICS, tf.unstack(means))), flags, flagged_step,
                                networks.acting_variables(self.network))

    def _gradients(self, obs, actions, advantages, returns, old_log_probs, *memory):
        """(loss-scaled gradients, {"loss", terms of ppo_loss, "outputs_sum"}) of one minibatch (or shard); memory:
        its rows' (states, starts) with lstm_units."""
        return ac_learning.loss_gradients(
            self._forward, self.network, self.optimizer, obs, memory,
            lambda policy_params, values, legal: ppo_loss(self.head, policy_params, values, actions, advantages,
                                                          returns, old_log_probs, self._clip_range,
                                                          self.config.value_coef, self.config.entropy_coef, legal))

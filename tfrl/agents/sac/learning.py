"""SAC: the losses and the learner, K gradient steps per TF call (the networks are tfrl.models.networks').

Actions live in [-1, 1]^D inside the agent (the env gets them rescaled to its Box). The actor is a tanh-squashed
Gaussian with a state-dependent mean and log std (clipped to [-20, 2], as SB3):

    u = mean(s) + std(s) * noise,  a = tanh(u)                                            # noise ~ N(0, I)
    log pi(a|s) = sum_d [log N(u_d; mean_d, std_d) - log(1 - tanh(u_d)^2)]
                with log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), exact and stable

One gradient step, SB3's (all three losses use alpha as it was before the step's temperature update):

    alpha = exp(log_alpha)
    y = r + discount * (min_i Q_target_i(s', a') - alpha * log pi(a'|s'))          a' ~ pi(.|s')
    critic_loss = 0.5 * (mean((Q_1(s, a_replay) - y)^2) + mean((Q_2(s, a_replay) - y)^2))
    actor_loss = mean(alpha * log pi(a|s) - min_i Q_i(s, a))                        a ~ pi(.|s), the updated Q_i
    temperature_loss = -mean(log_alpha * (log pi(a|s) + target_entropy))          the same a and log pi
    Q_target_i <- tau * Q_i + (1 - tau) * Q_target_i

The actor's pass on s serves both the actor and the temperature loss: the critic update between them leaves
the actor unchanged, so log pi(a|s) is the same (SB3 computes it once too).

discount holds gamma and the termination mask (tfrl.replay). The noise comes in with the batch, drawn in NumPy,
so a call is a pure function of its inputs and the variables (reproducible, also under XLA).
"""

from __future__ import annotations

import math

import keras
import numpy as np
import tensorflow as tf

from tfrl.agents import train_step
from tfrl.agents.core import LearnerUpdate
from tfrl.agents.off_policy.networks import q_critic
from tfrl.agents.sac.config import SACConfig
from tfrl.agents.sac.explorer import LOG_STD_MAX, LOG_STD_MIN
from tfrl.agents.sac.networks import squashed_gaussian_actor
from tfrl.agents.sac.policy import ACTOR_KEY
from tfrl.envs import EnvInfo
from tfrl.hardware import precision, runtime as runtime_lib
from tfrl.models import normalization

METRICS = ("critic_loss", "actor_loss", "temperature", "temperature_loss", "entropy", "q_mean")


def squashed_gaussian(mean, log_std, noise):
    """mean, log_std, noise [B, D] -> (a = tanh(mean + std * noise) [B, D], log pi(a|s) [B])."""
    log_std = tf.clip_by_value(log_std, LOG_STD_MIN, LOG_STD_MAX)
    u = mean + tf.exp(log_std) * noise
    gaussian = tf.reduce_sum(-0.5 * tf.square(noise) - log_std - 0.5 * math.log(2 * math.pi), axis=-1)
    log_det = tf.reduce_sum(2.0 * (math.log(2.0) - u - tf.nn.softplus(-2.0 * u)), axis=-1)  # log(1 - tanh(u)^2)
    return tf.tanh(u), gaussian - log_det


def soft_td_targets(r_t, discount_t, q1_t, q2_t, next_log_prob, alpha):
    """r_t, discount_t, q*_t, next_log_prob [B], alpha [] -> y [B] = r + discount * (min Q_t - alpha log pi)."""
    return r_t + discount_t * (tf.minimum(q1_t, q2_t) - alpha * next_log_prob)


def critic_loss(q1, q2, targets):
    """0.5 * (mse(Q_1, y) + mse(Q_2, y)); no gradient into the targets."""
    targets = tf.stop_gradient(targets)
    return 0.5 * (tf.reduce_mean(tf.square(q1 - targets)) + tf.reduce_mean(tf.square(q2 - targets)))


def actor_loss(log_prob, q1, q2, alpha):
    """mean(alpha * log pi(a|s) - min_i Q_i(s, a)), the gradient flowing through a and log pi."""
    return tf.reduce_mean(alpha * log_prob - tf.minimum(q1, q2))


def temperature_loss(log_alpha, log_prob, target_entropy):
    """-mean(log_alpha * (log pi + target_entropy)): its gradient raises alpha while the entropy (-log pi) is
    below the target, and lowers it above."""
    return -tf.reduce_mean(log_alpha * tf.stop_gradient(log_prob + target_entropy))


class SACLearner:
    """Owns the actor, the twin Q-networks and their targets, the temperature, three Adam optimizers and the
    train step. All state is in tf.Variables (checkpoint_items())."""

    METRICS = METRICS

    def __init__(self, config: SACConfig, env: EnvInfo, runtime: runtime_lib.Runtime, seed: int = 0):
        del seed  # the agent draws the batches and the noise
        self.config = config
        self._placement = train_step.Placement(runtime)
        self.check_runtime(config, runtime)
        size = env.action_size
        self.target_entropy = float(-size if config.target_entropy is None else config.target_entropy)
        with self._placement.scope():
            self._build(config, env, size, runtime.options.mixed_precision)
        self.obs_normalizer = normalization.make(config, env.observations)  # the agent updates it while collecting
        self.rows = train_step.RowLayout(self._row_fields(config, env, size))
        self.output = train_step.OutputLayout(self.METRICS, self.acting_variables())
        self._critic_gradients = self._placement.batch_gradients(self._critic_gradients_of)
        self._actor_gradients = self._placement.batch_gradients(self._actor_and_temperature_gradients)
        self.train_step = self._placement.compile(self._train_step, [
            tf.TensorSpec([None, None, self.rows.width], tf.float32)])  # packed transitions and noise [K, B, F]
        self._call = train_step.concrete_call(self.train_step)

    @staticmethod
    def _row_fields(config: SACConfig, env: EnvInfo, size: int) -> dict:
        """What one row of a batch holds (train_step.RowLayout's fields): a transition and its actions' noise."""
        observations = env.observations
        return {"obs": (observations.row_shape, observations.numpy_dtype),
                "next_obs": (observations.row_shape, observations.numpy_dtype), "action": ((size,), tf.float32),
                "reward": ((), tf.float32), "discount": ((), tf.float32), "noise_next": ((size,), tf.float32),
                "noise": ((size,), tf.float32)}

    def _build(self, config: SACConfig, env: EnvInfo, size: int, precision_policy: str) -> None:
        self.actor = self._make_actor(config, env, size)
        self.critics, self.target_critics = self._make_critics(config, env, size)
        for target, critic in zip(self.target_critics, self.critics):
            target.set_weights(critic.get_weights())
        self.log_alpha = tf.Variable(math.log(config.initial_temperature), dtype=tf.float32, name="log_alpha")
        self._alpha_used = tf.Variable(config.initial_temperature, dtype=tf.float32, trainable=False,
                                       name="alpha_used")  # this step's alpha, before its own update
        self.critic_variables = [v for critic in self.critics for v in critic.trainable_variables]
        self.actor_optimizer, self.critic_optimizer, self.temperature_optimizer = (
            precision.built_optimizer(self._optimizer(config), variables, precision_policy)
            for variables in (self.actor.trainable_variables, self.critic_variables, [self.log_alpha]))
        self.gradient_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="gradient_steps")

    @staticmethod
    def _make_actor(config: SACConfig, env: EnvInfo, size: int) -> keras.Model:
        """The actor: SAC's squashed Gaussian (CrossQ's renormalizes its torso)."""
        return squashed_gaussian_actor(env.observations, size, config.hidden_sizes, layer_init=config.layer_init)

    @staticmethod
    def _optimizer(config: SACConfig) -> keras.optimizers.Optimizer:
        """One Adam, for the actor, the critics or the temperature."""
        return keras.optimizers.Adam(config.learning_rate, epsilon=config.adam_epsilon,
                                     global_clipnorm=config.max_grad_norm or None)

    def acting_variables(self) -> list:
        """What a train call returns for the acting mirror, in its order: the actor's trainable variables."""
        return list(self.actor.trainable_variables)

    @staticmethod
    def _make_critics(config: SACConfig, env: EnvInfo, size: int) -> tuple[list, list]:
        """(the Q-networks, their targets): SAC's twin critics (a distributional learner, TQC, makes its own)."""
        hidden, init = config.hidden_sizes, config.layer_init
        return ([q_critic(env.observations, size, hidden, f"q{i}", init) for i in (1, 2)],
                [q_critic(env.observations, size, hidden, f"q{i}_target") for i in (1, 2)])

    @staticmethod
    def check_runtime(config: SACConfig, runtime: runtime_lib.Runtime) -> None:
        """Each gradient step splits the worker's batch evenly over its replicas."""
        train_step.Placement(runtime).check_batch_split("batch_size", config.batch_size)

    def sync_target_networks(self) -> None:
        """Target Q-networks := Q-networks, after weights were loaded from elsewhere (tfrl.run.warm_start)."""
        for target, critic in zip(self.target_critics, self.critics):
            target.set_weights(critic.get_weights())

    def checkpoint_items(self) -> dict:
        critics = {f"q{i}": critic for i, critic in enumerate(self.critics, 1)}
        targets = {f"q{i}_target": target for i, target in enumerate(self.target_critics, 1)}
        return {ACTOR_KEY: self.actor, **critics, **targets, "log_alpha": self.log_alpha,
                "actor_optimizer": self.actor_optimizer, "critic_optimizer": self.critic_optimizer,
                "temperature_optimizer": self.temperature_optimizer, "gradient_steps": self.gradient_steps,
                **normalization.checkpoint_items(self.obs_normalizer.layer)}

    def update(self, transitions: dict[str, np.ndarray]) -> LearnerUpdate:
        """One TF call of K gradient steps on `transitions`: K batches [K, B, ...] of obs, action (in [-1, 1]),
        reward, discount, next_obs, and the standard-normal noise of the actions sampled at s' ("noise_next") and
        at s ("noise"). Metrics: their means. Weights: the actor's."""
        num_steps = transitions["action"].shape[0]
        flat = self._call(*self.rows.pack(transitions, batch_dims=2)).numpy()
        done = int(self.gradient_steps.numpy())
        return train_step.finished_update(self.output, flat, self.critic_optimizer, "actions or Q-values",
                                          lambda k: done - num_steps + k + 1)

    # ---- inside the tf.function -------------------------------------------------

    def _train_step(self, packed):
        batch = self.rows.unpack([packed])  # each [K, B, ...]
        means, flags, flagged_k = train_step.mean_of_steps(batch, self._gradient_step, len(self.METRICS))
        return self.output.pack(dict(zip(self.METRICS, tf.unstack(means))), flags, flagged_k,
                                self.acting_variables())

    def _critic_step(self, b):
        """This step's alpha (before the temperature's own update), then the critics' step on batch b -> (its
        terms, its numerics flags)."""
        self._alpha_used.assign(tf.exp(self.log_alpha))
        critic_grads, terms = self._critic_gradients(*self._critic_inputs(b))
        return terms, train_step.apply_gradients(self.critic_optimizer, critic_grads, self.critic_variables,
                                                 terms["critic_loss"], terms["outputs_sum"])

    @staticmethod
    def _critic_inputs(b) -> tuple:
        """What _critic_gradients_of takes of a batch."""
        return b["obs"], b["action"], b["reward"], b["discount"], b["next_obs"], b["noise_next"]

    @staticmethod
    def _actor_inputs(b) -> tuple:
        """What _actor_and_temperature_gradients takes of a batch."""
        return b["obs"], b["noise"]

    def _gradient_step(self, b):
        """One SAC step on one batch [B] -> (its METRICS [6], its numerics flags)."""
        terms, flags = self._critic_step(b)
        (actor_grads, temperature_grads), actor_terms = self._actor_gradients(*self._actor_inputs(b))
        flags = tf.bitwise.bitwise_or(flags, train_step.apply_gradients(
            self.actor_optimizer, actor_grads, self.actor.trainable_variables, actor_terms["actor_loss"],
            actor_terms["outputs_sum"]))
        if self.config.learn_temperature:
            self.temperature_optimizer.apply(temperature_grads, [self.log_alpha])
        tau = self.config.target_update_tau
        for target, critic in zip(self.target_critics, self.critics):
            for target_var, var in zip(target.trainable_variables, critic.trainable_variables):
                target_var.assign(tau * var + (1.0 - tau) * target_var)
        self.gradient_steps.assign_add(1)
        values = {**terms, **actor_terms, "temperature": self._alpha_used}
        return tf.stack([tf.cast(values[name], tf.float32) for name in METRICS]), flags

    def _policy(self, obs, noise):
        mean, log_std = tf.split(self.actor(obs, training=True), 2, axis=-1)
        return squashed_gaussian(mean, log_std, noise)

    def _critic_gradients_of(self, obs, action, reward, discount, next_obs, noise_next):
        """(critic gradients, terms) of one batch (or a replica's shard)."""
        alpha = self._alpha_used
        next_action, next_log_prob = self._policy(next_obs, noise_next)
        targets = soft_td_targets(reward, discount, self.target_critics[0]([next_obs, next_action]),
                                  self.target_critics[1]([next_obs, next_action]), next_log_prob, alpha)
        with tf.GradientTape() as tape:
            q1, q2 = (critic([obs, action], training=True) for critic in self.critics)
            loss = critic_loss(q1, q2, targets)
            scaled = self.critic_optimizer.scale_loss(loss)
        terms = {"critic_loss": loss, "q_mean": 0.5 * (tf.reduce_mean(q1) + tf.reduce_mean(q2)),
                 "outputs_sum": tf.reduce_sum(q1) + tf.reduce_sum(q2) + tf.reduce_sum(targets)}
        return tape.gradient(scaled, self.critic_variables), terms

    def _actor_and_temperature_gradients(self, obs, noise):
        """((actor gradients, [log_alpha gradient]), terms) of one batch (or shard), with the updated critics."""
        with tf.GradientTape() as tape:
            action, log_prob = self._policy(obs, noise)
            loss = self._actor_loss(obs, action, log_prob)
            scaled = self.actor_optimizer.scale_loss(loss)
        with tf.GradientTape() as temperature_tape:
            t_loss = temperature_loss(self.log_alpha, log_prob, self.target_entropy)
            scaled_t = self.temperature_optimizer.scale_loss(t_loss)
        grads = (tape.gradient(scaled, self.actor.trainable_variables),
                 temperature_tape.gradient(scaled_t, [self.log_alpha]))
        terms = {"actor_loss": loss, "temperature_loss": t_loss, "entropy": -tf.reduce_mean(log_prob),
                 "outputs_sum": tf.reduce_sum(action) + tf.reduce_sum(log_prob)}
        return grads, terms

    def _actor_loss(self, obs, action, log_prob):
        """The actor's objective at (obs, action ~ pi(obs)): SAC's, with the min of the twin critics."""
        q1, q2 = (critic([obs, action]) for critic in self.critics)
        return actor_loss(log_prob, q1, q2, self._alpha_used)


"""CrossQ learner: SAC's train call (K gradient steps per tf.function call, the squashed Gaussian actor, the
learned temperature) without target networks, its critics batch-renormalized (tfrl.agents.crossq.batch_renorm).

One gradient step (alpha as it was before the step; SAC's notation, tfrl.agents.sac.learning):
    a', log pi(a'|s') = pi(s')                              the actor in evaluation mode, with the batch's noise
    Q_i([s; s'], [a; a']) -> (Q_i(s, a), Q_i(s', a'))       one pass over 2B rows in training mode: the
                                                            renormalization's statistics are the joint batch's
    y = r + discount * (min_i Q_i(s', a') - alpha log pi(a'|s'))                      no gradient into y
    critic_loss = 0.5 * (mean((Q_1(s, a) - y)^2) + mean((Q_2(s, a) - y)^2))
and every policy_delay-th step (counted after this one):
    actor_loss = mean(alpha log pi(a|s) - min_i Q_i(s, a))  the actor in training mode, the critics in evaluation
    temperature_loss as SAC's
Reported actor_loss, temperature_loss and entropy are the means over the steps that updated the actor.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tfrl.agents import train_step
from tfrl.agents.core import LearnerUpdate
from tfrl.agents.crossq.config import CrossQConfig
from tfrl.agents.crossq.networks import crossq_actor, crossq_critic
from tfrl.agents.sac.learning import SACLearner, critic_loss, soft_td_targets, squashed_gaussian
from tfrl.envs import EnvInfo
from tfrl.errors import UsageError
from tfrl.hardware import runtime as runtime_lib

ACTOR_METRICS = ("actor_loss", "temperature_loss", "entropy")


def joint_rows(first, second):
    """[B, ...] and [B, ...] -> [2B, ...], of tensors or of each field of Dict observations."""
    return tf.nest.map_structure(lambda a, b: tf.concat([a, b], axis=0), first, second)


class CrossQLearner(SACLearner):
    """SACLearner with renormalized critics and actor, no targets, and the actor's step every policy_delay steps;
    its checkpoint keys are SAC's without the targets."""

    METRICS = SACLearner.METRICS + ("actor_updates",)

    @staticmethod
    def _make_actor(config: CrossQConfig, env: EnvInfo, size: int) -> keras.Model:
        return crossq_actor(env.observations, size, config)

    @staticmethod
    def _make_critics(config: CrossQConfig, env: EnvInfo, size: int) -> tuple[list, list]:
        return [crossq_critic(env.observations, size, config, f"q{i}") for i in (1, 2)], []

    @staticmethod
    def _optimizer(config: CrossQConfig) -> keras.optimizers.Optimizer:
        return keras.optimizers.Adam(config.learning_rate, beta_1=config.adam_beta_1, epsilon=config.adam_epsilon,
                                     global_clipnorm=config.max_grad_norm or None)

    def acting_variables(self) -> list:
        """Every variable of the actor: the mirror's renormalization needs the moving statistics too."""
        return list(self.actor.weights)

    @staticmethod
    def check_runtime(config: CrossQConfig, runtime: runtime_lib.Runtime) -> None:
        """One device: the renormalization's statistics are per batch, and a replica's shard is not the batch."""
        if runtime.strategy is not None:
            raise UsageError("CrossQ trains on one device: its batch renormalization needs each batch's statistics "
                             "in one place (--strategy is not supported for it)")

    def update(self, transitions: dict[str, np.ndarray]) -> LearnerUpdate:
        """SACLearner.update, the actor's metrics averaged over the steps that updated the actor (none: left out)."""
        update = super().update(transitions)
        train_step.delayed_means(update.metrics, transitions["reward"].shape[0], ACTOR_METRICS)
        return update

    # ---- inside the tf.function -------------------------------------------------

    def _gradient_step(self, b):
        """One CrossQ step on one batch [B] -> (its METRICS, its numerics flags)."""
        terms, flags = self._critic_step(b)
        self.gradient_steps.assign_add(1)
        delayed = tf.equal(self.gradient_steps % self.config.policy_delay, 0)
        actor_values, actor_flags = tf.cond(delayed, lambda: self._actor_step(b["obs"], b["noise"]),
                                            lambda: (tf.zeros([len(ACTOR_METRICS)]), tf.constant(0)))
        values = {**terms, **dict(zip(ACTOR_METRICS, tf.unstack(actor_values))), "temperature": self._alpha_used,
                  "actor_updates": tf.cast(delayed, tf.float32)}
        return (tf.stack([tf.cast(values[name], tf.float32) for name in self.METRICS]),
                tf.bitwise.bitwise_or(flags, actor_flags))

    def _actor_step(self, obs, noise):
        """The actor's and the temperature's step -> (ACTOR_METRICS [3], numerics flags)."""
        (actor_grads, temperature_grads), terms = self._actor_gradients(obs, noise)
        flags = train_step.apply_gradients(self.actor_optimizer, actor_grads, self.actor.trainable_variables,
                                           terms["actor_loss"], terms["outputs_sum"])
        if self.config.learn_temperature:
            self.temperature_optimizer.apply(temperature_grads, [self.log_alpha])
        return tf.stack([tf.cast(terms[name], tf.float32) for name in ACTOR_METRICS]), flags

    def _critic_gradients_of(self, obs, action, reward, discount, next_obs, noise_next):
        """(critic gradients, terms) of one batch: the current and next state-actions in one training pass."""
        mean, log_std = tf.split(self.actor(next_obs, training=False), 2, axis=-1)
        next_action, next_log_prob = squashed_gaussian(mean, log_std, noise_next)
        rows = tf.shape(reward)[0]
        both_obs, both_actions = joint_rows(obs, next_obs), tf.concat([action, next_action], axis=0)
        with tf.GradientTape() as tape:
            (q1, q1_next), (q2, q2_next) = (
                tf.split(critic([both_obs, both_actions], training=True), [rows, rows]) for critic in self.critics)
            targets = soft_td_targets(reward, discount, q1_next, q2_next, next_log_prob, self._alpha_used)
            loss = critic_loss(q1, q2, targets)  # no gradient into the targets
            scaled = self.critic_optimizer.scale_loss(loss)
        terms = {"critic_loss": loss, "q_mean": 0.5 * (tf.reduce_mean(q1) + tf.reduce_mean(q2)),
                 "outputs_sum": tf.reduce_sum(q1) + tf.reduce_sum(q2) + tf.reduce_sum(targets)}
        return tape.gradient(scaled, self.critic_variables), terms

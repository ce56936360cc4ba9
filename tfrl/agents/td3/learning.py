"""TD3: the losses and the learner, K gradient steps per TF call (the networks are tfrl.models.networks').

Actions live in [-1, 1]^D inside the agent (the env gets them rescaled to its Box); the actor is deterministic,
a = tanh(...). One gradient step n (counted from 1 over the run), as SB3's TD3:

    noise = clip(target_policy_noise * N(0, I), -target_noise_clip, target_noise_clip)
    a' = clip(actor_target(s') + noise, -1, 1)                                         target policy smoothing
    y = r + discount * min_i Q_target_i(s', a')
    critic_loss = mse(Q_1(s, a_replay), y) + mse(Q_2(s, a_replay), y)
    if n % policy_delay == 0:                                                          delayed updates
        actor_loss = -mean(Q_1(s, actor(s)))                                           with the updated Q_1
        Q_target_i <- tau * Q_i + (1 - tau) * Q_target_i;  actor_target likewise

discount holds gamma and the termination mask (tfrl.replay). The smoothing noise comes in with the batch, drawn
in NumPy, so a call is a pure function of its inputs and the variables.
"""

from __future__ import annotations


import keras
import numpy as np
import tensorflow as tf

from tfrl.agents import train_step
from tfrl.agents.core import LearnerUpdate
from tfrl.agents.off_policy.networks import q_critic
from tfrl.agents.td3.config import TD3Config
from tfrl.agents.td3.networks import deterministic_actor
from tfrl.agents.td3.policy import ACTOR_KEY
from tfrl.envs import EnvInfo
from tfrl.hardware import precision, runtime as runtime_lib
from tfrl.models import normalization

METRICS = ("critic_loss", "actor_loss", "q_mean", "actor_updates")


def smoothed_target_actions(target_actions, noise, noise_std: float, noise_clip: float):
    """a' = clip(actor_target(s') + clip(noise_std * noise, -noise_clip, noise_clip), -1, 1)."""
    smoothing = tf.clip_by_value(noise_std * noise, -noise_clip, noise_clip)
    return tf.clip_by_value(target_actions + smoothing, -1.0, 1.0)


def td_targets(r_t, discount_t, q1_t, q2_t):
    """y = r + discount * min(Q_target_1, Q_target_2), each [B]."""
    return r_t + discount_t * tf.minimum(q1_t, q2_t)


def critic_loss(q1, q2, targets):
    """mse(Q_1, y) + mse(Q_2, y), as SB3's TD3 (SAC halves the sum); no gradient into the targets."""
    targets = tf.stop_gradient(targets)
    return tf.reduce_mean(tf.square(q1 - targets)) + tf.reduce_mean(tf.square(q2 - targets))


class TD3Learner:
    """Owns the actor and its target, the twin Q-networks and their targets, two Adam optimizers and the train
    step. All state is in tf.Variables (checkpoint_items())."""

    def __init__(self, config: TD3Config, env: EnvInfo, runtime: runtime_lib.Runtime, seed: int = 0):
        del seed  # the agent draws the batches and the noise
        self.config = config
        self._placement = train_step.Placement(runtime)
        self.check_runtime(config, runtime)
        size = env.action_size
        with self._placement.scope():
            self._build(config, env, size, runtime.options.mixed_precision)
        self.obs_normalizer = normalization.make(config, env.observations)
        observations = env.observations
        self.rows = train_step.RowLayout({
            "obs": (observations.row_shape, observations.numpy_dtype),
            "next_obs": (observations.row_shape, observations.numpy_dtype), "action": ((size,), tf.float32),
            "reward": ((), tf.float32), "discount": ((), tf.float32), "noise_next": ((size,), tf.float32)})
        self.output = train_step.OutputLayout(METRICS, self.acting_variables())
        self._critic_gradients = self._placement.batch_gradients(self._critic_gradients_of)
        self._actor_gradients = self._placement.batch_gradients(self._actor_gradients_of)
        self.train_step = self._placement.compile(self._train_step, [
            tf.TensorSpec([None, None, self.rows.width], tf.float32)])
        self._call = train_step.concrete_call(self.train_step)

    def _build(self, config: TD3Config, env: EnvInfo, size: int, precision_policy: str) -> None:
        hidden, init = config.hidden_sizes, config.layer_init
        self.actor = deterministic_actor(env.observations, size, hidden, layer_init=init)
        self.actor_target = deterministic_actor(env.observations, size, hidden, name="td3_actor_target")
        self.critics = [q_critic(env.observations, size, hidden, f"q{i}", init) for i in (1, 2)]
        self.target_critics = [q_critic(env.observations, size, hidden, f"q{i}_target") for i in (1, 2)]
        self.sync_target_networks()
        self.critic_variables = [v for critic in self.critics for v in critic.trainable_variables]
        clip = config.max_grad_norm or None
        self.actor_optimizer, self.critic_optimizer = (
            precision.built_optimizer(keras.optimizers.Adam(config.learning_rate, epsilon=config.adam_epsilon,
                                                            global_clipnorm=clip),
                                      variables, precision_policy)
            for variables in (self.actor.trainable_variables, self.critic_variables))
        self.gradient_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="gradient_steps")

    def acting_variables(self) -> list:
        """What a train call returns for the acting mirror, in its order: the actor's trainable variables."""
        return list(self.actor.trainable_variables)

    @staticmethod
    def check_runtime(config: TD3Config, runtime: runtime_lib.Runtime) -> None:
        """Each gradient step splits the worker's batch evenly over its replicas."""
        train_step.Placement(runtime).check_batch_split("batch_size", config.batch_size)

    def sync_target_networks(self) -> None:
        """Target networks := online networks (at the start, and after weights were loaded from elsewhere)."""
        self.actor_target.set_weights(self.actor.get_weights())
        for target, critic in zip(self.target_critics, self.critics):
            target.set_weights(critic.get_weights())

    def checkpoint_items(self) -> dict:
        return {ACTOR_KEY: self.actor, "actor_target": self.actor_target, "q1": self.critics[0],
                "q2": self.critics[1], "q1_target": self.target_critics[0], "q2_target": self.target_critics[1],
                "actor_optimizer": self.actor_optimizer, "critic_optimizer": self.critic_optimizer,
                "gradient_steps": self.gradient_steps, **normalization.checkpoint_items(self.obs_normalizer.layer)}

    def update(self, transitions: dict[str, np.ndarray]) -> LearnerUpdate:
        """One TF call of K gradient steps on `transitions`: K batches [K, B, ...] of obs, action (in [-1, 1]),
        reward, discount, next_obs and the standard-normal noise of the target policy's smoothing ("noise_next").
        Metrics: their means (actor_loss over the steps that updated the actor). Weights: the actor's."""
        num_steps = transitions["reward"].shape[0]
        flat = self._call(*self.rows.pack(transitions, batch_dims=2)).numpy()
        done = int(self.gradient_steps.numpy())
        update = train_step.finished_update(self.output, flat, self.critic_optimizer, "actions or Q-values",
                                            lambda k: done - num_steps + k + 1)
        train_step.delayed_means(update.metrics, num_steps, ["actor_loss"])
        return update

    # ---- inside the tf.function -------------------------------------------------

    def _train_step(self, packed):
        batch = self.rows.unpack([packed])  # each [K, B, ...]
        means, flags, flagged_k = train_step.mean_of_steps(batch, self._gradient_step, len(METRICS))
        return self.output.pack(dict(zip(METRICS, tf.unstack(means))), flags, flagged_k, self.acting_variables())

    def _gradient_step(self, b):
        """One TD3 step on one batch [B] -> (its METRICS, its numerics flags)."""
        grads, terms = self._critic_gradients(b["obs"], b["action"], b["reward"], b["discount"], b["next_obs"],
                                              b["noise_next"])
        flags = train_step.apply_gradients(self.critic_optimizer, grads, self.critic_variables,
                                           terms["critic_loss"], terms["outputs_sum"])
        self.gradient_steps.assign_add(1)
        delayed = tf.equal(self.gradient_steps % self.config.policy_delay, 0)
        actor_loss, actor_flags = tf.cond(delayed, lambda: self._delayed_update(b["obs"]),
                                          lambda: (tf.constant(0.0), tf.constant(0)))
        values = {**terms, "actor_loss": actor_loss, "actor_updates": tf.cast(delayed, tf.float32)}
        return (tf.stack([tf.cast(values[name], tf.float32) for name in METRICS]),
                tf.bitwise.bitwise_or(flags, actor_flags))

    def _delayed_update(self, obs):
        """The actor's step and the Polyak updates of every target -> (actor loss, numerics flags)."""
        actor_grads, actor_terms = self._actor_gradients(obs)
        flags = train_step.apply_gradients(self.actor_optimizer, actor_grads, self.actor.trainable_variables,
                                           actor_terms["actor_loss"], actor_terms["outputs_sum"])
        tau = self.config.target_update_tau
        for target, online in [(self.actor_target, self.actor), *zip(self.target_critics, self.critics)]:
            for target_var, var in zip(target.trainable_variables, online.trainable_variables):
                target_var.assign(tau * var + (1.0 - tau) * target_var)
        return tf.cast(actor_terms["actor_loss"], tf.float32), flags

    def _critic_gradients_of(self, obs, action, reward, discount, next_obs, noise_next):
        """(critic gradients, terms) of one batch (or a replica's shard)."""
        config = self.config
        next_action = smoothed_target_actions(self.actor_target(next_obs), noise_next, config.target_policy_noise,
                                              config.target_noise_clip)
        targets = td_targets(reward, discount, self.target_critics[0]([next_obs, next_action]),
                             self.target_critics[1]([next_obs, next_action]))
        with tf.GradientTape() as tape:
            q1, q2 = (critic([obs, action], training=True) for critic in self.critics)
            loss = critic_loss(q1, q2, targets)
            scaled = self.critic_optimizer.scale_loss(loss)
        terms = {"critic_loss": loss, "q_mean": 0.5 * (tf.reduce_mean(q1) + tf.reduce_mean(q2)),
                 "outputs_sum": tf.reduce_sum(q1) + tf.reduce_sum(q2) + tf.reduce_sum(targets)}
        return tape.gradient(scaled, self.critic_variables), terms

    def _actor_gradients_of(self, obs):
        """(actor gradients, {"actor_loss", "outputs_sum"}) of one batch (or shard), with the updated critics."""
        with tf.GradientTape() as tape:
            action = self.actor(obs, training=True)
            loss = -tf.reduce_mean(self.critics[0]([obs, action]))
            scaled = self.actor_optimizer.scale_loss(loss)
        return (tape.gradient(scaled, self.actor.trainable_variables),
                {"actor_loss": loss, "outputs_sum": tf.reduce_sum(action)})

"""DQN learner: the TD math, and a tf.function that runs K gradient steps per call.

Notation (Acme's): tm1 = "t minus 1", the transition's first step; t = its last.
    q_tm1 = Q_online(obs_tm1)                      # [B, A]
    target = r_t + discount_t * Q_target(obs_t, a*) # [B]
    a* = argmax_a Q_online(obs_t, a)   (double DQN)  or  argmax_a Q_target(obs_t, a)
    loss = mean_B huber(target - q_tm1[a_tm1])
discount_t already holds gamma^n and the termination mask (see tfrl.replay). Where the env masks actions
(tfrl.envs.observations), a* and the max range over obs_t's legal actions.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf

from tfrl.agents import train_step
from tfrl.agents.core import LearnerUpdate
from tfrl.agents.losses import huber
from tfrl.agents.dqn import policy as dqn_policy
from tfrl.agents.dqn.config import DQNConfig
from tfrl.envs import EnvInfo
from tfrl.errors import UsageError
from tfrl.hardware import precision, runtime as runtime_lib
from tfrl.models import networks, numerics
from tfrl.schedules import Schedule

def td_targets(r_t, discount_t, q_t_target, q_t_online=None, legal_t=None):
    """r_t [B], discount_t [B], q_t_* [B, A] -> [B]. With q_t_online, the double-DQN target. legal_t: bool [B, A],
    the next state's legal actions (an action mask): a* and the max range over those only, and a state without
    one (a last observation that nothing acts on) bootstraps from 0."""
    if legal_t is not None:
        q_t_online = None if q_t_online is None else tf.where(legal_t, q_t_online, tf.float32.min)
        q_t_target = q_t_target if q_t_online is not None else tf.where(legal_t, q_t_target, tf.float32.min)
    if q_t_online is None:
        v_t = tf.reduce_max(q_t_target, axis=-1)
    else:
        a_star = tf.argmax(q_t_online, axis=-1, output_type=tf.int32)  # [B]
        v_t = tf.gather(q_t_target, a_star, axis=1, batch_dims=1)  # [B]
    if legal_t is not None:
        v_t = tf.where(tf.reduce_any(legal_t, axis=-1), v_t, 0.0)
    return r_t + discount_t * v_t


def q_learning_loss(q_tm1, a_tm1, targets, weights=None):
    """q_tm1 [B, A], a_tm1 [B] int, targets [B] -> (mean Huber loss [], Q(s, a) [B]).

    weights [B]: importance-sampling weights (prioritized replay): loss = mean_B(w * huber(target - Q(s, a))).
    """
    q_a = tf.gather(q_tm1, a_tm1, axis=1, batch_dims=1)
    errors = huber(tf.stop_gradient(targets) - q_a)
    return tf.reduce_mean(errors if weights is None else weights * errors), q_a


class ReplayBatch(NamedTuple):
    """One train call's input: K batches from the replay, and whether the target network is updated first."""

    transitions: dict[str, np.ndarray]  # replay.sample(): obs, action, reward, discount, next_obs [K, B, ...],
    update_target: bool                 # and "weight" [K, B] with prioritized replay


def _learning_rate(config: DQNConfig):
    """learning_rate, falling linearly to final_learning_rate_fraction of it over the run's gradient steps: indexed
    by the optimizer's own step counter, so no Python runs per step and nothing retraces."""
    return Schedule(config.learning_rate, config.learning_rate * config.final_learning_rate_fraction,
                    config.total_gradient_steps).keras_schedule()


class DQNLearner:
    """Owns the online and target Q-networks, the optimizer and the train step.

    All state is in tf.Variables (networks, optimizer slots and loss scale, `gradient_steps`), so one
    tf.train.Checkpoint of `checkpoint_items()` saves it.

    Under a tf.distribute strategy (runtime.strategy) the variables are mirrored, and each gradient step
    splits the worker's batch of `batch_size` transitions across its replicas (tfrl.hardware.distribute).

    POLICY: the module that makes the networks (make_q_network); a distributional variant (tfrl.agents.qrdqn)
    names its own and overrides `_gradients`.
    """

    POLICY = dqn_policy

    def __init__(self, config: DQNConfig, env: EnvInfo, runtime: runtime_lib.Runtime, seed: int = 0):
        del seed  # the replay, not the learner, draws the batches
        self.config = config
        self._placement = train_step.Placement(runtime)
        self.check_runtime(config, runtime)
        with self._placement.scope():
            self.online = self.POLICY.make_q_network(config, env)
            self.target = self.POLICY.make_q_network(config, env, name=f"target_{self.online.name}")
            self.target.set_weights(self.online.get_weights())
            optimizer = keras.optimizers.Adam(_learning_rate(config), epsilon=config.adam_epsilon,
                                              global_clipnorm=config.max_grad_norm or None)
            self.optimizer = precision.built_optimizer(optimizer, self.online.trainable_variables,
                                                         runtime.options.mixed_precision)
            # The run's total so far (the checkpoint key stays "gradient_steps").
            self.gradient_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="gradient_steps")
        self.rows = train_step.RowLayout(self._row_fields(config, env))
        self.output = train_step.OutputLayout(("loss", "q_mean"), networks.acting_variables(self.online))
        self._batch_gradients = self._placement.batch_gradients(self._gradients)
        self.train_step = self._placement.compile(self._train_step, [
            *self.rows.signature(batch_dims=2),  # packed transitions [K, B, F] (and uint8 images [K, B, ...])
            tf.TensorSpec([], tf.bool),  # update_target (before the K steps)
        ])
        self._call = train_step.concrete_call(self.train_step)

    def _row_fields(self, config: DQNConfig, env: EnvInfo) -> dict:
        """What one row of a batch holds (train_step.RowLayout's fields): a transition."""
        observations = env.observations
        fields = {"obs": (observations.row_shape, observations.numpy_dtype),
                  "next_obs": (observations.row_shape, observations.numpy_dtype),
                  "action": ((), tf.int32), "reward": ((), tf.float32), "discount": ((), tf.float32)}
        if config.prioritized_replay:  # importance-sampling weights in, |TD errors| out
            fields["weight"] = ((), tf.float32)
        return fields

    @staticmethod
    def check_runtime(config: DQNConfig, runtime: runtime_lib.Runtime) -> None:
        """Each gradient step splits the worker's `batch_size` transitions evenly over its replicas; prioritized
        replay needs every row's TD error back, which the replicas' mean does not keep."""
        train_step.Placement(runtime).check_batch_split("batch_size", config.batch_size)
        if config.prioritized_replay and runtime.strategy is not None:
            raise UsageError("prioritized_replay is not supported with a --strategy: it needs every row's TD "
                             "error, and the replicas return their mean")

    def sync_target_networks(self) -> None:
        """Target network := online network, after the online one was loaded from elsewhere (tfrl.run.warm_start)."""
        self.target.set_weights(self.online.get_weights())

    def checkpoint_items(self) -> dict:
        return {dqn_policy.ONLINE_KEY: self.online, "target": self.target, "optimizer": self.optimizer,
                "gradient_steps": self.gradient_steps}

    def update(self, batch: ReplayBatch) -> LearnerUpdate:
        """One TF call: the target update if due, then K = len(batch.transitions["action"]) gradient steps.

        Metrics: the mean loss and mean Q(s, a) over the K steps. Weights: the online network's. Row errors
        (prioritized replay): |TD error| of every row [K, B], before its step.
        """
        num_steps = batch.transitions["action"].shape[0]
        flat = self._call(*self.rows.pack(batch.transitions, batch_dims=2), batch.update_target).numpy()
        done = int(self.gradient_steps.numpy())
        update = train_step.finished_update(self.output, flat, self.optimizer, "Q-values",
                                            lambda k: done - num_steps + k + 1)
        if update.row_errors is not None:
            update = dataclasses.replace(update, row_errors=update.row_errors.reshape(batch.transitions["action"].shape))
        return update

    # ---- inside the tf.function -------------------------------------------------

    def _train_step(self, *inputs):
        """(*packed transitions [K, B, ...], update_target) -> OutputLayout: mean loss and Q(s, a) over the K
        steps, flags, online weights (for the NumPy mirror)."""
        *packed, update_target = inputs
        if update_target:
            self._update_target()
        batch = self.rows.unpack(packed)  # each [K, B, ...]
        num_steps, batch_size = tf.shape(packed[0])[0], tf.shape(packed[0])[1]
        # Q_target(s_t) of all K batches at once: the target network does not change during the call, and the
        # values come from one large forward pass instead of K small ones.
        q_t_target = tf.reshape(self.target(networks.merge_leading(networks.network_input(batch["next_obs"]))),
                                [num_steps, batch_size, -1])  # [K, B, A]
        weighted = "weight" in batch

        def inputs_at(k):
            step_batch = [networks.rows_at(batch["obs"], k), batch["action"][k], batch["reward"][k],
                          batch["discount"][k], networks.rows_at(batch["next_obs"], k), q_t_target[k]]
            return step_batch + ([batch["weight"][k]] if weighted else [])

        means, flags, flagged_k, td_errors = self._gradient_steps(num_steps, inputs_at, keep_td_errors=weighted)
        return self.output.pack(means, flags, flagged_k, networks.acting_variables(self.online), td_errors)

    def _gradient_steps(self, num_steps, inputs_at, keep_td_errors: bool = False):
        """The call's K gradient steps, inputs_at(k) -> the k-th step's _gradients arguments -> ({"loss",
        "q_mean"}: their means over the steps, the first flagged step's flags, that step k, |TD errors| [K, B]
        with keep_td_errors, else None)."""
        loss_sum, q_sum = tf.constant(0.0), tf.constant(0.0)
        flags, flagged_k = tf.constant(0), tf.constant(0)
        td_errors = tf.TensorArray(tf.float32, size=num_steps)  # [K] of [B]; written with keep_td_errors only
        for k in tf.range(num_steps):
            grads, terms = self._batch_gradients(*inputs_at(k))
            step_flags = train_step.apply_gradients(self.optimizer, grads, self.online.trainable_variables,
                                                    terms["loss"], terms["q_sum"])
            self.gradient_steps.assign_add(1)
            loss_sum += terms["loss"]
            q_sum += terms["q_mean"]
            flags, flagged_k = numerics.keep_first_flags(flags, flagged_k, step_flags, k)
            if keep_td_errors:
                td_errors = td_errors.write(k, terms["td_abs"])
        count = tf.cast(tf.maximum(num_steps, 1), tf.float32)
        return ({"loss": loss_sum / count, "q_mean": q_sum / count}, flags, flagged_k,
                td_errors.stack() if keep_td_errors else None)

    def _gradients(self, obs_tm1, a_tm1, r_t, discount_t, obs_t, q_t_target, weights=None):
        """(loss-scaled gradients, {"loss", "q_mean": mean Q(s, a), "q_sum": sum of Q(s, .)}) of one batch [B];
        with importance-sampling weights [B] (prioritized replay), also "td_abs": |target - Q(s, a)| [B]."""
        q_t_online = self.online(networks.network_input(obs_t)) if self.config.double_dqn else None
        targets = td_targets(r_t, discount_t, q_t_target, q_t_online, networks.legal_mask(obs_t))  # [B]
        with tf.GradientTape() as tape:
            q_tm1 = self.online(networks.network_input(obs_tm1), training=True)  # [B, A], float32 always
            loss, q_a = q_learning_loss(q_tm1, a_tm1, targets, weights)
            scaled_loss = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled_loss, self.online.trainable_variables)
        # q_sum: one scalar for the numeric guard; a NaN or Inf in any Q-value survives the sum (and a replica mean).
        terms = {"loss": loss, "q_mean": tf.reduce_mean(q_a), "q_sum": tf.reduce_sum(q_tm1)}
        if weights is not None:
            terms["td_abs"] = tf.abs(tf.stop_gradient(targets - q_a))
        return grads, terms

    def _update_target(self):
        tau = self.config.target_update_tau
        for target_var, online_var in zip(self.target.trainable_variables, self.online.trainable_variables):
            target_var.assign(tau * online_var + (1.0 - tau) * target_var)

"""A2C: the loss and the learner, one gradient step per rollout in one TF call.

The rollout's advantages A_t and value targets G_t come from tfrl.agents.actor_critic.advantages (n-step
returns with gae_lambda = 1, GAE otherwise). One update is one gradient step on the whole rollout:

    loss = -mean_B(log pi(a|s) * A) + value_coef * mean_B((G - V(s))^2) - entropy_coef * mean_B(H(pi(.|s)))
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tfrl.agents import train_step
from tfrl.agents.a2c.config import A2CConfig
from tfrl.agents.actor_critic import learning as ac_learning, policy as ac_policy, recurrent
from tfrl.agents.actor_critic.heads import make_head
from tfrl.agents.actor_critic.networks import make_network
from tfrl.agents.actor_critic.rollout import Rollout
from tfrl.agents.core import LearnerUpdate
from tfrl.envs import EnvInfo
from tfrl.hardware import precision, runtime as runtime_lib
from tfrl.models import networks, normalization

METRICS = ("loss", "policy_loss", "value_loss", "entropy", "grad_norm")


def a2c_loss(head, policy_params, values, actions, advantages, returns, value_coef: float, entropy_coef: float,
             legal=None):
    """policy_params [B, P], values [B], actions [B], advantages [B], returns [B] -> (loss [], terms). legal: the
    action mask (bool [B, A]), under which pi and its entropy range over the legal actions only.

    terms: {"policy_loss", "value_loss", "entropy"} (scalars; entropy is the batch mean, in nats).
    advantages and returns are constants: no gradient flows into them.
    """
    advantages = tf.stop_gradient(advantages)
    policy_loss = -tf.reduce_mean(head.log_prob(policy_params, actions, legal) * advantages)
    value_loss = tf.reduce_mean(tf.square(tf.stop_gradient(returns) - values))
    entropy = tf.reduce_mean(head.entropy(policy_params, legal))
    loss = policy_loss + value_coef * value_loss - entropy_coef * entropy
    return loss, {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy}


def _make_optimizer(config: A2CConfig) -> keras.optimizers.Optimizer:
    clip = config.max_grad_norm or None  # global norm over all gradients, after loss-scale unscaling
    if config.optimizer == "rmsprop":
        # PyTorch/SB3 divide by sqrt(v) + eps, Keras by sqrt(v + epsilon): eps**2 inside the root
        # gives the same floor on the denominator (within a factor sqrt(2) where sqrt(v) ~ eps).
        return keras.optimizers.RMSprop(config.learning_rate, rho=config.rmsprop_decay,
                                        epsilon=config.rmsprop_epsilon ** 2, global_clipnorm=clip)
    return keras.optimizers.Adam(config.learning_rate, epsilon=config.adam_epsilon, global_clipnorm=clip)


class A2CLearner:
    """Owns the actor-critic network, the optimizer and the train step.

    All state is in tf.Variables (network, optimizer slots, learning rate and loss scale, `updates`), so one
    tf.train.Checkpoint of `checkpoint_items()` saves it.

    Under a tf.distribute strategy (runtime.strategy) the variables are mirrored, and each update splits the
    worker's rollout across its replicas (tfrl.hardware.distribute).
    """

    def __init__(self, config: A2CConfig, env: EnvInfo, runtime: runtime_lib.Runtime, seed: int = 0):
        del seed  # A2C's update draws no random numbers
        self.config = config
        self.head = make_head(env)
        self._placement = train_step.Placement(runtime)
        self.check_runtime(config, runtime)
        with self._placement.scope():
            self.network = make_network(config, env, self.head)
            self.optimizer = precision.built_optimizer(_make_optimizer(config), self.network.trainable_variables,
                                                         runtime.options.mixed_precision)
            self.updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")
        self.obs_normalizer = normalization.make(config, env.observations)  # the agent updates it while collecting
        self.rows = ac_learning.rollout_rows(env.observations, self.head, with_log_probs=False,
                                             state_size=recurrent.state_size_of(config))
        self._forward = ac_learning.training_forward(self.network, config)
        # With memory the rows go in as whole env sequences (row n * T + t is step t of env n), not t * N + n.
        self._order = (recurrent.sequence_rows(config.rollout_length, config.num_envs, config.rollout_length).reshape(-1)
                       if config.recurrent else None)
        self.output = train_step.OutputLayout(METRICS, networks.acting_variables(self.network))
        self._batch_gradients = self._placement.batch_gradients(self._gradients)
        self.train_step = self._placement.compile(self._train_step, [
            *self.rows.signature(batch_dims=1),  # the rollout [B, F] (and its uint8 images [B, ...])
            # An input rather than a Python number, so a decaying rate never retraces.
            tf.TensorSpec([], tf.float32, name="learning_rate"),
        ])
        self._call = train_step.concrete_call(self.train_step)

    @staticmethod
    def check_runtime(config: A2CConfig, runtime: runtime_lib.Runtime) -> None:
        """Each update splits the worker's rollout (with memory: its envs' sequences) evenly over its replicas."""
        if config.recurrent:
            train_step.Placement(runtime).check_batch_split("num_envs (one sequence each)", config.num_envs)
        else:
            train_step.Placement(runtime).check_batch_split("num_envs * rollout_length", config.rollout_size)

    def checkpoint_items(self) -> dict:
        return {ac_policy.NETWORK_KEY: self.network, "optimizer": self.optimizer, "updates": self.updates,
                **normalization.checkpoint_items(self.obs_normalizer.layer)}

    def update(self, rollout: Rollout) -> LearnerUpdate:
        """One TF call: one gradient step on the flattened rollout [B = T * N], at the step size of the
        learning-rate schedule at the rollout's start (logged as "learning_rate")."""
        learning_rate = ac_learning.learning_rate_at(rollout.start_env_step, self.config)
        rows = rollout.rows()
        if self._order is not None:
            rows = {name: values[self._order] for name, values in rows.items()}
        flat = self._call(*self.rows.pack(rows, batch_dims=1), np.float32(learning_rate)).numpy()
        update = train_step.finished_update(self.output, flat, self.optimizer, "policy logits or values",
                                            lambda k: int(self.updates.numpy()))
        update.metrics["learning_rate"] = learning_rate
        return update

    # ---- inside the tf.function -------------------------------------------------

    def _train_step(self, *inputs):
        *rollout, learning_rate = inputs
        self.optimizer.learning_rate.assign(learning_rate)
        batch = self.rows.unpack(rollout)
        advantages = batch["advantage"]
        if self.config.normalize_advantage:
            # Over the worker's whole rollout, also under a strategy, rather than over each replica's shard.
            advantages = ac_learning.normalized(advantages)
        grads, terms = self._batch_gradients(batch["obs"], batch["action"], advantages, batch["return"],
                                             *ac_learning.memory_of(batch))
        metrics, flags = ac_learning.apply_step(self.optimizer, grads, self.network.trainable_variables, terms)
        self.updates.assign_add(1)
        return self.output.pack(metrics, flags, 0, networks.acting_variables(self.network))

    def _gradients(self, obs, actions, advantages, returns, *memory):
        """(loss-scaled gradients, {"loss", "policy_loss", "value_loss", "entropy", "outputs_sum"}) of one batch;
        memory: its rows' (states, starts) with lstm_units."""
        return ac_learning.loss_gradients(
            self._forward, self.network, self.optimizer, obs, memory,
            lambda policy_params, values, legal: a2c_loss(self.head, policy_params, values, actions, advantages,
                                                          returns, self.config.value_coef, self.config.entropy_coef,
                                                          legal))

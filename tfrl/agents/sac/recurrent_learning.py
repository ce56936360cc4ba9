"""The learner of SAC with memory (lstm_units > 0): SACLearner's optimizers, temperature, target updates, checkpoint
and K-steps-per-call loop, with recurrent networks trained along windows of the sequence replay (the math:
tfrl.agents.sac.recurrent's docstring).

One gradient step takes C = batch_size / sequence_length windows; each loss is the mean over their trained rows
that have an action (an episode's last row has none). The stored state of a window's first row is [actor | critic
1 | critic 2]; each target critic starts from its critic's.

Under a tf.distribute strategy each replica takes an equal share of the windows (tfrl.agents.off_policy.training.
check_windows) and its mean is over its own rows; the replicas' gradients are averaged.
"""

from __future__ import annotations

import functools

import keras
import tensorflow as tf

from tfrl.agents.sac import recurrent
from tfrl.agents.sac.config import SACConfig
from tfrl.agents.sac.learning import SACLearner, soft_td_targets, squashed_gaussian
from tfrl.envs import EnvInfo
from tfrl.models import networks

_rows = networks.merge_leading  # [C, L, ...] -> [C * L, ...]: the rows of all windows as one batch


class RecurrentSACLearner(SACLearner):
    @staticmethod
    def _make_actor(config: SACConfig, env: EnvInfo, size: int) -> keras.Model:
        return recurrent.recurrent_actor(env.observations, size, config.hidden_sizes, config.lstm_units,
                                         layer_init=config.layer_init)

    @staticmethod
    def _make_critics(config: SACConfig, env: EnvInfo, size: int) -> tuple[list, list]:
        def critic(name, layer_init=config.layer_init):
            return recurrent.recurrent_critic(env.observations, size, config.hidden_sizes, config.lstm_units, name,
                                              layer_init)

        return [critic(f"q{i}") for i in (1, 2)], [critic(f"q{i}_target") for i in (1, 2)]

    @staticmethod
    def _row_fields(config: SACConfig, env: EnvInfo, size: int) -> dict:
        """One window per row (SequenceReplay.sample's fields), and the noise of the actions sampled at the
        bootstrap rows ("noise_next") and at the trained rows ("noise")."""
        observations, window, length = env.observations, config.window_steps, config.sequence_length
        return {"obs": ((window, *observations.row_shape), observations.numpy_dtype),
                "state": ((6 * config.lstm_units,), tf.float32), "start": ((window,), tf.float32),
                "action": ((length, size), tf.float32), "return": ((length,), tf.float32),
                "discount": ((length,), tf.float32), "bootstrap": ((length,), tf.int32),
                "valid": ((length,), tf.float32), "noise_next": ((length, size), tf.float32),
                "noise": ((length, size), tf.float32)}

    def acting_variables(self) -> list:
        return recurrent.acting_variables(self.actor, self.critics)

    # Made when the train step is first traced (in SACLearner.__init__, once the networks exist).
    @functools.cached_property
    def _actor_along(self) -> recurrent.ActorAlong:
        return recurrent.ActorAlong(self.actor, self.config.burn_in)

    @functools.cached_property
    def _critics_along(self) -> list:
        return [recurrent.CriticAlong(model, self.config.burn_in) for model in (*self.critics, *self.target_critics)]

    @staticmethod
    def _critic_inputs(b) -> tuple:
        return (b["obs"], b["state"], b["start"], b["action"], b["return"], b["discount"], b["bootstrap"],
                b["valid"], b["noise_next"])

    @staticmethod
    def _actor_inputs(b) -> tuple:
        return b["obs"], b["state"], b["start"], b["valid"], b["noise"]

    def _states(self, state):
        """[C, 6U] -> the actor's, critic 1's and critic 2's stored states, [C, 2U] each."""
        return tf.split(state, 3, axis=-1)

    def _policy_along(self, obs, state, start, noise, rows):
        """The actor along the windows, its actions sampled at `rows` [C, L] (counted from the first trained row)
        with noise [C, L, D] -> (actions, log pi) of C * L rows."""
        mean, log_std = self._actor_along(obs, state, start, training=True)
        at = [_rows(tf.gather(part, rows, axis=1, batch_dims=1)) for part in (mean, log_std)]
        return squashed_gaussian(*at, _rows(noise))

    def _critic_gradients_of(self, obs, state, start, action, returns, discount, bootstrap, valid, noise_next):
        """(critic gradients, terms) of C windows (or a replica's shard)."""
        actor_state, *critic_states = self._states(state)
        online, target = self._critics_along[:2], self._critics_along[2:]
        next_action, next_log_prob = self._policy_along(obs, actor_state, start, noise_next, bootstrap)
        q_next = [along.q(_rows(tf.gather(along.states(obs, s, start), bootstrap, axis=1, batch_dims=1)), next_action)
                  for along, s in zip(target, critic_states)]
        targets = tf.stop_gradient(soft_td_targets(_rows(returns), _rows(discount), *q_next, next_log_prob,
                                                   self._alpha_used))
        weights = _rows(valid)
        length = self.config.sequence_length
        with tf.GradientTape() as tape:
            q1, q2 = (along.q(_rows(along.states(obs, s, start, training=True)[:, :length]), _rows(action))
                      for along, s in zip(online, critic_states))
            loss = 0.5 * (_mean(tf.square(q1 - targets), weights) + _mean(tf.square(q2 - targets), weights))
            scaled = self.critic_optimizer.scale_loss(loss)
        terms = {"critic_loss": loss, "q_mean": 0.5 * (_mean(q1, weights) + _mean(q2, weights)),
                 "outputs_sum": tf.reduce_sum(q1) + tf.reduce_sum(q2) + tf.reduce_sum(targets)}
        return tape.gradient(scaled, self.critic_variables), terms

    def _actor_and_temperature_gradients(self, obs, state, start, valid, noise):
        """((actor gradients, [log_alpha gradient]), terms) of C windows, with the updated critics."""
        actor_state, *critic_states = self._states(state)
        length = self.config.sequence_length
        trained = tf.broadcast_to(tf.range(length), tf.shape(valid))
        hs = [tf.stop_gradient(_rows(along.states(obs, s, start)[:, :length]))
              for along, s in zip(self._critics_along[:2], critic_states)]
        weights = _rows(valid)
        with tf.GradientTape() as tape:
            action, log_prob = self._policy_along(obs, actor_state, start, noise, trained)
            q1, q2 = (along.q(h, action) for along, h in zip(self._critics_along[:2], hs))
            loss = _mean(self._alpha_used * log_prob - tf.minimum(q1, q2), weights)
            scaled = self.actor_optimizer.scale_loss(loss)
        with tf.GradientTape() as temperature_tape:
            t_loss = -_mean(self.log_alpha * tf.stop_gradient(log_prob + self.target_entropy), weights)
            scaled_t = self.temperature_optimizer.scale_loss(t_loss)
        grads = (tape.gradient(scaled, self.actor.trainable_variables),
                 temperature_tape.gradient(scaled_t, [self.log_alpha]))
        terms = {"actor_loss": loss, "temperature_loss": t_loss, "entropy": -_mean(log_prob, weights),
                 "outputs_sum": tf.reduce_sum(action) + tf.reduce_sum(log_prob)}
        return grads, terms


def _mean(values, weights):
    """The mean of values [R] over the rows whose weight [R] is 1."""
    return tf.reduce_sum(values * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)

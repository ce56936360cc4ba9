"""The learner of DQN with memory (lstm_units > 0): the online and target recurrent Q-networks trained on windows
of the sequence replay (the math: tfrl.agents.dqn.recurrent's docstring), K gradient steps per tf.function call.

One gradient step takes C = batch_size / sequence_length windows; its loss is the mean Huber TD error over their
trained rows that have an action (an episode's last row has none). The target network's values of all K batches
come from one pass before the steps, as in tfrl.agents.dqn.learning.

Under a tf.distribute strategy each replica takes an equal share of the windows (tfrl.agents.off_policy.training.
check_windows) and its mean is over its own rows; the replicas' gradients are averaged.
"""

from __future__ import annotations

import functools

import tensorflow as tf

from tfrl.agents.dqn.config import DQNConfig
from tfrl.agents.dqn.learning import DQNLearner, td_targets
from tfrl.agents.dqn.recurrent import SequenceQ
from tfrl.agents.losses import huber
from tfrl.envs import EnvInfo
from tfrl.models import networks

_rows = networks.merge_leading  # [C, L, ...] -> [C * L, ...]: the rows of all windows as one batch


class RecurrentDQNLearner(DQNLearner):
    """DQNLearner's networks, optimizer, target update, checkpoint and update(), with a train step along windows."""

    # Made when the train step is first traced (in DQNLearner.__init__, once the networks exist).
    @functools.cached_property
    def _online_pass(self) -> SequenceQ:
        return SequenceQ(self.online, self.config.burn_in)

    @functools.cached_property
    def _target_pass(self) -> SequenceQ:
        return SequenceQ(self.target, self.config.burn_in)

    def _row_fields(self, config: DQNConfig, env: EnvInfo) -> dict:
        """One window per row (tfrl.replay.sequences.SequenceReplay.sample's fields)."""
        observations, window, length = env.observations, config.window_steps, config.sequence_length
        return {"obs": ((window, *observations.row_shape), observations.numpy_dtype),
                "state": ((2 * config.lstm_units,), tf.float32), "start": ((window,), tf.float32),
                "action": ((length,), tf.int32), "return": ((length,), tf.float32),
                "discount": ((length,), tf.float32), "bootstrap": ((length,), tf.int32),
                "valid": ((length,), tf.float32)}

    def _train_step(self, *inputs):
        """(*packed windows [K, C, ...], update_target) -> OutputLayout: mean loss and Q(s, a) over the K steps,
        flags, online weights."""
        *packed, update_target = inputs
        if update_target:
            self._update_target()
        batch = self.rows.unpack(packed)  # each [K, C, ...]
        num_steps, windows = tf.shape(packed[0])[0], tf.shape(packed[0])[1]
        merged = {name: _rows(batch[name]) for name in ("obs", "state", "start")}
        q_target = self._target_pass(merged["obs"], merged["state"], merged["start"])  # [K * C, T, A]
        q_target = tf.reshape(q_target, [num_steps, windows, -1, q_target.shape[-1]])
        fields = ("obs", "state", "start", "action", "return", "discount", "bootstrap", "valid")
        means, flags, flagged_k, _ = self._gradient_steps(
            num_steps, lambda k: [networks.rows_at(batch[name], k) for name in fields] + [q_target[k]])
        return self.output.pack(means, flags, flagged_k, networks.acting_variables(self.online))

    def _gradients(self, obs, state, start, action, returns, discount, bootstrap, valid, q_target):
        """(loss-scaled gradients, {"loss", "q_mean", "q_sum"}) of C windows; q_target [C, T, A]: the target
        network's values of the rows after the burn-in."""
        length = self.config.sequence_length
        legal = networks.legal_mask(obs)  # [C, W, A] or None
        if legal is not None:
            legal = _rows(tf.gather(legal[:, self.config.burn_in:], bootstrap, axis=1, batch_dims=1))
        q_bootstrap = _rows(tf.gather(q_target, bootstrap, axis=1, batch_dims=1))  # [C * L, A]
        valid = _rows(valid)
        with tf.GradientTape() as tape:
            q = self._online_pass(obs, state, start, training=True)  # [C, T, A], T = L + n
            q_online = _rows(tf.gather(tf.stop_gradient(q), bootstrap, axis=1, batch_dims=1)) \
                if self.config.double_dqn else None
            targets = td_targets(_rows(returns), _rows(discount), q_bootstrap, q_online, legal)  # [C * L]
            q_a = tf.gather(_rows(q[:, :length]), _rows(action), axis=1, batch_dims=1)  # [C * L]
            errors = huber(tf.stop_gradient(targets) - q_a) * valid
            loss = tf.reduce_sum(errors) / tf.maximum(tf.reduce_sum(valid), 1.0)
            scaled_loss = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled_loss, self.online.trainable_variables)
        terms = {"loss": loss, "q_mean": tf.reduce_sum(q_a * valid) / tf.maximum(tf.reduce_sum(valid), 1.0),
                 "q_sum": tf.reduce_sum(q)}
        return grads, terms

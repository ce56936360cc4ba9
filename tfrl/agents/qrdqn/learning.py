"""QR-DQN learner: DQN's train call (K gradient steps per tf.function call, the target update, prioritized
replay) with the quantile regression loss of Dabney et al. 2018.

Notation (Acme's; N quantiles at the midpoints tau_i = (2i + 1) / (2N)):
    theta_tm1 = Z_online(obs_tm1)[a_tm1]                        # [B, N]  the quantiles of the taken action
    a*        = argmax_a mean_j Z(obs_t)[a, j]                  # [B]     Z: the target network's (double_dqn: online)
    T_t       = r_t + discount_t * Z_target(obs_t)[a*]          # [B, N]  the target quantiles
    u_ij      = T_t[j] - theta_tm1[i]                           # [B, N, N]
    loss      = mean_B sum_i mean_j rho_ij                      (tfrl.agents.losses; eq. 10 of the paper)
discount_t already holds gamma^n and the termination mask (tfrl.replay). Where the env masks actions, a* ranges
over obs_t's legal actions, and a state without one bootstraps from 0. With prioritized replay a row's priority
is its loss (sum_i mean_j rho_ij) and the loss is weighted by the importance-sampling weights.
"""

from __future__ import annotations

import tensorflow as tf

from tfrl.agents.dqn.learning import DQNLearner
from tfrl.agents.qrdqn import policy as qrdqn_policy
from tfrl.agents.losses import quantile_huber_loss
from tfrl.models import networks


def quantile_td_targets(r_t, discount_t, z_t_target, z_t_online=None, legal_t=None):
    """r_t [B], discount_t [B], z_t_* [B, A, N] -> the target quantiles [B, N]. With z_t_online, a* is picked by
    the online network's means (double DQN). legal_t: bool [B, A], the next state's legal actions."""
    q_t = tf.reduce_mean(z_t_target if z_t_online is None else z_t_online, axis=-1)  # [B, A]
    if legal_t is not None:
        q_t = tf.where(legal_t, q_t, tf.float32.min)
    a_star = tf.argmax(q_t, axis=-1, output_type=tf.int32)  # [B]
    z_star = tf.gather(z_t_target, a_star, axis=1, batch_dims=1)  # [B, N]
    if legal_t is not None:
        z_star = tf.where(tf.reduce_any(legal_t, axis=-1, keepdims=True), z_star, 0.0)
    return r_t[:, None] + discount_t[:, None] * z_star


class QRDQNLearner(DQNLearner):
    """DQNLearner with the quantile network and loss; its variables, checkpoint and train call are DQN's."""

    POLICY = qrdqn_policy

    def _gradients(self, obs_tm1, a_tm1, r_t, discount_t, obs_t, q_t_target, weights=None):
        """As DQNLearner._gradients, for quantiles: q_t_target comes as [B, A * N] (DQN's call flattens the
        target network's outputs per row)."""
        num_actions, num_quantiles = self.online.output.shape[1], self.online.output.shape[2]
        z_t_target = tf.reshape(q_t_target, [-1, num_actions, num_quantiles])
        z_t_online = self.online(networks.network_input(obs_t)) if self.config.double_dqn else None
        targets = quantile_td_targets(r_t, discount_t, z_t_target, z_t_online, networks.legal_mask(obs_t))  # [B, N]
        with tf.GradientTape() as tape:
            z_tm1 = self.online(networks.network_input(obs_tm1), training=True)  # [B, A, N], float32 always
            theta_tm1 = tf.gather(z_tm1, a_tm1, axis=1, batch_dims=1)  # [B, N]
            row_losses = quantile_huber_loss(theta_tm1, targets, self.config.quantile_huber_kappa)  # [B]
            loss = tf.reduce_mean(row_losses if weights is None else weights * row_losses)
            scaled_loss = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled_loss, self.online.trainable_variables)
        # q_sum: one scalar for the numeric guard; a NaN or Inf in any quantile survives the sum.
        terms = {"loss": loss, "q_mean": tf.reduce_mean(theta_tm1), "q_sum": tf.reduce_sum(z_tm1)}
        if weights is not None:
            terms["td_abs"] = tf.stop_gradient(row_losses)
        return grads, terms

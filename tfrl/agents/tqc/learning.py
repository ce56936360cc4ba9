"""TQC learner: SAC's train call (K gradient steps per tf.function call, the actor, the temperature, Polyak targets)
with truncated quantile critics.

Notation (Acme's; C critics of N quantiles, d dropped per critic, alpha the temperature):
    a', log pi(a'|s_t) = pi(s_t)                                     sampled with the batch's noise
    z_t      = sort(concat_c Z_target_c(s_t, a'))[: C (N - d)]       # [B, C (N - d)]  the smallest atoms
    y_t      = r_t + discount_t * (z_t - alpha * log pi(a'|s_t))     # [B, C (N - d)]
    critic   = mean_{B, c, i, j} rho(y_t[j] - Z_c(s_tm1, a_tm1)[i])  (tfrl.agents.losses; sb3-contrib's mean)
    actor    = mean_B(alpha * log pi(a|s) - mean_{c, i} Z_c(s, a)),  a ~ pi(s)
discount_t already holds gamma and the termination mask (tfrl.replay). The temperature's loss is SAC's.
"""

from __future__ import annotations

import tensorflow as tf

from tfrl.agents.losses import quantile_huber_loss
from tfrl.agents.off_policy.networks import q_critic
from tfrl.agents.sac.learning import SACLearner
from tfrl.agents.tqc.config import TQCConfig
from tfrl.envs import EnvInfo


def truncated_targets(r_t, discount_t, z_t, next_log_prob, alpha, kept: int):
    """r_t, discount_t, next_log_prob [B], z_t [B, C, N] (the target critics at (s', a')), alpha [] -> the target
    atoms [B, kept]: the `kept` smallest of the C * N pooled quantiles, less alpha log pi, discounted."""
    pooled = tf.reshape(z_t, [tf.shape(z_t)[0], -1])  # [B, C N]
    smallest = -tf.math.top_k(-pooled, k=kept, sorted=True).values  # [B, kept], ascending
    return r_t[:, None] + discount_t[:, None] * (smallest - alpha * next_log_prob[:, None])


def critic_loss(z_tm1, targets):
    """z_tm1 [B, C, N] (every critic's quantiles at (s, a)), targets [B, M] -> the mean of rho over the batch, the
    critics, the quantiles and the target atoms."""
    num_critics, num_quantiles = z_tm1.shape[1], z_tm1.shape[2]
    theta = tf.reshape(z_tm1, [-1, num_quantiles])  # [B C, N]
    rows = quantile_huber_loss(theta, tf.repeat(targets, num_critics, axis=0))  # [B C]: sum_i mean_j rho
    return tf.reduce_mean(rows) / num_quantiles


def actor_loss(log_prob, z, alpha):
    """log_prob [B], z [B, C, N] (the critics at (s, a ~ pi)) -> mean(alpha log pi - mean_{c, i} Z)."""
    return tf.reduce_mean(alpha * log_prob - tf.reduce_mean(z, axis=[1, 2]))


class TQCLearner(SACLearner):
    """SACLearner with num_critics quantile critics: the critics' loss, the target and the actor's objective are
    TQC's; the variables, optimizers, checkpoint keys (q1..qC, q1_target..) and the train call are SAC's."""

    @staticmethod
    def _make_critics(config: TQCConfig, env: EnvInfo, size: int) -> tuple[list, list]:
        hidden, init, outputs = config.hidden_sizes, config.layer_init, config.num_quantiles
        ids = range(1, config.num_critics + 1)
        return ([q_critic(env.observations, size, hidden, f"q{i}", init, num_outputs=outputs) for i in ids],
                [q_critic(env.observations, size, hidden, f"q{i}_target", num_outputs=outputs) for i in ids])

    def _quantiles(self, critics, obs, action, training=False):
        return tf.stack([critic([obs, action], training=training) for critic in critics], axis=1)  # [B, C, N]

    def _critic_gradients_of(self, obs, action, reward, discount, next_obs, noise_next):
        """(critic gradients, terms) of one batch (or a replica's shard)."""
        alpha = self._alpha_used
        next_action, next_log_prob = self._policy(next_obs, noise_next)
        targets = truncated_targets(reward, discount, self._quantiles(self.target_critics, next_obs, next_action),
                                    next_log_prob, alpha, self.config.kept_target_quantiles)
        with tf.GradientTape() as tape:
            z = self._quantiles(self.critics, obs, action, training=True)
            loss = critic_loss(z, targets)
            scaled = self.critic_optimizer.scale_loss(loss)
        terms = {"critic_loss": loss, "q_mean": tf.reduce_mean(z),
                 "outputs_sum": tf.reduce_sum(z) + tf.reduce_sum(targets)}
        return tape.gradient(scaled, self.critic_variables), terms

    def _actor_loss(self, obs, action, log_prob):
        """The actor's objective: the temperature term less the mean of every critic's quantiles."""
        return actor_loss(log_prob, self._quantiles(self.critics, obs, action), self._alpha_used)

"""Losses the agent families share: the Huber loss (DQN's TD errors), and the quantile regression of the
distributional agents (QR-DQN, TQC): the quantile midpoints and the quantile Huber loss of Dabney et al. 2018
(eq. 10), as sb3-contrib computes them.

    tau_i  = (2i + 1) / (2N)                               the midpoints of N equal probability bins
    u_ij   = T_j - theta_i                                 target sample j against current quantile i
    rho_ij = |tau_i - 1{u_ij < 0}| * huber_kappa(u_ij) / kappa
"""

from __future__ import annotations

import tensorflow as tf


def quantile_midpoints(num_quantiles: int) -> tf.Tensor:
    """tau_i = (2i + 1) / (2N), i = 0..N-1: [N] float32."""
    return (2.0 * tf.range(num_quantiles, dtype=tf.float32) + 1.0) / (2.0 * num_quantiles)


def huber(x, kappa: float = 1.0):
    """0.5 x^2 where |x| <= kappa, kappa (|x| - kappa / 2) beyond: kappa 1 is Mnih et al. 2015's "error clipping"
    and SB3's smooth_l1_loss."""
    abs_x = tf.abs(x)
    quadratic = tf.minimum(abs_x, kappa)
    return 0.5 * quadratic ** 2 + kappa * (abs_x - quadratic)


def quantile_huber_loss(theta, targets, kappa: float = 1.0):
    """theta [R, N] (current quantiles at the midpoints), targets [R, N'] (samples of the target distribution)
    -> each row's loss [R]: sum_i mean_j rho_ij. No gradient flows into the targets."""
    tau = quantile_midpoints(theta.shape[-1])[None, :, None]  # [1, N, 1]
    u = tf.stop_gradient(targets)[:, None, :] - theta[:, :, None]  # [R, N, N']
    rho = tf.abs(tau - tf.cast(u < 0.0, tf.float32)) * huber(u, kappa) / kappa
    return tf.reduce_sum(tf.reduce_mean(rho, axis=-1), axis=-1)

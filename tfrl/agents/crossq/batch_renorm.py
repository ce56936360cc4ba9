"""Batch renormalization (Ioffe 2017, arxiv.org/abs/1702.03275) as a Keras layer, the way CrossQ uses it.

Keras 3's BatchNormalization has no renormalization (tf.keras 2's `renorm=True` is gone), hence this layer.

Training mode, on a batch x [B, F] (mu_B, var_B its mean and biased variance per feature):
    sigma_B = sqrt(var_B + eps),  sigma = sqrt(moving_variance + eps)
    r = clip(sigma_B / sigma, 1 / r_max, r_max),  d = clip((mu_B - moving_mean) / sigma, -d_max, d_max)   # no gradient
    y = gamma * ((x - mu_B) / sigma_B * r + d) + beta        after warmup_steps training passes
    y = gamma * (x - mu_B) / sigma_B + beta                  before (plain batch normalization)
    moving_mean += (1 - momentum) * (mu_B - moving_mean); the same for moving_variance with var_B
Evaluation mode: y = gamma * (x - moving_mean) / sigma + beta, nothing updated.
SBX and sb3-contrib write the renormalized form as (x - (mu_B - d sqrt(var_B) / r)) / sqrt(var_B / r^2 + eps),
equal up to eps; its sqrt(var_B) has an infinite gradient where a ReLU unit is dead for the whole batch, so this
layer computes the paper's form above.
"""

from __future__ import annotations

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="tfrl")
class BatchRenorm(keras.layers.Layer):
    """y = gamma * normalized(x) + beta over the last axis; see the module docstring for the two modes."""

    def __init__(self, momentum: float = 0.99, epsilon: float = 1e-3, warmup_steps: int = 100_000,
                 r_max: float = 3.0, d_max: float = 5.0, **kwargs):
        super().__init__(**kwargs)
        self.momentum, self.epsilon, self.warmup_steps = momentum, epsilon, warmup_steps
        self.r_max, self.d_max = r_max, d_max

    def build(self, input_shape):
        features = (input_shape[-1],)
        self.gamma = self.add_weight(shape=features, initializer="ones", name="gamma")
        self.beta = self.add_weight(shape=features, initializer="zeros", name="beta")
        self.moving_mean = self.add_weight(shape=features, initializer="zeros", trainable=False, name="moving_mean")
        self.moving_variance = self.add_weight(shape=features, initializer="ones", trainable=False,
                                               name="moving_variance")
        # Training passes so far; float32 counts exactly to 2^24, far beyond any warmup.
        self.steps = self.add_weight(shape=(), initializer="zeros", trainable=False, name="steps")

    def call(self, x, training=None):
        x32 = tf.cast(x, tf.float32)
        if training:
            normalized = self._renormalized(x32)
        else:
            normalized = (x32 - self.moving_mean) * tf.math.rsqrt(self.moving_variance + self.epsilon)
        return tf.cast(normalized * self.gamma + self.beta, x.dtype)

    def _renormalized(self, x):
        """Training mode before gamma and beta; updates the moving statistics."""
        batch_mean, batch_variance = tf.nn.moments(x, axes=[0])
        batch_std = tf.sqrt(batch_variance + self.epsilon)  # with eps: a dead unit's zero variance has a gradient
        moving_std = tf.sqrt(self.moving_variance + self.epsilon)
        warmed_up = tf.cast(self.steps >= self.warmup_steps, tf.float32)
        r = tf.clip_by_value(batch_std / moving_std, 1.0 / self.r_max, self.r_max)
        d = tf.clip_by_value((batch_mean - self.moving_mean) / moving_std, -self.d_max, self.d_max)
        r, d = tf.stop_gradient(1.0 + warmed_up * (r - 1.0)), tf.stop_gradient(warmed_up * d)
        keep = self.momentum
        self.moving_mean.assign(keep * self.moving_mean + (1.0 - keep) * tf.stop_gradient(batch_mean))
        self.moving_variance.assign(keep * self.moving_variance + (1.0 - keep) * tf.stop_gradient(batch_variance))
        self.steps.assign_add(1.0)
        return (x - batch_mean) / batch_std * r + d

    def get_config(self):
        return {**super().get_config(), "momentum": self.momentum, "epsilon": self.epsilon,
                "warmup_steps": self.warmup_steps, "r_max": self.r_max, "d_max": self.d_max}

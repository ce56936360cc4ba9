"""DQN learner: the TD math, and a tf.function that runs K gradient steps per call.

Notation (Acme's): tm1 = "t minus 1", the transition's first step; t = its last.
    q_tm1 = Q_online(obs_tm1)                      # [B, A]
    target = r_t + discount_t * Q_target(obs_t, a*) # [B]
    a* = argmax_a Q_online(obs_t, a)   (double DQN)  or  argmax_a Q_target(obs_t, a)
    loss = mean_B huber(target - q_tm1[a_tm1])
discount_t already holds gamma^n and the termination mask (see tfrl.replay).
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tfrl import distribute, networks, numerics, runtime as runtime_lib
from tfrl.agents.dqn.config import DQNConfig
from tfrl.envs import EnvInfo

HUBER_DELTA = 1.0  # as in Mnih et al. 2015 ("error clipping") and SB3's smooth_l1_loss


def td_targets(r_t, discount_t, q_t_target, q_t_online=None):
    """r_t [B], discount_t [B], q_t_* [B, A] -> [B]. With q_t_online, the double-DQN target."""
    if q_t_online is None:
        v_t = tf.reduce_max(q_t_target, axis=-1)
    else:
        a_star = tf.argmax(q_t_online, axis=-1, output_type=tf.int32)  # [B]
        v_t = tf.gather(q_t_target, a_star, axis=1, batch_dims=1)  # [B]
    return r_t + discount_t * v_t


def huber(x, delta=HUBER_DELTA):
    abs_x = tf.abs(x)
    quadratic = tf.minimum(abs_x, delta)
    return 0.5 * quadratic ** 2 + delta * (abs_x - quadratic)


def q_learning_loss(q_tm1, a_tm1, targets):
    """q_tm1 [B, A], a_tm1 [B] int, targets [B] -> (mean Huber loss [], Q(s, a) [B])."""
    q_a = tf.gather(q_tm1, a_tm1, axis=1, batch_dims=1)
    return tf.reduce_mean(huber(tf.stop_gradient(targets) - q_a)), q_a


def check_distribution(config: DQNConfig, runtime: runtime_lib.Runtime) -> None:
    """Each gradient step splits the worker's `batch_size` transitions evenly over its replicas."""
    if runtime.strategy is not None:
        distribute.check_batch_split("batch_size", config.batch_size, runtime.local_replicas)


class DQNLearner:
    """Owns the online and target Q-networks, the optimizer and the train step.

    All state is in tf.Variables (networks, optimizer slots and loss scale,
    `gradient_steps`), so one tf.train.Checkpoint of `checkpoint_items()` saves it.

    Under a tf.distribute strategy (runtime.strategy) the variables are mirrored, and each gradient step
    splits the worker's batch of `batch_size` transitions across its replicas (tfrl.distribute).
    """

    def __init__(self, config: DQNConfig, env: EnvInfo, runtime: runtime_lib.Runtime):
        self.config = config
        self._device = runtime.device_name
        self._strategy = runtime.strategy
        self._local_replicas = runtime.local_replicas
        check_distribution(config, runtime)
        # Everything, the optimizer included, is built in the strategy's scope before the first step:
        # an optimizer built later would create its slots outside it.
        with runtime.scope():
            self.online = networks.q_network(env.obs_shape, env.num_actions, config.hidden_sizes, config.dueling)
            self.target = networks.q_network(env.obs_shape, env.num_actions, config.hidden_sizes, config.dueling,
                                             name="target_q_network")
            self.target.set_weights(self.online.get_weights())
            learning_rate = config.learning_rate
            if config.final_learning_rate_fraction != 1.0:
                # Indexed by the optimizer's own step counter: no Python per step, no retracing.
                learning_rate = keras.optimizers.schedules.PolynomialDecay(
                    config.learning_rate, decay_steps=max(1, config.total_gradient_steps),
                    end_learning_rate=config.learning_rate * config.final_learning_rate_fraction)
            optimizer = keras.optimizers.Adam(learning_rate, global_clipnorm=config.max_grad_norm or None)
            self.optimizer = runtime_lib.built_optimizer(optimizer, self.online.trainable_variables,
                                                         runtime.options.mixed_precision)
            self.gradient_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="gradient_steps")
        self._obs_shape = tuple(env.obs_shape)
        self._obs_size = int(np.prod(env.obs_shape))
        self._weight_shapes = [tuple(v.shape) for v in self.online.trainable_variables]
        self._weight_offsets = np.cumsum([0] + [int(np.prod(s)) for s in self._weight_shapes])
        input_signature = [
            tf.TensorSpec([None, None, 2 * self._obs_size + 3], tf.float32),  # packed transitions [K, B, F]
            tf.TensorSpec([], tf.bool),  # update_target (before the K steps)
        ]
        if self._strategy is None:
            self.train_step = tf.function(self._train_step, input_signature=input_signature,
                                          jit_compile=runtime.options.xla)
        else:
            # XLA cannot compile a step that updates mirrored variables: compile each replica's
            # forward/backward pass only, and apply the gradients outside it.
            self._replica_gradients_fn = tf.function(self._replica_gradients, jit_compile=runtime.options.xla)
            self.train_step = tf.function(self._replicated_train_step, input_signature=input_signature)

    def checkpoint_items(self) -> dict:
        return {"online": self.online, "target": self.target, "optimizer": self.optimizer,
                "gradient_steps": self.gradient_steps}

    def train(self, batch: dict[str, np.ndarray], update_target: bool) -> tuple[dict[str, float], list[np.ndarray]]:
        """One TF call: optional target update, then K = batch["obs"].shape[0] gradient steps.

        batch: replay.sample() output, arrays [K, B, ...]. Returns (metrics, online weights as NumPy for the actor).
        """
        out = self.train_step(self.pack(batch), update_target).numpy()
        # out[2]: numerics flags of the first of the K steps with a NaN or Inf (0: none); out[3]: its index k.
        if out[2] and not numerics.skipped_by_loss_scaling(self.optimizer):
            first_bad_step = int(self.gradient_steps.numpy()) - batch["action"].shape[0] + int(out[3]) + 1
            raise numerics.NonFiniteError(numerics.flag_names(int(out[2]), "Q-values"), first_bad_step)
        weights = [out[4 + start:4 + end].reshape(shape) for start, end, shape in
                   zip(self._weight_offsets[:-1], self._weight_offsets[1:], self._weight_shapes)]
        return {"loss": float(out[0]), "q_mean": float(out[1])}, weights

    def pack(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """[K, B, F] float32 rows: obs (flattened), next_obs, action, reward, discount.

        Every tensor that crosses the tf.function boundary costs tens of µs of Python-side
        binding on a small CPU, so the train step takes one array in and gives one array out.
        Actions are exact in float32 (integers below 2**24).
        """
        k, b = batch["action"].shape
        return np.concatenate([
            batch["obs"].reshape(k, b, -1), batch["next_obs"].reshape(k, b, -1),
            batch["action"][..., None], batch["reward"][..., None], batch["discount"][..., None],
        ], axis=-1, dtype=np.float32)

    # ---- inside the tf.function -------------------------------------------------

    def _train_step(self, packed, update_target):
        """packed [K, B, F] -> [loss, mean Q, numerics flags, index k of the flagged step, *flattened online weights].

        The flags (tfrl.numerics) are those of the first of the K steps with a NaN or Inf, 0 if there is none.
        """
        with tf.device(self._device):
            if update_target:
                self._update_target()
            num_steps, batch_size = tf.shape(packed)[0], tf.shape(packed)[1]
            d = self._obs_size
            obs = tf.reshape(packed[..., :d], [num_steps, batch_size, *self._obs_shape])
            next_obs = tf.reshape(packed[..., d:2 * d], [num_steps, batch_size, *self._obs_shape])
            action = tf.cast(packed[..., 2 * d], tf.int32)
            reward, discount = packed[..., 2 * d + 1], packed[..., 2 * d + 2]
            # The target network is fixed during the K steps, so all K*B bootstrap values
            # come from one large forward pass instead of K small ones.
            q_t_target_all = tf.reshape(self.target(tf.reshape(next_obs, [-1, *self._obs_shape])),
                                        [num_steps, batch_size, -1])  # [K, B, A]
            loss_sum = tf.constant(0.0)
            q_sum = tf.constant(0.0)
            flags, flagged_k = tf.constant(0), tf.constant(0)
            for k in tf.range(num_steps):
                loss, q_mean, step_flags = self._gradient_step(obs[k], action[k], reward[k], discount[k],
                                                               next_obs[k], q_t_target_all[k])
                loss_sum += loss
                q_sum += q_mean
                flags, flagged_k = numerics.keep_first_flags(flags, flagged_k, step_flags, k)
            return self._flat_output(loss_sum, q_sum, num_steps, flags, flagged_k)

    def _gradient_step(self, obs_tm1, a_tm1, r_t, discount_t, obs_t, q_t_target):
        grads, loss, q_mean, q_tm1 = self._gradients(obs_tm1, a_tm1, r_t, discount_t, obs_t, q_t_target)
        flags = numerics.non_finite_flags(loss, numerics.gradients_to_check(grads, self.optimizer), [q_tm1])
        self.optimizer.apply(grads, self.online.trainable_variables)
        self.gradient_steps.assign_add(1)
        return loss, q_mean, flags

    def _gradients(self, obs_tm1, a_tm1, r_t, discount_t, obs_t, q_t_target):
        """(loss-scaled gradients, loss [], mean Q(s, a) [], Q(s, .) [B, A]) of one batch."""
        q_t_online = self.online(obs_t) if self.config.double_dqn else None
        targets = td_targets(r_t, discount_t, q_t_target, q_t_online)  # [B]
        with tf.GradientTape() as tape:
            q_tm1 = self.online(obs_tm1, training=True)  # [B, A], float32 under every precision policy
            loss, q_a = q_learning_loss(q_tm1, a_tm1, targets)
            scaled_loss = self.optimizer.scale_loss(loss)
        return tape.gradient(scaled_loss, self.online.trainable_variables), loss, tf.reduce_mean(q_a), q_tm1

    # ---- under a tf.distribute strategy ---------------------------------------------

    def _replicated_train_step(self, packed, update_target):
        """packed [K, B, F] (this worker's batches) -> [loss, mean Q, flags, k, *flattened online weights], as _train_step."""
        if update_target:
            self._update_target()
        loss_sum = tf.constant(0.0)
        q_sum = tf.constant(0.0)
        flags, flagged_k = tf.constant(0), tf.constant(0)
        num_steps = tf.shape(packed)[0]
        for k in tf.range(num_steps):
            # Mean over all replicas of all workers of each replica's (gradients, loss, mean Q) on its shard.
            grads, loss, q_mean = distribute.replica_mean(self._strategy, self._local_replicas,
                                                          self._replica_gradients_fn, packed[k])
            # A NaN or Inf on any replica survives the mean, so the reduced values carry the guard.
            step_flags = numerics.non_finite_flags(loss, numerics.gradients_to_check(grads, self.optimizer), [q_mean])
            self.optimizer.apply(grads, self.online.trainable_variables)  # cross-replica context: no second all-reduce
            self.gradient_steps.assign_add(1)
            loss_sum += loss
            q_sum += q_mean
            flags, flagged_k = numerics.keep_first_flags(flags, flagged_k, step_flags, k)
        return self._flat_output(loss_sum, q_sum, num_steps, flags, flagged_k)

    def _flat_output(self, loss_sum, q_sum, num_steps, flags, flagged_k):
        """[mean loss, mean Q, flags, k of the first flagged step, *flattened online weights]: one tensor out."""
        count = tf.cast(tf.maximum(num_steps, 1), tf.float32)
        flat_weights = [tf.reshape(v, [-1]) for v in self.online.trainable_variables]
        numerics_out = tf.cast(tf.stack([flags, flagged_k]), tf.float32)  # small integers: exact in float32
        return tf.concat([[loss_sum / count, q_sum / count], numerics_out, *flat_weights], axis=0)

    def _replica_gradients(self, rows):
        """One replica's shard of one gradient step's transitions, packed [b, F] -> (gradients, loss, mean Q)."""
        d = self._obs_size
        obs = tf.reshape(rows[:, :d], [-1, *self._obs_shape])
        next_obs = tf.reshape(rows[:, d:2 * d], [-1, *self._obs_shape])
        action = tf.cast(rows[:, 2 * d], tf.int32)
        reward, discount = rows[:, 2 * d + 1], rows[:, 2 * d + 2]
        grads, loss, q_mean, _ = self._gradients(obs, action, reward, discount, next_obs, self.target(next_obs))
        return grads, loss, q_mean

    def _update_target(self):
        tau = self.config.target_update_tau
        for target_var, online_var in zip(self.target.trainable_variables, self.online.trainable_variables):
            target_var.assign(tau * online_var + (1.0 - tau) * target_var)

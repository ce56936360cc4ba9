"""PPO learner math: the clipped surrogate loss and the update (one TF call per rollout).

One update trains on one rollout of B = n_steps * num_envs transitions, with the
advantages A_t and value targets G_t of A2C's GAE (tfrl.agents.a2c.learning) and
the log-probabilities log pi_old(a_t | s_t) of the policy that acted. It makes
n_epochs passes, each over a fresh random order of the B rows cut into
B / batch_size minibatches; every minibatch is one Adam step on

    r = pi(a|s) / pi_old(a|s) = exp(log pi(a|s) - log pi_old(a|s))
    policy_loss = -mean_b(min(r * A, clip(r, 1 - epsilon, 1 + epsilon) * A))
    loss = policy_loss + value_coef * mean_b((G - V(s))^2) - entropy_coef * mean_b(H(pi(.|s)))

with A standardized within the minibatch when normalize_advantage is on (SB3's
PPO does the same). The value loss is not clipped (SB3's default, clip_range_vf=None).

All n_epochs * B / batch_size steps run inside one tf.function call (a TF call
costs ~300 µs of fixed overhead on a 2-core CPU; a minibatch step of the 64x64
networks is smaller than that). The minibatch orders come in with the rollout,
drawn in NumPy from a generator keyed by (seed, update): a resumed or repeated
run shuffles the same way.
"""

from __future__ import annotations

import contextlib

import keras
import numpy as np
import tensorflow as tf

from tfrl import distribute, numerics, runtime as runtime_lib, schedules
from tfrl.agents.a2c.learning import normalized
from tfrl.agents.a2c.networks import make_head, make_network
from tfrl.agents.ppo.config import PPOConfig
from tfrl.envs import EnvInfo

# Each logged as its mean over all of an update's minibatch steps (SB3 logs approx_kl and the loss of the last
# epoch or step only).
METRICS = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "grad_norm")


def ppo_loss(head, policy_params, values, actions, advantages, returns, old_log_probs, clip_range,
             value_coef: float, entropy_coef: float):
    """policy_params [B, P], values [B], actions [B], advantages [B], returns [B], old_log_probs [B],
    clip_range [] -> (loss [], terms).

    terms: {"policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"}, each a batch mean.
    approx_kl = mean((r - 1) - log r), an unbiased, non-negative estimate of KL(pi_old || pi) (SB3 logs the
    same); clip_fraction is the share of rows with |r - 1| > clip_range. Advantages, returns and the old
    log-probabilities are constants: no gradient flows into them.
    """
    advantages, returns, old_log_probs = (tf.stop_gradient(x) for x in (advantages, returns, old_log_probs))
    log_ratio = head.log_prob(policy_params, actions) - old_log_probs
    ratio = tf.exp(log_ratio)
    clipped_ratio = tf.clip_by_value(ratio, 1.0 - clip_range, 1.0 + clip_range)
    policy_loss = -tf.reduce_mean(tf.minimum(ratio * advantages, clipped_ratio * advantages))
    value_loss = tf.reduce_mean(tf.square(returns - values))
    entropy = tf.reduce_mean(head.entropy(policy_params))
    loss = policy_loss + value_coef * value_loss - entropy_coef * entropy
    approx_kl = tf.stop_gradient(tf.reduce_mean((ratio - 1.0) - log_ratio))
    clip_fraction = tf.reduce_mean(tf.cast(tf.abs(ratio - 1.0) > clip_range, tf.float32))
    return loss, {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy,
                  "approx_kl": approx_kl, "clip_fraction": clip_fraction}


def minibatch_indices(seed: int, update: int, n_epochs: int, rows: int, batch_size: int) -> np.ndarray:
    """[n_epochs * rows / batch_size, batch_size] int32 row indices: each epoch a fresh permutation of the rows,
    cut into consecutive minibatches. Drawn in NumPy from a generator keyed by (seed, update), so a resumed or
    repeated run shuffles the same way, with or without XLA (TF's stateless RNG differs under XLA)."""
    rng = np.random.default_rng([seed, update])
    return np.concatenate([rng.permutation(rows) for _ in range(n_epochs)]).reshape(-1, batch_size).astype(np.int32)


def check_distribution(config: PPOConfig, runtime: runtime_lib.Runtime) -> None:
    """Each minibatch step splits the worker's batch_size rows evenly over its replicas."""
    if runtime.strategy is not None:
        distribute.check_batch_split("batch_size", config.batch_size, runtime.local_replicas)


def _make_optimizer(config: PPOConfig) -> keras.optimizers.Optimizer:
    # Keras adds epsilon to the uncorrected sqrt(v) (its bias correction is folded into the step size), PyTorch
    # to the corrected one: the same eps weighs more in Keras' first steps, until the correction fades.
    return keras.optimizers.Adam(config.learning_rate, epsilon=config.adam_eps,
                                 global_clipnorm=config.max_grad_norm or None)


class PPOLearner:
    """Owns the actor-critic network (A2C's), the Adam optimizer and the update.

    All state is in tf.Variables (network, optimizer slots, learning rate and loss scale, `updates`), so one
    tf.train.Checkpoint of `checkpoint_items()` saves it; `updates` also keys the minibatch shuffles.

    Under a tf.distribute strategy (runtime.strategy) the variables are mirrored, and each minibatch step
    splits the worker's minibatch across its replicas (tfrl.distribute). Each worker shuffles its own rollout
    (with its own seed), and all take the same number of minibatch steps, so the all-reduces stay in step.
    """

    def __init__(self, config: PPOConfig, env: EnvInfo, runtime: runtime_lib.Runtime, seed: int):
        self.config = config
        self.head = make_head(env)
        self._seed = seed
        self._device = runtime.device_name
        self._strategy = runtime.strategy
        self._local_replicas = runtime.local_replicas
        check_distribution(config, runtime)
        with runtime.scope():
            self.network = make_network(config, env, self.head)
            optimizer = _make_optimizer(config)
            self.optimizer = runtime_lib.built_optimizer(optimizer, self.network.trainable_variables,
                                                         runtime.options.mixed_precision)
            self.updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")
            # A variable rather than an argument of the per-replica function, which shards its arguments.
            self._clip_range = tf.Variable(config.clip_range, dtype=tf.float32, trainable=False, name="clip_range")
        if self._strategy is None:
            self._minibatch_gradients = self._gradients
            jit_compile = runtime.options.xla
        else:
            # XLA cannot compile a step that updates mirrored variables: compile each replica's
            # forward/backward pass only, and apply the gradients outside it.
            replica_fn = tf.function(self._gradients, jit_compile=runtime.options.xla)
            self._minibatch_gradients = lambda *batch: distribute.replica_mean(
                self._strategy, self._local_replicas, replica_fn, *batch)
            jit_compile = False
        self.train_step = tf.function(
            self._train_step,
            input_signature=[
                tf.TensorSpec([None, *env.obs_shape], tf.float32, name="obs"),  # [B, *obs_shape]
                self.head.action_spec,  # [B]
                tf.TensorSpec([None], tf.float32, name="advantages"),  # [B]
                tf.TensorSpec([None], tf.float32, name="returns"),  # [B]
                tf.TensorSpec([None], tf.float32, name="old_log_probs"),  # [B]
                tf.TensorSpec([None, config.batch_size], tf.int32, name="minibatches"),  # [steps, batch_size] rows
                # Inputs rather than Python numbers, so decaying schedules never retrace.
                tf.TensorSpec([], tf.float32, name="learning_rate"),
                tf.TensorSpec([], tf.float32, name="clip_range"),
            ],
            jit_compile=jit_compile,
        )
        self._train_step_concrete = self.train_step.get_concrete_function()

    def checkpoint_items(self) -> dict:
        return {"network": self.network, "optimizer": self.optimizer, "updates": self.updates}

    def update(self, rollout, rollout_start: int, learning_rate: float) -> tuple[dict[str, float], list[np.ndarray]]:
        """The on-policy loop's call (tfrl.agents.on_policy_loop.Rollout). The clip range follows its schedule
        from rollout_start, the env step where the rollout began, as the loop's learning rate does."""
        clip_range = schedules.scheduled(self.config.clip_range, self.config.clip_range_schedule, rollout_start,
                                         self.config.total_env_steps)
        return self.train(rollout.obs, rollout.actions, rollout.advantages, rollout.returns, rollout.log_probs,
                          learning_rate, clip_range)

    def train(self, obs: np.ndarray, actions: np.ndarray, advantages: np.ndarray, returns: np.ndarray,
              old_log_probs: np.ndarray, learning_rate: float, clip_range: float
              ) -> tuple[dict[str, float], list[np.ndarray]]:
        """One TF call: n_epochs * B / batch_size minibatch steps on a flattened rollout [B].

        Returns (metrics averaged over the minibatch steps, with "clip_range", network weights as NumPy for
        the actor's mirror).
        """
        rows = len(obs)
        if rows % self.config.batch_size:
            raise ValueError(f"a rollout of {rows} rows does not split into minibatches of {self.config.batch_size}")
        minibatches = minibatch_indices(self._seed, int(self.updates.numpy()), self.config.n_epochs, rows,
                                        self.config.batch_size)
        inputs = [tf.constant(x) for x in (obs, actions, advantages, returns, old_log_probs, minibatches,
                                           np.float32(learning_rate), np.float32(clip_range))]
        metrics, flags_and_step, weights = self._train_step_concrete(*inputs)
        metrics = {name: float(value) for name, value in zip(METRICS, metrics.numpy())}
        flags, flagged_step = (int(x) for x in flags_and_step.numpy())
        if flags and not numerics.skipped_by_loss_scaling(self.optimizer):
            steps_per_update = self.config.n_epochs * rows // self.config.batch_size
            # Counted from 1, like DQN's gradient steps and A2C's updates.
            gradient_step = (int(self.updates.numpy()) - 1) * steps_per_update + flagged_step + 1
            raise numerics.NonFiniteError(numerics.flag_names(flags, "policy logits or values"), gradient_step)
        return {**metrics, "clip_range": float(clip_range)}, [w.numpy() for w in weights]

    # ---- inside the tf.function -------------------------------------------------

    def _train_step(self, obs, actions, advantages, returns, old_log_probs, minibatches, learning_rate, clip_range):
        """-> (mean of each of METRICS over the steps [7], [flags, index of the first flagged step], weights).

        The flags (tfrl.numerics) are those of the first minibatch step with a NaN or Inf, 0 if there is none.
        """
        # One device without a strategy; under one, the strategy places each replica's work.
        with tf.device(self._device) if self._strategy is None else contextlib.nullcontext():
            self.optimizer.learning_rate.assign(learning_rate)
            self._clip_range.assign(clip_range)
            num_steps = tf.shape(minibatches)[0]
            sums = tf.zeros([len(METRICS)])
            flags, flagged_step = tf.constant(0), tf.constant(0)
            for step in tf.range(num_steps):
                rows = minibatches[step]
                mb_advantages = tf.gather(advantages, rows)
                if self.config.normalize_advantage:
                    mb_advantages = normalized(mb_advantages)  # over the whole minibatch, before any sharding
                grads, terms = self._minibatch_gradients(tf.gather(obs, rows), tf.gather(actions, rows),
                                                         mb_advantages, tf.gather(returns, rows),
                                                         tf.gather(old_log_probs, rows))
                step_metrics, step_flags = self._apply(grads, terms)
                sums += step_metrics
                flags, flagged_step = numerics.keep_first_flags(flags, flagged_step, step_flags, step)
            self.updates.assign_add(1)
            means = sums / tf.cast(tf.maximum(num_steps, 1), tf.float32)
            weights = [tf.identity(v) for v in self.network.trainable_variables]
            return means, tf.stack([flags, flagged_step]), weights

    def _gradients(self, obs, actions, advantages, returns, old_log_probs):
        """(loss-scaled gradients, {"loss", terms of ppo_loss, "outputs_sum"}) of one minibatch (or shard)."""
        with tf.GradientTape() as tape:
            policy_params, values = self.network(obs, training=True)  # float32 under every precision policy
            loss, terms = ppo_loss(self.head, policy_params, values, actions, advantages, returns, old_log_probs,
                                   self._clip_range, self.config.value_coef, self.config.entropy_coef)
            scaled_loss = self.optimizer.scale_loss(loss)
        # One scalar for the numeric guard: a NaN or Inf in any output survives the sum (and a replica mean).
        outputs_sum = tf.reduce_sum(policy_params) + tf.reduce_sum(values)
        return (tape.gradient(scaled_loss, self.network.trainable_variables),
                {"loss": loss, **terms, "outputs_sum": outputs_sum})

    def _apply(self, grads, terms):
        """One optimizer step -> (this step's METRICS [7], its numerics flags)."""
        variables = self.network.trainable_variables
        grad_norm = numerics.unscaled_gradient_norm(grads, self.optimizer)
        flags = numerics.non_finite_flags(terms["loss"], numerics.gradients_to_check([grad_norm], self.optimizer),
                                          [terms["outputs_sum"]])
        self.optimizer.apply(grads, variables)
        values = {**terms, "grad_norm": grad_norm}
        return tf.stack([tf.cast(values[name], tf.float32) for name in METRICS]), flags

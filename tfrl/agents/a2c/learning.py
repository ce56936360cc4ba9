"""A2C learner math: n-step / GAE advantages (NumPy), the loss, and the train step (one TF call per update).

One update trains on one rollout: T = n_steps vector steps of N = num_envs envs.
    d_t = 1 if the episode ended at step t (terminated or truncated), else 0
    delta_t = r_t + gamma * (1 - d_t) * V(s_{t+1}) - V(s_t)               # [N], V(s_T) = last_value
    A_t = delta_t + gamma * lambda * (1 - d_t) * A_{t+1}                 # GAE (Schulman et al. 2016), A_T = 0
    G_t = A_t + V(s_t)                                                   # value target
With lambda = 1, G_t = r_t + gamma r_{t+1} + ... + gamma^k V(s_{t+k}): the n-step
return of A2C (Mnih et al. 2016), cut at the episode end or the rollout end.

A time-limit truncation is not a terminal state (Pardo et al. 2018, "Time Limits
in RL"): the rollout adds gamma * V(final obs) to r_t and marks d_t = 1, so the
recursion bootstraps from the episode's true last state rather than from the next
episode's first one (SB3 does the same: DLR-RM/stable-baselines3 issue #633, PR #658).

    loss = -mean_B(log pi(a|s) * A) + value_coef * mean_B((G - V(s))^2) - entropy_coef * mean_B(H(pi(.|s)))
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tfrl import distribute, numerics, runtime as runtime_lib
from tfrl.agents.a2c.config import A2CConfig
from tfrl.agents.a2c.networks import make_head, make_network
from tfrl.envs import EnvInfo


def n_step_advantages(rewards: np.ndarray, values: np.ndarray, dones: np.ndarray, last_value: np.ndarray,
                      gamma: float, gae_lambda: float) -> tuple[np.ndarray, np.ndarray]:
    """GAE advantages and value targets of a rollout; gae_lambda = 1 gives n-step returns.

    rewards, values, dones: [T, N] (dones as 0/1 or bool: the episode ended at step t);
    last_value: V(s_T) [N], the value of the observation after the rollout.
    Returns (advantages [T, N], returns [T, N]) as float32, returns = advantages + values.
    """
    rewards = np.asarray(rewards, np.float32)
    values = np.asarray(values, np.float32)
    not_done = 1.0 - np.asarray(dones, np.float32)  # [T, N]
    advantages = np.empty_like(rewards)
    next_value = np.asarray(last_value, np.float32)  # V(s_{t+1}) [N]
    next_advantage = np.zeros_like(next_value)  # A_{t+1} [N]
    for t in reversed(range(rewards.shape[0])):
        delta = rewards[t] + gamma * not_done[t] * next_value - values[t]  # [N]
        next_advantage = delta + gamma * gae_lambda * not_done[t] * next_advantage
        advantages[t] = next_advantage
        next_value = values[t]
    return advantages, advantages + values


def bootstrap_truncated(rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                        final_values: np.ndarray, gamma: float) -> np.ndarray:
    """r + gamma * V(final obs) where the episode was truncated (time limit) but not terminated; [N] each.

    An env can report both flags at once (the terminal state falls on the time limit): then it terminated,
    and there is nothing to bootstrap from.
    """
    bootstrap = np.asarray(truncated, bool) & ~np.asarray(terminated, bool)
    return np.where(bootstrap, rewards + gamma * final_values, rewards).astype(np.float32)


def explained_variance(values: np.ndarray, returns: np.ndarray) -> float:
    """1 - Var(G - V) / Var(G): 1 = V predicts the targets exactly, 0 = no better than a constant."""
    var_returns = np.var(returns)
    return float("nan") if var_returns == 0 else float(1.0 - np.var(returns - values) / var_returns)


def a2c_loss(head, policy_params, values, actions, advantages, returns, value_coef: float, entropy_coef: float,
             normalize_advantage: bool = False):
    """policy_params [B, P], values [B], actions [B], advantages [B], returns [B] -> (loss [], terms).

    terms: {"policy_loss", "value_loss", "entropy"} (scalars; entropy is the batch mean, in nats).
    advantages and returns are constants: no gradient flows into them.
    """
    advantages = tf.stop_gradient(advantages)
    if normalize_advantage:
        advantages = normalized(advantages)
    policy_loss = -tf.reduce_mean(head.log_prob(policy_params, actions) * advantages)
    value_loss = tf.reduce_mean(tf.square(tf.stop_gradient(returns) - values))
    entropy = tf.reduce_mean(head.entropy(policy_params))
    loss = policy_loss + value_coef * value_loss - entropy_coef * entropy
    return loss, {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy}


def normalized(advantages):
    """advantages [B] -> (A - mean) / (std + 1e-8) over the batch; the population std (SB3 divides by the
    N-1 std, which makes its advantages 0.8 % smaller at B = 64)."""
    mean, variance = tf.nn.moments(advantages, axes=[0])
    return (advantages - mean) / (tf.sqrt(variance) + 1e-8)


def _make_optimizer(config: A2CConfig) -> keras.optimizers.Optimizer:
    clip = config.max_grad_norm or None  # global norm over all gradients, after loss-scale unscaling
    if config.optimizer == "rmsprop":
        # PyTorch/SB3 divide by sqrt(v) + eps, Keras by sqrt(v + epsilon): eps**2 inside the root
        # gives the same floor on the denominator (within a factor sqrt(2) where sqrt(v) ~ eps).
        return keras.optimizers.RMSprop(config.learning_rate, rho=config.rmsprop_decay,
                                        epsilon=config.rmsprop_eps ** 2, global_clipnorm=clip)
    return keras.optimizers.Adam(config.learning_rate, global_clipnorm=clip)


def check_distribution(config: A2CConfig, runtime: runtime_lib.Runtime) -> None:
    """Each update splits the worker's rollout of num_envs * n_steps steps evenly over its replicas."""
    if runtime.strategy is not None:
        distribute.check_batch_split("num_envs * n_steps", config.num_envs * config.n_steps, runtime.local_replicas)


class A2CLearner:
    """Owns the actor-critic network, the optimizer and the train step.

    All state is in tf.Variables (network, optimizer slots, learning rate and loss
    scale, `updates`), so one tf.train.Checkpoint of `checkpoint_items()` saves it.

    Under a tf.distribute strategy (runtime.strategy) the variables are mirrored, and each update splits
    the worker's rollout across its replicas (tfrl.distribute).
    """

    def __init__(self, config: A2CConfig, env: EnvInfo, runtime: runtime_lib.Runtime):
        self.config = config
        self.head = make_head(env)
        self._device = runtime.device_name
        self._strategy = runtime.strategy
        self._local_replicas = runtime.local_replicas
        check_distribution(config, runtime)
        # Everything, the optimizer included, is built in the strategy's scope before the first step:
        # an optimizer built later would create its slots outside it.
        with runtime.scope():
            self.network = make_network(config, env, self.head)
            optimizer = _make_optimizer(config)
            self.optimizer = runtime_lib.built_optimizer(optimizer, self.network.trainable_variables,
                                                         runtime.options.mixed_precision)
            self.updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")
        if self._strategy is None:
            step, jit_compile = self._train_step, runtime.options.xla
        else:
            # XLA cannot compile a step that updates mirrored variables: compile each replica's
            # forward/backward pass only, and apply the gradients outside it.
            self._replica_gradients_fn = tf.function(self._gradients, jit_compile=runtime.options.xla)
            step, jit_compile = self._replicated_train_step, False
        self.train_step = tf.function(
            step,
            input_signature=[
                tf.TensorSpec([None, *env.obs_shape], tf.float32, name="obs"),  # [B, *obs_shape]
                self.head.action_spec,  # [B]
                tf.TensorSpec([None], tf.float32, name="advantages"),  # [B]
                tf.TensorSpec([None], tf.float32, name="returns"),  # [B]
                # An input rather than a Python number, so a decaying rate never retraces.
                tf.TensorSpec([], tf.float32, name="learning_rate"),
            ],
            jit_compile=jit_compile,
        )
        # Traced once, here. Calling the concrete function skips tf.function's per-call binding of the
        # arguments to the signature: ~0.5 ms of the ~1.7 ms a train call costs on a 2-core CPU.
        self._train_step_concrete = self.train_step.get_concrete_function()

    def checkpoint_items(self) -> dict:
        return {"network": self.network, "optimizer": self.optimizer, "updates": self.updates}

    def update(self, rollout, rollout_start: int, learning_rate: float) -> tuple[dict[str, float], list[np.ndarray]]:
        """The on-policy loop's call (tfrl.agents.on_policy_loop.Rollout): one gradient step on the rollout.

        A2C needs neither the acting policy's log-probabilities nor rollout_start (it has no schedule of its own).
        """
        del rollout_start
        return self.train(rollout.obs, rollout.actions, rollout.advantages, rollout.returns, learning_rate)

    def train(self, obs: np.ndarray, actions: np.ndarray, advantages: np.ndarray, returns: np.ndarray,
              learning_rate: float) -> tuple[dict[str, float], list[np.ndarray]]:
        """One TF call: one gradient step on a flattened rollout [B = T * N].

        Returns (metrics, network weights as NumPy for the actor's mirror).
        """
        # Converting here is ~0.3 ms cheaper than letting the concrete function convert NumPy arguments.
        inputs = [tf.constant(x) for x in (obs, actions, advantages, returns, np.float32(learning_rate))]
        metrics, weights = self._train_step_concrete(*inputs)
        metrics = {name: float(value) for name, value in metrics.items()}
        flags = int(metrics.pop("non_finite_flags"))
        if flags and not numerics.skipped_by_loss_scaling(self.optimizer):
            raise numerics.NonFiniteError(numerics.flag_names(flags, "policy logits or values"),
                                          int(self.updates.numpy()))
        return metrics, [w.numpy() for w in weights]

    # ---- inside the tf.function -------------------------------------------------

    def _train_step(self, obs, actions, advantages, returns, learning_rate):
        with tf.device(self._device):
            self.optimizer.learning_rate.assign(learning_rate)
            if self.config.normalize_advantage:
                advantages = normalized(advantages)
            grads, metrics = self._gradients(obs, actions, advantages, returns)
            return self._apply(grads, metrics)

    def _gradients(self, obs, actions, advantages, returns):
        """(loss-scaled gradients, {"loss", "policy_loss", "value_loss", "entropy"}) of one batch."""
        with tf.GradientTape() as tape:
            policy_params, values = self.network(obs, training=True)  # float32 under every precision policy
            loss, terms = a2c_loss(self.head, policy_params, values, actions, advantages, returns,
                                   self.config.value_coef, self.config.entropy_coef)
            scaled_loss = self.optimizer.scale_loss(loss)
        # One scalar for the numeric guard: a NaN or Inf in any output survives the sum (and a replica mean).
        outputs_sum = tf.reduce_sum(policy_params) + tf.reduce_sum(values)
        return (tape.gradient(scaled_loss, self.network.trainable_variables),
                {"loss": loss, **terms, "outputs_sum": outputs_sum})

    def _apply(self, grads, metrics):
        variables = self.network.trainable_variables
        grad_norm = numerics.unscaled_gradient_norm(grads, self.optimizer)
        metrics = dict(metrics)
        outputs_sum = metrics.pop("outputs_sum")
        flags = numerics.non_finite_flags(metrics["loss"], numerics.gradients_to_check([grad_norm], self.optimizer),
                                          [outputs_sum])
        self.optimizer.apply(grads, variables)
        self.updates.assign_add(1)
        weights = [tf.identity(v) for v in variables]
        return {**metrics, "grad_norm": grad_norm, "non_finite_flags": flags}, weights

    def _replicated_train_step(self, obs, actions, advantages, returns, learning_rate):
        """As _train_step, with each replica on its shard of this worker's rollout (see tfrl.distribute)."""
        self.optimizer.learning_rate.assign(learning_rate)
        if self.config.normalize_advantage:
            # Over the worker's whole rollout, as on one device, rather than over each replica's shard.
            advantages = normalized(advantages)
        # Mean over all replicas of all workers of each replica's gradients and loss terms on its shard.
        grads, metrics = distribute.replica_mean(self._strategy, self._local_replicas, self._replica_gradients_fn,
                                                 obs, actions, advantages, returns)
        return self._apply(grads, metrics)  # cross-replica context: no second all-reduce

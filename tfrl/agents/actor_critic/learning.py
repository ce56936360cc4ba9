"""What the A2C and PPO learners share in the graph: the rollout's row layout, advantage normalization, the
gradients of a loss of the network's outputs, and one optimizer step with its gradient norm."""

from __future__ import annotations

from typing import Callable, Sequence

import tensorflow as tf

from tfrl import schedules
from tfrl.agents import train_step
from tfrl.agents.actor_critic import recurrent
from tfrl.agents.actor_critic.config import ActorCriticConfig
from tfrl.envs.observations import ObsSpec
from tfrl.models import networks, numerics


def rollout_rows(observations: ObsSpec, head, with_log_probs: bool, state_size: int = 0) -> train_step.RowLayout:
    """The layout of Rollout.rows() in one float32 array [B, F] (uint8 images beside it); log pi_old only for
    learners that read it; with memory, the actor's state and episode-start flag of each row. The action field is
    the head's: an int32 (Discrete), D int32s (MultiDiscrete) or D float32s (Box)."""
    fields = {"obs": (observations.row_shape, observations.numpy_dtype),
              "action": (head.action_spec.shape[1:], head.action_spec.dtype),
              "advantage": ((), tf.float32), "return": ((), tf.float32)}
    if with_log_probs:
        fields["log_prob"] = ((), tf.float32)
    if state_size:
        fields.update(state=((state_size,), tf.float32), start=((), tf.float32))
    return train_step.RowLayout(fields)


def training_forward(network, config: ActorCriticConfig) -> Callable:
    """forward(obs, *memory) -> (policy params [B, P], values [B]) as training computes them: the network on the
    rows; with memory (memory = (states [B, S], starts [B]) of rows in whole sequences), along the sequences."""
    if not config.recurrent:
        return lambda obs: network(networks.network_input(obs), training=True)
    return recurrent.SequenceForward(network, config.sequence_steps, config.shared_torso)


def memory_of(batch: dict) -> tuple:
    """The (states, starts) of an unpacked batch with memory, () without."""
    return (batch["state"], batch["start"]) if "state" in batch else ()


def learning_rate_at(env_step: int, config: ActorCriticConfig) -> float:
    """Step size for the update whose rollout starts at `env_step` (config.lr_schedule)."""
    return schedules.Schedule.named(config.lr_schedule, config.learning_rate, config.total_env_steps).at(env_step)


def normalized(advantages):
    """advantages [B] -> (A - mean) / (std + 1e-8) over the batch; the population std (SB3 divides by the
    N-1 std, which makes its advantages 0.8 % smaller at B = 64)."""
    mean, variance = tf.nn.moments(advantages, axes=[0])
    return (advantages - mean) / (tf.sqrt(variance) + 1e-8)


def loss_gradients(forward: Callable, network, optimizer, obs, memory: Sequence, loss_fn: Callable):
    """(loss-scaled gradients, {"loss", *terms, "outputs_sum"}) of loss_fn(policy_params, values, legal) ->
    (loss, terms) on one batch (or one replica's shard) of observations, whose outputs are forward(obs, *memory)
    (training_forward); legal: their action mask (bool [B, A]), None without one."""
    with tf.GradientTape() as tape:
        policy_params, values = forward(obs, *memory)  # float32 always
        loss, terms = loss_fn(policy_params, values, networks.legal_mask(obs))
        scaled_loss = optimizer.scale_loss(loss)
    # One scalar for the numeric guard: a NaN or Inf in any output survives the sum (and a replica mean).
    outputs_sum = tf.reduce_sum(policy_params) + tf.reduce_sum(values)
    return tape.gradient(scaled_loss, network.trainable_variables), {"loss": loss, **terms, "outputs_sum": outputs_sum}


def apply_step(optimizer, grads, variables, terms):
    """One optimizer step -> (terms without outputs_sum, with "grad_norm": the norm before clipping; its flags)."""
    grad_norm = numerics.unscaled_gradient_norm(grads, optimizer)
    flags = train_step.apply_gradients(optimizer, grads, variables, terms["loss"], terms["outputs_sum"],
                                       grads_to_check=[grad_norm])
    metrics = {name: value for name, value in terms.items() if name != "outputs_sum"}
    return {**metrics, "grad_norm": grad_norm}, flags

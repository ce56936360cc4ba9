"""The actor-critic policy that is exported and evaluated (A2C, PPO): the most likely action of the network, no
sampling. The agent registry (tfrl.agents) names this module as their policy module."""

from __future__ import annotations

import tensorflow as tf

from tfrl.agents.actor_critic import recurrent
from tfrl.agents.actor_critic.config import ActorCriticConfig
from tfrl.agents.actor_critic.heads import GaussianHead, HybridHead, MultiCategoricalHead, make_head
from tfrl.agents.actor_critic.networks import make_network
from tfrl.envs import EnvInfo
from tfrl.models import networks, normalization
from tfrl.models.export import ServingPolicy
from tfrl.models.policy_inputs import ACTION_PART

NETWORK_KEY = "network"  # the network's key in the A2C and PPO learners' checkpoint_items() and the serving policy's


def greedy_outputs(network, head=None, recurrent: bool = False):
    """observation [B, *obs_shape] -> the mode of the policy (the greedy action the actor evaluates) and V(s):

    categorical head: {"action": argmax_a logits int64 [B], "logits": float32 [B, A], "value": float32 [B]}
    MultiDiscrete:    {"action": each dimension's argmax int64 [B, D], "logits": float32 [B, sum(nvec)], "value"}
    Gaussian head:    {"action": the mean clipped to the Box, float32 [B, *action_shape], "mean": float32 [B, D],
                       "log_std": float32 [B, D], "value": float32 [B]}
    Hybrid (Dict or Tuple):  {"action.<key>": each part as above (a Tuple's keys are its indices), "action": every
                       part side by side, float32 [B, K], "logits": float32 [B, P] (the head's params), "value"}
    With an action mask (Dict observations' action_mask), the argmax ranges over the legal actions only, and
    "no_legal_action" bool [B] flags the rows whose mask allows none (networks.greedy_scores).
    recurrent: (observation, state [B, S]) -> the same and "state", the next state [B, S] float32.
    """
    gaussian = isinstance(head, GaussianHead)

    def from_params(observation, params, value):
        if isinstance(head, HybridHead):
            return {**_hybrid_actions(observation, params, head), "logits": params, "value": value}
        if not gaussian:
            parts = head.nvec if isinstance(head, MultiCategoricalHead) else ()
            scores, flags = networks.greedy_scores(observation, params, parts)
            return {"action": _argmax(scores, head), "logits": params, "value": value, **flags}
        mean, log_std = tf.split(params, 2, axis=-1)
        action = tf.reshape(tf.clip_by_value(mean, head.low, head.high), [-1, *head.action_shape])
        return {"action": action, "mean": mean, "log_std": log_std, "value": value}

    if recurrent:
        def step(observation, state):
            params, value, next_state = network([networks.network_input(observation), state], training=False)
            return {**from_params(observation, params, value), "state": next_state}

        return step

    def outputs(observation):
        params, value = network(networks.network_input(observation), training=False)  # float32 always
        return from_params(observation, params, value)

    return outputs


def _hybrid_actions(observation, params, head: HybridHead) -> dict:
    """{"action.<key>": the greedy value of each part, "action": all of them side by side as float32, and the
    mask's flags}: the discrete parts' argmax over their legal values, the Box parts' means clipped."""
    scores, flags = networks.greedy_scores(observation, params[:, :head.num_logits], head.mask_groups)
    scored = tf.concat([scores, params[:, head.num_logits:]], axis=-1)
    outputs, flat = {}, []
    for part, part_head, columns in zip(head.parts, head.heads, head.param_columns):
        part_params = tf.gather(scored, columns, axis=-1)
        if isinstance(part_head, GaussianHead):
            mean = tf.split(part_params, 2, axis=-1)[0]
            action = tf.clip_by_value(mean, part_head.low, part_head.high)
            outputs[f"{ACTION_PART}{part.key}"] = tf.reshape(action, [-1, *part_head.action_shape])
        else:
            action = _argmax(part_params, part_head)
            outputs[f"{ACTION_PART}{part.key}"] = action
        flat.append(tf.reshape(tf.cast(action, tf.float32), [tf.shape(params)[0], -1]))
    return {**outputs, "action": tf.concat(flat, axis=-1), **flags}


def _argmax(scores, head):
    if isinstance(head, MultiCategoricalHead):
        return tf.stack([tf.argmax(part, axis=-1, output_type=tf.int64) for part in tf.split(scores, head.nvec, -1)],
                        axis=-1)
    return tf.argmax(scores, axis=-1, output_type=tf.int64)


def serving_policy(config: ActorCriticConfig, env: EnvInfo, network=None, obs_normalization=None) -> ServingPolicy:
    """The greedy policy of `network` (behind `obs_normalization` when config.normalize_observations), or of fresh
    ones to restore from a training checkpoint.

    NETWORK_KEY and tfrl.models.normalization.CHECKPOINT_KEY are their keys in the A2C and PPO learners' checkpoint_items().
    """
    head = make_head(env)
    if network is None:
        network = make_network(config, env, head)
    if obs_normalization is None:
        obs_normalization = normalization.make_layer(config, env.observations)
    outputs = normalization.in_front(obs_normalization, greedy_outputs(network, head, config.recurrent))
    return ServingPolicy(model=network, outputs=outputs, observation_normalization=obs_normalization,
                         checkpoint_items={NETWORK_KEY: network, **normalization.checkpoint_items(obs_normalization)},
                         state_size=recurrent.state_size_of(config), action_container=env.action_container)

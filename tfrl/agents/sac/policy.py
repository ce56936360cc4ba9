"""The SAC policy that is exported and evaluated: the actor's mean, squashed by tanh and rescaled to the Box
(no sampling). The agent registry (tfrl.agents) names this module as SAC's policy module."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfrl.agents.off_policy.continuous import to_env_action
from tfrl.agents.sac.config import SACConfig
from tfrl.agents.sac.explorer import LOG_STD_MAX, LOG_STD_MIN
from tfrl.agents.sac.networks import squashed_gaussian_actor
from tfrl.agents.sac.recurrent import recurrent_actor
from tfrl.envs import EnvInfo
from tfrl.models import normalization
from tfrl.models.export import ServingPolicy

ACTOR_KEY = "actor"  # the actor's key in SACLearner.checkpoint_items() and in the serving policy's


def greedy_outputs(actor, env: EnvInfo, recurrent: bool = False):
    """observation [B, *obs_shape] -> {"action": tanh(mean) rescaled to the Box, float32 [B, *action_shape],
    "mean": float32 [B, D] (before tanh), "log_std": float32 [B, D]}. recurrent (tfrl.agents.sac.recurrent's actor):
    (observation, state [B, 2U]) -> the same and "state", the next state [B, 2U]."""
    low, high = (np.asarray(bound, np.float32) for bound in (env.action_low, env.action_high))

    def from_params(params):
        mean, log_std = tf.split(params, 2, axis=-1)
        action = tf.reshape(to_env_action(tf.tanh(mean), low, high), [-1, *env.action_shape])
        return {"action": action, "mean": mean, "log_std": tf.clip_by_value(log_std, LOG_STD_MIN, LOG_STD_MAX)}

    if recurrent:
        def step(observation, state):
            params, next_state = actor([observation, state], training=False)
            return {**from_params(params), "state": next_state}

        return step
    return lambda observation: from_params(actor(observation, training=False))


def make_actor(config: SACConfig, env: EnvInfo):
    """The actor of `config` for `env` (with lstm_units, tfrl.agents.sac.recurrent's)."""
    if config.recurrent:
        return recurrent_actor(env.observations, env.action_size, config.hidden_sizes, config.lstm_units,
                               layer_init=config.layer_init)
    return squashed_gaussian_actor(env.observations, env.action_size, config.hidden_sizes, layer_init=config.layer_init)


def serving_policy(config: SACConfig, env: EnvInfo, actor=None, obs_normalization=None) -> ServingPolicy:
    """The greedy policy of `actor` (behind `obs_normalization` when config.normalize_observations), or of fresh
    ones to restore from a training checkpoint (ACTOR_KEY and tfrl.models.normalization.CHECKPOINT_KEY are their keys in
    SACLearner.checkpoint_items())."""
    if actor is None:
        actor = make_actor(config, env)
    if obs_normalization is None:
        obs_normalization = normalization.make_layer(config, env.observations)
    outputs = normalization.in_front(obs_normalization, greedy_outputs(actor, env, config.recurrent))
    return ServingPolicy(model=actor, outputs=outputs, observation_normalization=obs_normalization,
                         checkpoint_items={ACTOR_KEY: actor, **normalization.checkpoint_items(obs_normalization)},
                         state_size=2 * config.lstm_units)

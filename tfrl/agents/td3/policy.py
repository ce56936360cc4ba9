"""The TD3 policy that is exported and evaluated: the deterministic actor's action, rescaled to the Box. The agent
registry (tfrl.agents) names this module as TD3's policy module."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfrl.agents.off_policy.continuous import to_env_action
from tfrl.agents.td3.config import TD3Config
from tfrl.agents.td3.networks import deterministic_actor
from tfrl.envs import EnvInfo
from tfrl.models import normalization
from tfrl.models.export import ServingPolicy

ACTOR_KEY = "actor"  # the actor's key in TD3Learner.checkpoint_items() and in the serving policy's


def greedy_outputs(actor, env: EnvInfo):
    """observation [B, *obs_shape] -> {"action": the actor's action rescaled to the Box, float32
    [B, *action_shape]}."""
    low, high = (np.asarray(bound, np.float32) for bound in (env.action_low, env.action_high))

    def outputs(observation):
        squashed = actor(observation, training=False)
        return {"action": tf.reshape(to_env_action(squashed, low, high), [-1, *env.action_shape])}

    return outputs


def serving_policy(config: TD3Config, env: EnvInfo, actor=None, obs_normalization=None) -> ServingPolicy:
    """The greedy policy of `actor` (behind `obs_normalization` when config.normalize_observations), or of fresh
    ones to restore from a training checkpoint."""
    if actor is None:
        actor = deterministic_actor(env.observations, env.action_size, config.hidden_sizes)
    if obs_normalization is None:
        obs_normalization = normalization.make_layer(config, env.observations)
    outputs = normalization.in_front(obs_normalization, greedy_outputs(actor, env))
    return ServingPolicy(model=actor, outputs=outputs, observation_normalization=obs_normalization,
                         checkpoint_items={ACTOR_KEY: actor, **normalization.checkpoint_items(obs_normalization)})

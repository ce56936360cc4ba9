"""The CrossQ policy that is exported and evaluated: SAC's (the actor's mean, squashed and rescaled to the Box)
over CrossQ's actor, its renormalization in evaluation mode. The agent registry names this module as CrossQ's."""

from __future__ import annotations

from tfrl.agents.crossq.config import CrossQConfig
from tfrl.agents.crossq.networks import crossq_actor
from tfrl.agents.sac import policy as sac_policy
from tfrl.envs import EnvInfo
from tfrl.models.export import ServingPolicy


def serving_policy(config: CrossQConfig, env: EnvInfo, actor=None, obs_normalization=None) -> ServingPolicy:
    """The greedy policy of `actor`, or of a fresh one to restore from a training checkpoint (SAC's keys)."""
    if actor is None:
        actor = crossq_actor(env.observations, env.action_size, config)
    return sac_policy.serving_policy(config, env, actor, obs_normalization)

"""PPO as the registry knows it (tfrl.agents.core.AgentSpec): where its parts are, what it checks, what it needs."""

from __future__ import annotations

from tfrl.agents.actor_critic import spec as ac_spec
from tfrl.agents.core import AgentSpec

INDEX_BYTES = 16  # per row and epoch: the int64 permutation, its int32 copy, and that copy as a TF tensor


def estimate_memory(config, env_info, vector_mode: str) -> dict[str, int]:
    """A2C's parts, and the minibatch orders of one update: n_epochs shuffles of the rollout's rows
    (tfrl.agents.ppo.learning.minibatch_indices)."""
    return {**ac_spec.estimate_memory(config, env_info, vector_mode),
            "minibatch orders": config.n_epochs * config.rollout_size * INDEX_BYTES}


SPEC = AgentSpec("ppo", config="tfrl.agents.ppo.config:PPOConfig", learner="tfrl.agents.ppo.learning:PPOLearner",
                 agent="tfrl.agents.actor_critic.agent:ActorCriticAgent", policy="tfrl.agents.actor_critic.policy",
                 estimate_memory=estimate_memory, actions=("discrete", "multi_discrete", "continuous", "hybrid"),
                 check_observations=ac_spec.check_observations, convolves=ac_spec.convolves,
                 rollout_actors=ac_spec.ROLLOUT_ACTORS, check_actors=ac_spec.check_actors,
                 search_space={
                     **ac_spec.SEARCH_SPACE,
                     "rollout_length": {"type": "categorical", "choices": [16, 32, 64, 128, 256, 512, 1024]},
                     "batch_size": {"type": "categorical", "choices": [32, 64, 128, 256]},
                     "n_epochs": {"type": "categorical", "choices": [3, 5, 10, 20]},
                     "clip_range": {"type": "categorical", "choices": [0.1, 0.2, 0.3]},
                 })

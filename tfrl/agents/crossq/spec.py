"""CrossQ as the registry knows it (tfrl.agents.core.AgentSpec): SAC's actors and checks, its own networks."""

from __future__ import annotations

import dataclasses

from tfrl import memory
from tfrl.agents.off_policy import spec as off_policy_spec
from tfrl.agents.sac import spec as sac_spec


def estimate_memory(config, env_info, vector_mode: str) -> dict[str, int]:
    """The replay as SAC's; the actor and two critics (no targets) with three optimizers (6 copies), and 12
    passes over the activations of K joint batches (2B rows each: the current and next state-actions)."""
    obs_size = memory.observation_size(env_info)
    size = env_info.action_size
    actor_hidden, critic_hidden = list(config.hidden_sizes), list(config.critic_hidden_sizes)
    parameters = (memory.mlp_parameters([obs_size, *actor_hidden, 2 * size])
                  + 2 * memory.mlp_parameters([obs_size + size, *critic_hidden, 1]))
    rows = 2 * config.batch_size * config.gradient_steps_per_train
    activations = 2 * sum(critic_hidden) + sum(actor_hidden) + obs_size
    return {"envs": memory.envs_bytes(config.num_envs, vector_mode),
            "replay": memory.replay_bytes(config.replay_capacity, env_info, extra_floats=size + 2),
            "networks": memory.networks_bytes(parameters, copies=6, rows=rows, activations_per_row=activations,
                                              passes=12)}


_SEARCH_SPACE = {name: space for name, space in off_policy_spec.CONTINUOUS_SEARCH_SPACE.items()
                 if name not in ("target_update_tau", "hidden_sizes")}

SPEC = dataclasses.replace(
    sac_spec.SPEC, name="crossq", config="tfrl.agents.crossq.config:CrossQConfig",
    learner="tfrl.agents.crossq.learning:CrossQLearner", agent="tfrl.agents.crossq.agent:CrossQAgent",
    policy="tfrl.agents.crossq.policy", estimate_memory=estimate_memory,
    search_space={**_SEARCH_SPACE, "policy_delay": {"type": "int", "low": 1, "high": 4},
                  "critic_hidden_sizes": {"type": "categorical", "choices": ["256,256", "1024,1024", "2048,2048"]}})

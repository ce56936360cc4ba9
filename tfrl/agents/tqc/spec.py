"""TQC as the registry knows it (tfrl.agents.core.AgentSpec): SAC's policy, actors and checks, with
num_critics quantile critics."""

from __future__ import annotations

import dataclasses

from tfrl import memory
from tfrl.agents.sac import spec as sac_spec


def estimate_memory(config, env_info, vector_mode: str) -> dict[str, int]:
    """SAC's arithmetic with 2 * num_critics critics (and targets) of num_quantiles outputs, and the loss's
    [N, M] pairwise errors per critic and row of one batch (the error, its weight and its Huber value)."""
    obs_size = memory.observation_size(env_info)
    size, hidden = env_info.action_size, list(config.hidden_sizes)
    parameters = (memory.mlp_parameters([obs_size, *hidden, 2 * size])
                  + 2 * config.num_critics * memory.mlp_parameters([obs_size + size, *hidden, config.num_quantiles]))
    rows = config.batch_size * config.gradient_steps_per_train
    networks = memory.networks_bytes(parameters, copies=6, rows=rows,
                                     activations_per_row=sum(hidden) * config.num_critics + obs_size, passes=12)
    # The loss's pairwise errors exist for one batch at a time (the K steps run one by one).
    pairwise = 3 * config.num_critics * config.num_quantiles * config.kept_target_quantiles
    networks += 3 * config.batch_size * pairwise * memory.FLOAT  # 3 passes
    return {"envs": memory.envs_bytes(config.num_envs, vector_mode),
            "replay": memory.replay_bytes(config.replay_capacity, env_info, extra_floats=size + 2),
            "networks": networks}


SPEC = dataclasses.replace(
    sac_spec.SPEC, name="tqc", config="tfrl.agents.tqc.config:TQCConfig",
    learner="tfrl.agents.tqc.learning:TQCLearner", agent="tfrl.agents.tqc.agent:TQCAgent",
    estimate_memory=estimate_memory,
    search_space={**sac_spec.SPEC.search_space,
                  "top_quantiles_to_drop_per_net": {"type": "int", "low": 0, "high": 5},
                  "num_quantiles": {"type": "categorical", "choices": [10, 25, 50]}})

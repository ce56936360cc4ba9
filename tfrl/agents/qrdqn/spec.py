"""QR-DQN as the registry knows it (tfrl.agents.core.AgentSpec): DQN's checks, actors and memory arithmetic, with a
head of num_actions x num_quantiles outputs."""

from __future__ import annotations

import dataclasses

from tfrl.agents.dqn import spec as dqn_spec


def estimate_memory(config, env_info, vector_mode: str) -> dict[str, int]:
    """DQN's, with num_actions * num_quantiles outputs and the loss's [N, N] pairwise errors per row (the error,
    its weight and its Huber value)."""
    return dqn_spec.q_learning_memory(config, env_info, vector_mode,
                                      outputs=env_info.action_size * config.num_quantiles,
                                      loss_activations=3 * config.num_quantiles ** 2)


SPEC = dataclasses.replace(
    dqn_spec.SPEC, name="qrdqn", config="tfrl.agents.qrdqn.config:QRDQNConfig",
    learner="tfrl.agents.qrdqn.learning:QRDQNLearner", agent="tfrl.agents.qrdqn.agent:QRDQNAgent",
    policy="tfrl.agents.qrdqn.policy", estimate_memory=estimate_memory,
    search_space={**{name: entry for name, entry in dqn_spec.SPEC.search_space.items() if name != "dueling"},
                  "num_quantiles": {"type": "categorical", "choices": [10, 25, 50, 100, 200]}})

"""TD3 as the registry knows it (tfrl.agents.core.AgentSpec): where its parts are, what it needs."""

from __future__ import annotations

from tfrl import memory
from tfrl.agents.core import AgentSpec
from tfrl.agents.off_policy import ray_actors as off_policy_actors, spec as off_policy_spec


def estimate_memory(config, env_info, vector_mode: str) -> dict[str, int]:
    """The replay (obs, next obs; action, reward, discount), two actors and four Q-networks with two optimizers
    (5 copies of the online networks' size), and 10 passes over the activations of K batches."""
    obs_size = memory.observation_size(env_info)
    size, hidden = env_info.action_size, list(config.hidden_sizes)
    parameters = (2 * memory.mlp_parameters([obs_size, *hidden, size])
                  + 4 * memory.mlp_parameters([obs_size + size, *hidden, 1]))
    rows = config.batch_size * config.gradient_steps_per_train
    return {"envs": memory.envs_bytes(config.num_envs, vector_mode),
            "replay": memory.replay_bytes(config.replay_capacity, env_info, extra_floats=size + 2),
            "networks": memory.networks_bytes(parameters, copies=5, rows=rows,
                                              activations_per_row=sum(hidden) + obs_size, passes=10)}


SPEC = AgentSpec("td3", config="tfrl.agents.td3.config:TD3Config", learner="tfrl.agents.td3.learning:TD3Learner",
                 agent="tfrl.agents.td3.agent:TD3Agent", policy="tfrl.agents.td3.policy",
                 estimate_memory=estimate_memory, actions=("continuous",), images=False,
                 rollout_actors=off_policy_actors.ROLLOUT_ACTORS, check_actors=off_policy_actors.check_config,
                 search_space={  # rl_zoo3 samples the noise's std in [0, 1]; the delay: the paper's 2 and neighbours
                     **off_policy_spec.CONTINUOUS_SEARCH_SPACE,
                     "exploration_noise": {"type": "float", "low": 0.0, "high": 0.5},
                     "policy_delay": {"type": "categorical", "choices": [1, 2, 3]},
                 })

"""SAC as the registry knows it (tfrl.agents.core.AgentSpec): where its parts are, what it needs."""

from __future__ import annotations

from tfrl import memory
from tfrl.agents.core import AgentSpec, ByMemory
from tfrl.agents.off_policy import ray_actors as off_policy_actors, spec as off_policy_spec
from tfrl.errors import UsageError


def estimate_memory(config, env_info, vector_mode: str) -> dict[str, int]:
    """The replay (obs, next obs; action, reward, discount), the actor and four Q-networks (two targets) with
    three optimizers (6 copies), and 12 passes over the activations of K batches."""
    obs_size = memory.observation_size(env_info)
    size, hidden = env_info.action_size, list(config.hidden_sizes)
    parameters = (memory.mlp_parameters([obs_size, *hidden, 2 * size])
                  + 4 * memory.mlp_parameters([obs_size + size, *hidden, 1]))
    rows = config.batch_size * config.gradient_steps_per_train
    if config.lstm_units:  # LSTMs in the five networks; rows of the windows; a replay of rows with 3 states
        units = config.lstm_units
        parameters += 5 * 4 * units * (obs_size + units + 1)
        rows = rows * config.window_steps // config.sequence_length
        row_bytes = memory.observation_bytes(env_info) + (6 * units + size + 4) * memory.FLOAT
        return {"envs": memory.envs_bytes(config.num_envs, vector_mode), "replay": config.replay_capacity * row_bytes,
                "networks": memory.networks_bytes(parameters, copies=6, rows=rows,
                                                  activations_per_row=sum(hidden) + obs_size + 6 * units, passes=16)}
    return {"envs": memory.envs_bytes(config.num_envs, vector_mode),
            "replay": memory.replay_bytes(config.replay_capacity, env_info, extra_floats=size + 2),
            "networks": memory.networks_bytes(parameters, copies=6, rows=rows,
                                              activations_per_row=sum(hidden) + obs_size, passes=12)}


def check_actors(config, settings) -> None:
    if config.lstm_units:
        raise UsageError("--actors with lstm_units: SAC's sequence replay is filled in the learner's process only; "
                         "train SAC with memory without --actors")
    off_policy_actors.check_config(config, settings)


LEARNER = ByMemory("tfrl.agents.sac.learning:SACLearner", "tfrl.agents.sac.recurrent_learning:RecurrentSACLearner",
                   config_arg=0)
AGENT = ByMemory("tfrl.agents.sac.agent:SACAgent", "tfrl.agents.sac.recurrent_agent:RecurrentSACAgent", config_arg=1)
SPEC = AgentSpec("sac", config="tfrl.agents.sac.config:SACConfig", learner="tfrl.agents.sac.spec:LEARNER",
                 agent="tfrl.agents.sac.spec:AGENT", policy="tfrl.agents.sac.policy",
                 estimate_memory=estimate_memory, actions=("continuous",), images=False,
                 rollout_actors=off_policy_actors.ROLLOUT_ACTORS, check_actors=check_actors,
                 search_space=off_policy_spec.CONTINUOUS_SEARCH_SPACE)

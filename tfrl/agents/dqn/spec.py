"""DQN as the registry knows it (tfrl.agents.core.AgentSpec): where its parts are, what it checks, what it needs."""

from __future__ import annotations

from tfrl import memory
from tfrl.agents.core import AgentSpec, ByMemory
from tfrl.agents.off_policy import ray_actors as off_policy_actors, spec as off_policy_spec
from tfrl.config import field_torsos
from tfrl.errors import UsageError


def check_observations(config, env_info) -> None:
    cnn = [torso for torso in field_torsos(config.torso, env_info.observations).values() if torso != "mlp"]
    if cnn and config.train_in_background:
        raise UsageError(f"train_in_background: the {cnn[0]} torso's actor calls the live network, which a train "
                         "call in the background would change under it; set train_in_background=false")


def convolves(config, env_info) -> bool:
    return any(torso != "mlp" for torso in field_torsos(config.torso, env_info.observations).values())


def estimate_memory(config, env_info, vector_mode: str) -> dict[str, int]:
    """The replay (obs, next obs; action, reward, discount), the online and target Q-networks with Adam's slots,
    gradients, the mirror and the returned weights (8 copies), and the activations of K batches. With memory: a
    replay of rows (one observation, the state and 5 numbers each) and the LSTM's weights and activations along
    every window (the batch's rows times window / sequence_length)."""
    if not config.lstm_units:
        return q_learning_memory(config, env_info, vector_mode, outputs=env_info.action_size + 1)  # + 1: dueling's V
    units = config.lstm_units
    torso = memory.torso(env_info.observations, config.torso)
    features = ([torso.features, *config.hidden_sizes])[-1]
    parameters = (torso.parameters + memory.mlp_parameters([torso.features, *config.hidden_sizes])
                  + 4 * units * (features + units + 1) + memory.mlp_parameters([units, env_info.action_size + 1]))
    rows = config.batch_size * config.gradient_steps_per_train * config.window_steps // config.sequence_length
    activations = sum(config.hidden_sizes) + torso.activations + memory.observation_size(env_info) + 6 * units
    row_bytes = memory.observation_bytes(env_info) + (2 * units + 5) * memory.FLOAT
    return {"envs": memory.envs_bytes(config.num_envs, vector_mode), "replay": config.replay_capacity * row_bytes,
            "networks": memory.networks_bytes(parameters, copies=8, rows=rows, activations_per_row=activations,
                                              passes=3)}


def check_actors(config, settings) -> None:
    if config.lstm_units:
        raise UsageError("--actors with lstm_units: DQN's sequence replay is filled in the learner's process only; "
                         "train DQN with memory without --actors")
    off_policy_actors.check_config(config, settings)


def q_learning_memory(config, env_info, vector_mode: str, outputs: int, loss_activations: int = 0) -> dict[str, int]:
    """estimate_memory of a Q-learning agent whose head has `outputs` units and whose loss holds
    `loss_activations` more floats per row (QR-DQN's pairwise quantile errors). The target network's pass covers
    the K batches of a call at once; the loss exists for one batch at a time (the K steps run one by one)."""
    torso = memory.torso(env_info.observations, config.torso)
    parameters = torso.parameters + memory.mlp_parameters([torso.features, *config.hidden_sizes, outputs])
    rows = config.batch_size * config.gradient_steps_per_train
    activations = sum(config.hidden_sizes) + torso.activations + memory.observation_size(env_info)
    networks = memory.networks_bytes(parameters, copies=8, rows=rows, activations_per_row=activations, passes=3)
    networks += 3 * config.batch_size * loss_activations * memory.FLOAT  # 3 passes of one batch's loss
    return {"envs": memory.envs_bytes(config.num_envs, vector_mode),
            "replay": memory.replay_bytes(config.replay_capacity, env_info, extra_floats=3), "networks": networks}


LEARNER = ByMemory("tfrl.agents.dqn.learning:DQNLearner", "tfrl.agents.dqn.recurrent_learning:RecurrentDQNLearner",
                   config_arg=0)
AGENT = ByMemory("tfrl.agents.dqn.agent:DQNAgent", "tfrl.agents.dqn.recurrent_agent:RecurrentDQNAgent", config_arg=1)
SPEC = AgentSpec("dqn", config="tfrl.agents.dqn.config:DQNConfig", learner="tfrl.agents.dqn.spec:LEARNER",
                 agent="tfrl.agents.dqn.spec:AGENT", policy="tfrl.agents.dqn.policy",
                 estimate_memory=estimate_memory, check_observations=check_observations, convolves=convolves,
                 refusals={"multi_discrete": "a Q-function over every combination of the dimensions grows "
                                             "exponentially, and factorized ones are a research topic"},
                 rollout_actors=off_policy_actors.ROLLOUT_ACTORS, check_actors=check_actors,
                 search_space={
                     **off_policy_spec.SEARCH_SPACE,
                     "target_update_period_env_steps": {"type": "categorical", "choices": [10, 100, 250, 1000, 5000]},
                     "epsilon_end": {"type": "float", "low": 0.0, "high": 0.2},
                     "epsilon_decay_fraction": {"type": "float", "low": 0.05, "high": 0.5},
                     "n_step_return": {"type": "categorical", "choices": [1, 3, 5]},
                     "dueling": {"type": "categorical", "choices": [False, True]},
                     "hidden_sizes": {"type": "categorical", "choices": ["64", "64,64", "256,256"]},
                 })

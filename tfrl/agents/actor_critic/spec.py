"""What A2C's and PPO's specs share (tfrl.agents.a2c.spec, tfrl.agents.ppo.spec): the observation checks and the
memory of the actor-critic network and its rollouts."""

from __future__ import annotations

from tfrl import memory
from tfrl.config import field_torsos
from tfrl.errors import UsageError
from tfrl.models.policy_inputs import STATE_NAME, input_name
from tfrl.tuning import spaces

ROLLOUT_ACTORS = "tfrl.agents.actor_critic.ray_actors:RayRollouts"  # --actors
# What `tfrl tune` samples of A2C and PPO (tfrl.tuning.spaces; after rl-baselines3-zoo's samplers).
SEARCH_SPACE = {
    "learning_rate": spaces.LOG_LEARNING_RATE,
    "lr_schedule": {"type": "categorical", "choices": ["constant", "linear"]},
    "gamma": spaces.GAMMAS,
    "gae_lambda": {"type": "categorical", "choices": [0.8, 0.9, 0.92, 0.95, 0.98, 1.0]},
    "entropy_coef": {"type": "float", "low": 1e-8, "high": 0.05, "log": True},  # the zoo's 1e-8..0.1; ~0: no bonus
    "value_coef": {"type": "float", "low": 0.2, "high": 1.0},
    "max_grad_norm": {"type": "categorical", "choices": [0.3, 0.5, 1.0, 2.0, 5.0]},
    "hidden_sizes": {"type": "categorical", "choices": ["64,64", "128,128", "256,256"]},
    "activation": {"type": "categorical", "choices": ["tanh", "relu"]},
}


def check_actors(config, settings) -> None:
    """UsageError unless A2C's or PPO's `config` can run with these actors (--actors)."""
    if settings.mode == "sync" and settings.weight_sync_period != 1:
        raise UsageError("--weight_sync_period: synchronous rollouts act with the learner's newest weights; "
                         "use --actor_mode=async for older ones")
    if settings.mode != "async":
        return
    if config.num_envs % settings.count:
        raise UsageError(f"--actor_mode=async: num_envs={config.num_envs} must be a multiple of "
                         f"--actors={settings.count}, so that any {settings.count} share rollouts make one rollout")
    if config.lstm_units:
        raise UsageError("--actor_mode=async: a policy with memory (lstm_units) is not evaluated again for "
                         "V-trace; use --actor_mode=sync")


def check_observations(config, env_info) -> None:
    field_torsos(config.torso, env_info.observations)  # ConfigError if one cannot be
    observations = env_info.observations
    if config.lstm_units and observations.structured and any(input_name(f.key) == STATE_NAME
                                                             for f in observations.fields):
        raise UsageError(f"lstm_units: the export of a policy with memory takes its state as input "
                         f"{STATE_NAME!r}, which an observation field of this env is called too; rename that key "
                         "(a gymnasium wrapper) to train a policy with memory on it")
    if env_info.obs_dtype == "uint8" and config.normalize_observations:
        raise UsageError("normalize_observations: uint8 (image) observations are scaled to [0, 1] inside the "
                         "network, not normalized; set normalize_observations=false (with Dict observations, "
                         "only the vector fields are normalized)")


def convolves(config, env_info) -> bool:
    return any(torso != "mlp" for torso in field_torsos(config.torso, env_info.observations).values())


def estimate_memory(config, env_info, vector_mode: str) -> dict[str, int]:
    """The rollout (stored, and packed for the learner), the network with its optimizer's slots, gradients, the
    mirror and the returned weights (6 copies), and 3 passes over the activations of the rollout's rows. With
    lstm_units, each LSTM's 4 gates (4 U (F + U + 1) weights), its states stored with the rollout, and its gates
    and states kept per row for the backward pass through time."""
    torso = memory.torso(env_info.observations, config.torso)
    torsos = 1 if config.shared_torso else 2
    hidden, actions, units = list(config.hidden_sizes), env_info.action_size, config.lstm_units
    post = list(config.post_lstm_sizes) if units else []
    lstm_reads = [torso.features, *hidden][-1]
    head_reads = [*hidden, *([units] if units else []), *post][-1]
    parameters = (torso.parameters + torsos * memory.mlp_parameters([torso.features, *hidden])
                  + torsos * 4 * units * (lstm_reads + units + 1) + torsos * memory.mlp_parameters([units, *post])
                  + (head_reads + 1) * (actions + 1))
    rows, obs_bytes = config.rollout_size, memory.observation_bytes(env_info)
    activations = (torsos * (sum(hidden) + 6 * units + sum(post)) + torso.activations
                   + memory.observation_size(env_info))
    state_floats = 2 * units * torsos
    return {"envs": memory.envs_bytes(config.num_envs, vector_mode),
            "rollouts": 2 * rows * (obs_bytes + (actions + 8 + state_floats) * memory.FLOAT),
            "networks": memory.networks_bytes(parameters, copies=6, rows=rows, activations_per_row=activations,
                                              passes=3)}

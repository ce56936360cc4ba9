"""Actor-critic networks (A2C, PPO): the Keras model whose policy output a head (tfrl.agents.actor_critic.heads,
re-exported here) turns into a distribution."""

from __future__ import annotations

import keras

from tfrl.agents.actor_critic import recurrent
from tfrl.agents.actor_critic.config import ActorCriticConfig
from tfrl.agents.actor_critic.feedforward import actor_critic_network
from tfrl.envs import EnvInfo


def make_network(config: ActorCriticConfig, env: EnvInfo, head) -> keras.Model:
    """obs [B, *obs_shape] -> (policy params [B, head.num_params], value [B]); with lstm_units, the recurrent step
    [obs, state] -> (policy params, value, next state) (tfrl.agents.actor_critic.recurrent)."""
    if config.recurrent:
        return recurrent.recurrent_actor_critic_network(
            env.observations, head.num_params, config.hidden_sizes, config.lstm_units, config.activation,
            config.shared_torso, log_std_size=head.log_std_size, torso=config.torso,
            post_lstm_sizes=config.post_lstm_sizes, layer_init=config.layer_init, log_std_init=config.log_std_init)
    return actor_critic_network(env.observations, head.num_params, config.hidden_sizes, config.activation,
                                config.shared_torso, log_std_size=head.log_std_size, torso=config.torso,
                                layer_init=config.layer_init, log_std_init=config.log_std_init)

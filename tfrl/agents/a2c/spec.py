"""A2C as the registry knows it (tfrl.agents.core.AgentSpec): where its parts are, what it checks, what it needs."""

from tfrl.agents.actor_critic import spec as ac_spec
from tfrl.agents.core import AgentSpec

SPEC = AgentSpec("a2c", config="tfrl.agents.a2c.config:A2CConfig", learner="tfrl.agents.a2c.learning:A2CLearner",
                 agent="tfrl.agents.actor_critic.agent:ActorCriticAgent", policy="tfrl.agents.actor_critic.policy",
                 estimate_memory=ac_spec.estimate_memory, actions=("discrete", "multi_discrete", "continuous", "hybrid"),
                 check_observations=ac_spec.check_observations, convolves=ac_spec.convolves,
                 rollout_actors=ac_spec.ROLLOUT_ACTORS, check_actors=ac_spec.check_actors,
                 search_space={
                     **ac_spec.SEARCH_SPACE,
                     "rollout_length": {"type": "categorical", "choices": [5, 8, 16, 32, 64, 128]},
                     "normalize_advantage": {"type": "categorical", "choices": [False, True]},
                     "optimizer": {"type": "categorical", "choices": ["rmsprop", "adam"]},
                 })

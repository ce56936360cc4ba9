"""The PPO policy that is exported and evaluated: PPO trains A2C's actor-critic network, so its greedy policy
(the most likely action, no sampling) is A2C's. tfrl.runs finds this module as `tfrl.agents.ppo.policy`."""

from tfrl.agents.a2c.policy import greedy_outputs, serving_policy

__all__ = ["greedy_outputs", "serving_policy"]

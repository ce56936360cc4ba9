"""PPO training: the on-policy loop (tfrl.agents.on_policy_loop) with the PPO learner, n_epochs of minibatch
steps per rollout, all in one TF call."""

from __future__ import annotations

import functools

from tfrl import best_policy
from tfrl.agents import on_policy_loop
from tfrl.agents.ppo import policy as ppo_policy
from tfrl.agents.ppo.config import PPOConfig
from tfrl.agents.ppo.learning import PPOLearner, check_distribution
from tfrl.runtime import Runtime


def check_runtime(config: PPOConfig, runtime: Runtime) -> None:
    """UsageError if `config` cannot train under `runtime`'s strategy; writes nothing.

    Workers stay in step without more checks: every worker's update makes the same number of minibatch steps.
    """
    check_distribution(config, runtime)
    best_policy.check_runtime(config.keep_best_policy, runtime)


train = functools.partial(on_policy_loop.train, PPOLearner, ppo_policy)
train.__doc__ = on_policy_loop.train.__doc__

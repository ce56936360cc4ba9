"""A2C training: the on-policy loop (tfrl.agents.on_policy_loop) with the A2C learner, one gradient step per rollout."""

from __future__ import annotations

import functools

from tfrl import best_policy
from tfrl.agents import on_policy_loop
from tfrl.agents.a2c import policy as a2c_policy
from tfrl.agents.a2c.config import A2CConfig
from tfrl.agents.a2c.learning import A2CLearner, check_distribution
from tfrl.runtime import Runtime

learning_rate_at = on_policy_loop.learning_rate_at


def check_runtime(config: A2CConfig, runtime: Runtime) -> None:
    """UsageError if `config` cannot train under `runtime`'s strategy; writes nothing.

    Workers stay in step without more checks: each update follows a fixed n_steps rollout on every worker.
    """
    check_distribution(config, runtime)
    best_policy.check_runtime(config.keep_best_policy, runtime)


def _make_learner(config: A2CConfig, env, runtime: Runtime, seed: int) -> A2CLearner:
    del seed  # A2C's update draws no random numbers
    return A2CLearner(config, env, runtime)


train = functools.partial(on_policy_loop.train, _make_learner, a2c_policy)
train.__doc__ = on_policy_loop.train.__doc__

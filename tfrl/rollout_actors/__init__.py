"""Rollouts stepped in Ray actors (PyPI `ray`, extra `ray`; --actors=N): each actor holds its share of the envs and
a NumPy copy of the policy, so that the envs can run on other cores or machines than the learner.

    pool        what every kind of actor shares: shares of the envs, gathering a round, restarts, resume, rates
    cluster     the Ray the actors live in: started locally, or a cluster joined (--ray_address)

Each agent family owns its kind of actor, named by its AgentSpec.rollout_actors: A2C and PPO's rollouts, gathered
from every actor (sync) or as they arrive and corrected with V-trace (async), in
tfrl.agents.actor_critic.ray_actors (RayRollouts); DQN, SAC and TD3's train periods of transitions into the
learner's replay in tfrl.agents.off_policy.ray_actors (RayTransitions).

docs/distributed.md says how to use them and how far they scale.
"""

from __future__ import annotations

import dataclasses

MODES = ("sync", "async")


@dataclasses.dataclass(frozen=True)
class ActorSettings:
    """How a run steps its envs in rollout actors (--actors, --actor_mode, --weight_sync_period)."""

    count: int = 0  # actors; 0 steps the envs in the learner's process
    mode: str = "sync"  # sync: every round acts with the learner's newest weights; async: A2C and PPO (V-trace)
    weight_sync_period: int = 1  # learner updates (rounds) between two refreshes of the actors' weights

"""Stepping the envs for one on-policy rollout, apart from what must see every env in time order.

collect_steps runs the T vector steps with the NumPy actor and records, per step, what the envs and the actor
gave: s_t (normalized by the statistics of its vector step), a_t, V(s_t), the policy params, the env's raw r_t,
terminated and truncated, and V(the final observation) where an episode was truncated. It needs nothing but the
envs, the actor and the observation statistics, so it can run where the envs are (a Ray actor, tfrl's
distributed rollouts). What needs every env of the rollout in time order, the reward scaler and the advantages,
stays with the learner's side: RolloutStorage.finish.
"""

from __future__ import annotations

import numpy as np

from tfrl.agents.actor_critic.rollout import RolloutStorage
from tfrl.envs import VectorStepper


def collect_steps(env: VectorStepper, actor, obs_normalizer, head, storage: RolloutStorage) -> np.ndarray:
    """Fills storage's T steps from env; returns V(s_T) [N], the value of the observation after the last step.

    actor: an ActorCriticActor (or RecurrentActor); obs_normalizer: tfrl.models.normalization's, counting each
    observation it normalizes; head: the policy head (env_action).
    """
    for t in range(storage.rollout_length):
        obs = obs_normalizer.observe(env.obs)
        action, value, policy_params = actor.act(obs)
        step = env.step(head.env_action(action))
        final_values = None
        if step.truncated.any():  # V(the episode's last obs), before a recurrent actor forgets the episode
            final_values = actor.value(obs_normalizer(step.final_obs()))
        actor.episodes_ended(step.done)
        storage.record(t, step, obs, action, value, policy_params, final_values, actor.memory())
    return actor.value(obs_normalizer(env.obs))  # s_T is observed at the next step

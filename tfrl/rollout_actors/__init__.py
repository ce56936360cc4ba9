"""Rollouts stepped in Ray actors (PyPI `ray`, extra `ray`; --actors=N): each actor holds its share of the envs and
a NumPy copy of the policy, so that the envs can run on other cores or machines than the learner.

    pool        what every kind of actor shares: shares of the envs, gathering a round, restarts, resume, rates
    on_policy   A2C, PPO: one rollout per update (RayRollouts)
    off_policy  DQN, SAC, TD3: one train period of transitions per round, into the learner's replay (RayTransitions)
    cluster     the Ray the actors live in: started locally, or a cluster joined (--ray_address)

docs/distributed.md says how to use them and how far they scale.
"""

"""What the actor-critic agents (A2C, PPO) share: the network and its policy head, the NumPy actor, the rollout
and its advantages, the exported policy, and the agent that collects rollouts and hands them to a learner.
a2c/ and ppo/ hold only their config, loss and learner."""

"""QR-DQN (Dabney et al. 2018): DQN with a quantile head and the quantile Huber loss. Acting, the replay, the
train cadence and the export are DQN's (tfrl.agents.dqn), with this package's network, loss and policy."""

"""What the replay-based agents (DQN, SAC, and TD3 to come) share: their config base (config.py) and their
replay-backed training (training.py): the replay, when a train call falls due, the call itself (at once or in a
background thread), the weights it hands back, and their share of a checkpoint."""

"""SAC: soft actor-critic (Haarnoja et al. 2018, with the learned temperature of "SAC: Algorithms and
Applications", 2018) for Box action spaces."""

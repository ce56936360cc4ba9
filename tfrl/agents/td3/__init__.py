"""TD3: twin delayed deep deterministic policy gradient (Fujimoto et al. 2018) on the off-policy core."""

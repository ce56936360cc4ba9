"""PPO: proximal policy optimization with the clipped surrogate (Schulman et al. 2017)."""

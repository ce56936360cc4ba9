"""TD3 hyperparameters: one frozen dataclass, every field with its unit."""

from __future__ import annotations

import dataclasses

from tfrl.agents.off_policy.config import OffPolicyConfig
from tfrl.config import require


@dataclasses.dataclass(frozen=True)
class TD3Config(OffPolicyConfig):
    """Twin delayed DDPG (Fujimoto et al. 2018): a deterministic tanh actor, twin Q-networks, target policy
    smoothing and delayed actor and target updates. Defaults are SB3's TD3 defaults; the run's length, vector envs
    and cadences are LoopConfig's fields (tfrl.config)."""

    NETWORK_FIELDS = ("hidden_sizes", "normalize_observations")

    learning_rate: float = 1e-3
    """Adam step size of the actor and the Q-networks."""
    exploration_noise: float = 0.1
    """Std of the Gaussian noise added to the actor's action while collecting, in units of the action range's
    half-width (actions live in [-1, 1] inside the agent); the noisy action is clipped to [-1, 1]."""
    policy_delay: int = 2
    """The actor and the target networks are updated on every policy_delay-th gradient step (the critics on
    every one)."""
    target_policy_noise: float = 0.2
    """Std of the noise added to the target actor's action at s' (target policy smoothing)."""
    target_noise_clip: float = 0.5
    """The smoothing noise is clipped to [-target_noise_clip, target_noise_clip] before it is added."""
    normalize_observations: bool = False
    """Normalize observations by their running mean and std (tfrl.models.normalization), as SAC does."""
    observation_clip: float = 10.0
    """Normalized observations are clipped to [-observation_clip, observation_clip]."""

    def __post_init__(self):
        super().__post_init__()
        require(self.policy_delay >= 1, f"policy_delay must be >= 1, got {self.policy_delay}")
        for name in ("exploration_noise", "target_policy_noise", "target_noise_clip"):
            require(getattr(self, name) >= 0, f"{name} must be >= 0, got {getattr(self, name)}")
        require(self.observation_clip > 0, f"observation_clip must be > 0, got {self.observation_clip}")

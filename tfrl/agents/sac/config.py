"""SAC hyperparameters: one frozen dataclass, every field with its unit."""

from __future__ import annotations

import dataclasses

from tfrl.agents.off_policy.config import OffPolicyConfig
from tfrl.config import require


@dataclasses.dataclass(frozen=True)
class SACConfig(OffPolicyConfig):
    """Soft actor-critic with twin Q-networks, Polyak targets, a tanh-squashed Gaussian actor and a learned
    temperature (target entropy -|A| by default). Defaults are SB3's SAC defaults (OffPolicyConfig's); the run's
    length, vector envs and cadences are LoopConfig's fields (tfrl.config)."""

    NETWORK_FIELDS = ("hidden_sizes", "normalize_observations", "lstm_units")
    NO_MEMORY = ""  # SAC takes lstm_units (tfrl.agents.sac.recurrent)

    learning_rate: float = 3e-4
    """Adam step size of the actor, the Q-networks and the temperature."""
    learning_starts: int = 100
    """Env steps taken with uniformly random actions, before the first gradient step."""
    initial_temperature: float = 1.0
    """alpha at the start: the weight of the entropy bonus."""
    learn_temperature: bool = True
    """Adjust alpha so that the policy's entropy tracks target_entropy (False: alpha stays initial_temperature)."""
    target_entropy: float | None = None
    """Entropy the temperature steers towards, in nats; None = -(action dimensions), the papers' default."""
    normalize_observations: bool = False
    """Normalize observations by their running mean and std (tfrl.models.normalization): the replay keeps raw ones and
    each sampled batch is normalized with the statistics of its train call, as SB3 does; frozen at evaluation
    and inside the export."""
    observation_clip: float = 10.0
    """Normalized observations are clipped to [-observation_clip, observation_clip]."""

    def __post_init__(self):
        super().__post_init__()
        require(self.observation_clip > 0, f"observation_clip must be > 0, got {self.observation_clip}")
        require(self.initial_temperature > 0, f"initial_temperature must be > 0, got {self.initial_temperature}")

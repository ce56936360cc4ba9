"""CrossQ hyperparameters: SAC's, with the batch renormalization, the wider critics and the delayed actor."""

from __future__ import annotations

import dataclasses

from tfrl.agents.sac.config import SACConfig
from tfrl.config import require, require_positive_sizes


@dataclasses.dataclass(frozen=True)
class CrossQConfig(SACConfig):
    """CrossQ (Bhatt et al. 2024, "CrossQ: Batch Normalization in Deep Reinforcement Learning for Greater Sample
    Efficiency and Simplicity"): SAC with no target networks; the critics see the replayed (s, a) and the next
    (s', a' ~ pi) in one batch, so their batch renormalization normalizes both with the same statistics. The actor
    and the temperature step every policy_delay gradient steps. Defaults are SBX's and sb3-contrib's CrossQ
    (critics of [1024, 1024], Adam's beta_1 0.5); every other field is SACConfig's."""

    NO_MEMORY = ("CrossQ's batch renormalization over joint batches has no sequence form: use --agent=sac for an "
                 "actor and critics with memory")

    NETWORK_FIELDS = ("hidden_sizes", "critic_hidden_sizes", "actor_batch_norm", "normalize_observations")

    learning_rate: float = 1e-3
    """Adam step size of the actor, the critics and the temperature."""
    target_update_tau: float = 1.0
    """Only 1.0: CrossQ has no target networks (a target that is the critic itself, as sb3-contrib writes it)."""
    critic_hidden_sizes: tuple[int, ...] = (1024, 1024)
    """Units of each hidden layer of the two critics (the paper's are 2048 wide; SBX and sb3-contrib use 1024).
    hidden_sizes is the actor's."""
    policy_delay: int = 3
    """Gradient steps per actor and temperature step (the critics step every gradient step)."""
    adam_beta_1: float = 0.5
    """Every Adam optimizer's first-moment decay (the CrossQ paper's 0.5; Adam's usual 0.9)."""
    batch_norm_momentum: float = 0.99
    """Each renormalization layer's moving statistics keep this share of their value per training pass."""
    batch_norm_epsilon: float = 1e-3
    """Added to every variance before its square root."""
    renorm_warmup_steps: int = 100_000
    """Training passes of a layer with plain batch normalization before renormalization (r, d) starts: a critic
    layer passes once per gradient step, an actor layer once per actor step."""
    actor_batch_norm: bool = True
    """Batch renormalization in the actor too (SBX and sb3-contrib do; False: SAC's plain actor torso)."""

    def __post_init__(self):
        super().__post_init__()
        require(self.target_update_tau == 1.0, "target_update_tau must be 1.0: CrossQ has no target networks, its "
                f"critics bootstrap from themselves (got {self.target_update_tau})")
        require_positive_sizes("critic_hidden_sizes", self.critic_hidden_sizes)
        require(self.policy_delay >= 1, f"policy_delay must be >= 1, got {self.policy_delay}")
        require(0 <= self.adam_beta_1 < 1, f"adam_beta_1 must be in [0, 1), got {self.adam_beta_1}")
        require(0 <= self.batch_norm_momentum < 1,
                f"batch_norm_momentum must be in [0, 1), got {self.batch_norm_momentum}")
        require(self.batch_norm_epsilon > 0, f"batch_norm_epsilon must be > 0, got {self.batch_norm_epsilon}")
        require(self.renorm_warmup_steps >= 0, f"renorm_warmup_steps must be >= 0, got {self.renorm_warmup_steps}")
        require(self.batch_size >= 2, f"batch_size must be >= 2 (batch statistics), got {self.batch_size}")

"""TQC hyperparameters: SAC's, with the critics' quantiles and how many of the pooled target's are dropped."""

from __future__ import annotations

import dataclasses

from tfrl.agents.sac.config import SACConfig
from tfrl.config import require


@dataclasses.dataclass(frozen=True)
class TQCConfig(SACConfig):
    """Truncated Quantile Critics (Kuznetsov et al. 2020, "Controlling Overestimation Bias with Truncated Mixture
    of Continuous Distributional Quantile Critics"): num_critics critics of num_quantiles quantiles each; the target
    pools the target critics' quantiles at (s', a' ~ pi), sorts them and drops the top
    top_quantiles_to_drop_per_net * num_critics, which controls the overestimation that SAC's min of two critics
    controls. The actor maximizes the mean of every critic's quantiles. Defaults are sb3-contrib's TQC; every other
    field is SACConfig's."""

    NO_MEMORY = "TQC's quantile critics have no sequence learner: use --agent=sac for an actor and critics with memory"

    NETWORK_FIELDS = ("hidden_sizes", "normalize_observations", "num_critics", "num_quantiles")

    num_critics: int = 2
    """Critics, each with its own target network."""
    num_quantiles: int = 25
    """Quantiles of the return each critic gives, at the midpoints tau_i = (2i + 1) / (2N)."""
    top_quantiles_to_drop_per_net: int = 2
    """d: the target keeps the num_critics * (num_quantiles - d) smallest of the pooled quantiles."""

    def __post_init__(self):
        super().__post_init__()
        require(1 <= self.num_critics <= 100, f"num_critics must be in [1, 100], got {self.num_critics}")
        require(1 <= self.num_quantiles <= 1000, f"num_quantiles must be in [1, 1000], got {self.num_quantiles}")
        require(0 <= self.top_quantiles_to_drop_per_net < self.num_quantiles,
                f"top_quantiles_to_drop_per_net must be in [0, num_quantiles), got "
                f"{self.top_quantiles_to_drop_per_net} with num_quantiles={self.num_quantiles}")

    @property
    def kept_target_quantiles(self) -> int:
        """The target's atoms per row: num_critics * (num_quantiles - top_quantiles_to_drop_per_net)."""
        return self.num_critics * (self.num_quantiles - self.top_quantiles_to_drop_per_net)

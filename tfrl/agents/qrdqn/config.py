"""QR-DQN hyperparameters: DQN's, with the number of quantiles."""

from __future__ import annotations

import dataclasses

from tfrl.agents.dqn.config import DQNConfig
from tfrl.config import require


@dataclasses.dataclass(frozen=True)
class QRDQNConfig(DQNConfig):
    """Quantile-regression DQN (Dabney et al. 2018, "Distributional Reinforcement Learning with Quantile
    Regression"): the network gives num_quantiles quantiles of the return of each action, Q is their mean, and the
    loss is the quantile Huber loss against the target network's quantiles of the bootstrap action.

    Every other field is DQNConfig's (the replay, n-step returns, prioritized replay, train calls, the target
    update, epsilon-greedy acting), with the paper's and sb3-contrib's choice of bootstrap action as the default:
    the target network's greedy action (double_dqn=false).
    """

    NETWORK_FIELDS = ("torso", "hidden_sizes", "num_quantiles")
    NO_MEMORY = "QR-DQN's quantile head has no sequence learner: use --agent=dqn for a Q-network with memory"

    double_dqn: bool = False
    """Pick the bootstrap action by the online network's mean quantiles instead of the target network's."""
    num_quantiles: int = 200
    """N: quantiles per action, at the midpoints tau_i = (2i + 1) / (2N) (sb3-contrib's default 200)."""
    quantile_huber_kappa: float = 1.0
    """kappa of the quantile Huber loss, in units of return: errors below it are squared, above it linear."""

    def __post_init__(self):
        super().__post_init__()
        require(self.num_quantiles >= 1, f"num_quantiles must be >= 1, got {self.num_quantiles}")
        require(self.num_quantiles <= 10_000, f"num_quantiles must be at most 10000, got {self.num_quantiles}")
        require(self.quantile_huber_kappa > 0, f"quantile_huber_kappa must be > 0, got {self.quantile_huber_kappa}")
        require(not self.dueling, "dueling: QR-DQN's quantile head has no dueling form here; set dueling=false")

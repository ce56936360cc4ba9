"""DQN hyperparameters: one frozen dataclass, every field with its unit."""

from __future__ import annotations

import dataclasses

from tfrl.agents.off_policy.config import OffPolicyConfig
from tfrl.config import TORSOS, require


@dataclasses.dataclass(frozen=True)
class DQNConfig(OffPolicyConfig):
    """Deep Q-learning (Mnih et al. 2015) with double Q-learning, n-step returns and a dueling head as options.

    The replay, train calls and target fields are OffPolicyConfig's (here with DQN's defaults), the run's length,
    vector envs and cadences LoopConfig's (tfrl.config).
    """

    RENAMED = {"n_step": "n_step_return", "train_freq": "train_period_env_steps",
               "gradient_steps": "gradient_steps_per_train",
               "target_update_period": "target_update_period_env_steps"}
    NETWORK_FIELDS = ("torso", "hidden_sizes", "dueling", "lstm_units")
    NO_MEMORY = ""  # DQN takes lstm_units (tfrl.agents.dqn.recurrent)

    # OffPolicyConfig's fields, with DQN's defaults.
    learning_rate: float = 6.3e-4
    """Adam step size at the first gradient step."""
    batch_size: int = 128
    replay_capacity: int = 50_000
    learning_starts: int = 0
    train_period_env_steps: int = 4
    gradient_steps_per_train: int = 4
    target_update_tau: float = 1.0
    max_grad_norm: float = 10.0

    torso: str = "auto"
    """What reads the observations (tfrl.models.networks): auto (a CNN for HWC uint8 images, else mlp), mlp, nature_cnn
    or minatar_cnn."""
    dueling: bool = False
    """Dueling head (Wang et al. 2016): Q = V + A - mean(A)."""
    final_learning_rate_fraction: float = 1.0
    """Step size at the last gradient step, as a fraction of learning_rate; it falls linearly in between
    (1.0 = constant). A decaying step size steadies the final policy."""
    n_step_return: int = 1
    """Rewards summed before bootstrapping, in env steps of one env: target = sum_k gamma^k r_k + gamma^n Q(s_n, a*)."""
    target_update_period_env_steps: int = 250
    """Env steps between target-network updates."""
    double_dqn: bool = True
    """Pick the bootstrap action with the online network, value it with the target network (van Hasselt et al. 2016)."""
    epsilon_start: float = 1.0
    """Exploration rate at env step 0."""
    epsilon_end: float = 0.1
    """Exploration rate after the decay."""
    epsilon_decay_fraction: float = 0.12
    """Fraction of total_env_steps over which epsilon falls linearly from start to end."""
    prioritized_replay: bool = False
    """Sample transitions in proportion to their last |TD error| (Schaul et al. 2016, proportional; see
    tfrl.replay.prioritized), with importance-sampling weights on the loss."""
    priority_exponent: float = 0.6
    """alpha: P(i) is proportional to priority_i^alpha (0 = uniform). Prioritized replay only."""
    importance_sampling_start: float = 0.4
    """beta at env step 0 of the importance-sampling weights, annealed linearly to 1 over total_env_steps
    (1 corrects the sampling bias fully). Prioritized replay only."""
    priority_epsilon: float = 1e-6
    """Added to |TD error| so that no transition's priority is 0. Prioritized replay only."""

    @property
    def total_gradient_steps(self) -> int:
        """Gradient steps the whole run makes (train calls after learning_starts, times gradient_steps_per_train)."""
        calls = max(0, (self.total_env_steps - self.first_train_at) // self.train_period_env_steps + 1)
        return calls * self.gradient_steps_per_train

    def __post_init__(self):
        super().__post_init__()
        for name in ("n_step_return", "target_update_period_env_steps"):
            require(getattr(self, name) > 0, f"{name} must be > 0, got {getattr(self, name)}")
        require(self.torso in TORSOS, f"torso must be one of {', '.join(TORSOS)}, got {self.torso!r}")
        require(0 <= self.final_learning_rate_fraction <= 1,
                f"final_learning_rate_fraction must be in [0, 1], got {self.final_learning_rate_fraction}")
        for name in ("epsilon_start", "epsilon_end", "epsilon_decay_fraction"):
            require(0 <= getattr(self, name) <= 1, f"{name} must be in [0, 1], got {getattr(self, name)}")
        require(0 <= self.priority_exponent <= 1, f"priority_exponent must be in [0, 1], got {self.priority_exponent}")
        require(0 <= self.importance_sampling_start <= 1,
                f"importance_sampling_start must be in [0, 1], got {self.importance_sampling_start}")
        require(self.priority_epsilon > 0, f"priority_epsilon must be > 0, got {self.priority_epsilon}")
        require(not (self.recurrent and self.prioritized_replay),
                "prioritized_replay with lstm_units: the sequence replay samples windows uniformly (R2D2's sequence "
                "priorities are not built)")

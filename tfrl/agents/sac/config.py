"""SAC hyperparameters: one frozen dataclass, every field with its unit."""

from __future__ import annotations

import dataclasses

from tfrl.config import LoopConfig, require, require_positive_sizes


@dataclasses.dataclass(frozen=True)
class SACConfig(LoopConfig):
    """Soft actor-critic with twin Q-networks, Polyak targets, a tanh-squashed Gaussian actor and a learned
    temperature (target entropy -|A| by default). Defaults are SB3's SAC defaults; the run's length, vector envs
    and cadences are LoopConfig's fields (tfrl.config)."""

    NETWORK_FIELDS = ("hidden_sizes", "normalize_observations")

    hidden_sizes: tuple[int, ...] = (256, 256)
    """Units of each hidden Dense (ReLU) layer, of the actor and of each Q-network."""
    learning_rate: float = 3e-4
    """Adam step size of the actor, the Q-networks and the temperature."""
    batch_size: int = 256
    """Transitions per gradient step."""
    replay_capacity: int = 1_000_000
    """Replay buffer size, in transitions; the oldest are overwritten first."""
    learning_starts: int = 100
    """Env steps taken with uniformly random actions, before the first gradient step."""
    gamma: float = 0.99
    """Discount per env step."""
    target_update_tau: float = 0.005
    """Polyak averaging of the target Q-networks after each gradient step: target <- tau * online + (1 - tau) * target."""
    train_period_env_steps: int = 1
    """Env steps between train calls."""
    gradient_steps_per_train: int = 1
    """Gradient steps per train call, all inside one tf.function call (its fixed cost is paid once per call)."""
    initial_temperature: float = 1.0
    """alpha at the start: the weight of the entropy bonus."""
    learn_temperature: bool = True
    """Adjust alpha so that the policy's entropy tracks target_entropy (False: alpha stays initial_temperature)."""
    target_entropy: float | None = None
    """Entropy the temperature steers towards, in nats; None = -(action dimensions), the papers' default."""
    max_grad_norm: float = 0.0
    """Global gradient-norm clip of each optimizer's step (0 disables, as SB3)."""
    train_in_background: bool = False
    """Run each train call in a background thread while the actor keeps stepping the envs (as DQN's): the actor
    acts with the weights of the train call before the last one."""
    normalize_observations: bool = False
    """Normalize observations by their running mean and std (tfrl.normalization): the replay keeps raw ones and
    each sampled batch is normalized with the statistics of its train call, as SB3 does; frozen at evaluation
    and inside the export."""
    observation_clip: float = 10.0
    """Normalized observations are clipped to [-observation_clip, observation_clip]."""

    def __post_init__(self):
        super().__post_init__()
        for name in ("batch_size", "replay_capacity", "train_period_env_steps", "gradient_steps_per_train"):
            require(getattr(self, name) > 0, f"{name} must be > 0, got {getattr(self, name)}")
        require(self.learning_starts >= 0, f"learning_starts must be >= 0, got {self.learning_starts}")
        require(self.observation_clip > 0, f"observation_clip must be > 0, got {self.observation_clip}")
        require(self.max_grad_norm >= 0, f"max_grad_norm must be >= 0, got {self.max_grad_norm}")
        require_positive_sizes("hidden_sizes", self.hidden_sizes)
        require(self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}")
        require(0 <= self.gamma <= 1, f"gamma must be in [0, 1], got {self.gamma}")
        require(0 < self.target_update_tau <= 1, f"target_update_tau must be in (0, 1], got {self.target_update_tau}")
        require(self.initial_temperature > 0, f"initial_temperature must be > 0, got {self.initial_temperature}")
        require(self.batch_size <= self.replay_capacity, "batch_size must not exceed replay_capacity")

"""PPO hyperparameters: one frozen dataclass, every field with its unit."""

from __future__ import annotations

import dataclasses

from tfrl.agents.actor_critic.config import ActorCriticConfig
from tfrl.config import require
from tfrl.schedules import SCHEDULES


@dataclasses.dataclass(frozen=True)
class PPOConfig(ActorCriticConfig):
    """Proximal policy optimization, clipped surrogate objective (Schulman et al. 2017; SB3's PPO).

    Defaults are SB3's PPO defaults, except num_envs = 8 (SB3: 1) with rollout_length = 256, which keeps SB3's
    2048 transitions per rollout. One update makes n_epochs passes over its rollout in minibatches of batch_size.
    The shared fields are ActorCriticConfig's.
    """

    RENAMED = {**ActorCriticConfig.RENAMED, "adam_eps": "adam_epsilon"}

    total_env_steps: int = 1_000_000
    checkpoint_interval: int = 50_000
    rollout_length: int = 256
    gae_lambda: float = 0.95
    learning_rate: float = 3e-4
    normalize_advantage: bool = True  # within each minibatch, as SB3 (which divides by the N-1 std: 0.8 % apart at 64)

    batch_size: int = 64
    """Transitions per minibatch gradient step; num_envs * rollout_length must be a multiple of it."""
    n_epochs: int = 10
    """Passes over each rollout, each in a fresh random order of minibatches."""
    clip_range: float = 0.2
    """epsilon of the clipped ratio: the objective ignores pi/pi_old beyond [1 - epsilon, 1 + epsilon]."""
    clip_range_schedule: str = "constant"
    """constant, or linear: clip_range falls linearly to 0 over total_env_steps (SB3 zoo's "lin_<value>")."""
    sequence_length: int = 0
    """With lstm_units: steps of each training sequence; every env's rollout is cut into sequences this long, each
    started from the state the actor had there, batch_size / sequence_length of them per minibatch. 0 = the whole
    rollout_length (each minibatch then holds whole env rollouts), or batch_size if that is shorter."""
    adam_epsilon: float = 1e-5
    """Adam's epsilon, added to sqrt(v) (SB3's PPO uses 1e-5, added to the bias-corrected sqrt(v); Keras' default
    is 1e-7)."""

    def __post_init__(self):
        super().__post_init__()
        for name in ("batch_size", "n_epochs"):
            require(getattr(self, name) > 0, f"{name} must be > 0, got {getattr(self, name)}")
        require(self.rollout_size % self.batch_size == 0,
                f"num_envs * rollout_length = {self.rollout_size} must be a multiple of batch_size = "
                f"{self.batch_size}, so that every transition is in one minibatch per epoch")
        require(self.batch_size > 1 or not self.normalize_advantage,
                "batch_size must be > 1 with normalize_advantage: one row always standardizes to 0")
        require(self.sequence_length >= 0, f"sequence_length must be >= 0, got {self.sequence_length}")
        require(self.recurrent or not self.sequence_length,
                "sequence_length applies to a policy with memory only: set lstm_units too")
        if self.recurrent:
            length = self.sequence_steps
            require(self.rollout_length % length == 0,
                    f"rollout_length = {self.rollout_length} must be a multiple of sequence_length = {length}")
            require(self.batch_size % length == 0,
                    f"batch_size = {self.batch_size} must be a multiple of sequence_length = {length} (a minibatch "
                    "holds whole sequences)")
        require(self.adam_epsilon > 0, f"adam_epsilon must be > 0, got {self.adam_epsilon}")
        require(self.clip_range > 0, f"clip_range must be > 0, got {self.clip_range}")
        require(self.clip_range_schedule in SCHEDULES,
                f"clip_range_schedule must be one of {', '.join(SCHEDULES)}, got {self.clip_range_schedule!r}")

    @property
    def sequence_steps(self) -> int:
        return self.sequence_length or min(self.rollout_length, self.batch_size)

    @property
    def gradient_steps_per_update(self) -> int:
        """Minibatch steps one update makes: n_epochs passes over the rollout in minibatches of batch_size."""
        return self.n_epochs * self.rollout_size // self.batch_size

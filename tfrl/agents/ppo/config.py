"""PPO hyperparameters: one frozen dataclass, every field with its unit."""

from __future__ import annotations

import dataclasses

from tfrl.config import require
from tfrl.schedules import SCHEDULES

ACTIVATIONS = ("tanh", "relu")


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """Proximal policy optimization, clipped surrogate objective (Schulman et al. 2017; SB3's PPO).

    Defaults are SB3's PPO defaults, except num_envs = 8 (SB3: 1) with n_steps = 256, which keeps SB3's
    2048 transitions per rollout. "env steps" count transitions summed over all vector envs; one update
    consumes num_envs * n_steps of them, in n_epochs passes of minibatches of batch_size.
    """

    total_env_steps: int = 1_000_000
    """Length of training, in env steps."""
    num_envs: int = 8
    """Parallel environments stepped together (one batched NumPy forward pass per vector step)."""
    n_steps: int = 256
    """Rollout length per env, in vector steps: each update trains on num_envs * n_steps transitions."""
    batch_size: int = 64
    """Transitions per minibatch gradient step; num_envs * n_steps must be a multiple of it."""
    n_epochs: int = 10
    """Passes over each rollout, each in a fresh random order of minibatches."""
    clip_range: float = 0.2
    """epsilon of the clipped ratio: the objective ignores pi/pi_old beyond [1 - epsilon, 1 + epsilon]."""
    clip_range_schedule: str = "constant"
    """constant, or linear: clip_range falls linearly to 0 over total_env_steps (SB3 zoo's "lin_<value>")."""
    gamma: float = 0.99
    """Discount per env step."""
    gae_lambda: float = 0.95
    """GAE lambda (Schulman et al. 2016)."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Units of each hidden Dense layer, of each torso (policy and value) when they are separate."""
    shared_torso: bool = False
    """One torso feeding both the policy and the value head; False = separate torsos (SB3's default)."""
    activation: str = "tanh"
    """Hidden-layer activation: tanh or relu."""
    learning_rate: float = 3e-4
    """Adam step size at env step 0."""
    lr_schedule: str = "constant"
    """constant, or linear: falls linearly from learning_rate to 0 over total_env_steps."""
    adam_eps: float = 1e-5
    """Adam epsilon (SB3's PPO uses 1e-5; Keras' default is 1e-7)."""
    value_coef: float = 0.5
    """Weight of the value loss mean((returns - V)^2) in the total loss."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus: loss -= entropy_coef * mean(entropy), entropy in nats."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip of each minibatch step (0 disables)."""
    normalize_advantage: bool = True
    """Standardize advantages to zero mean, unit std within each minibatch (as SB3, which divides by the N-1 std:
    0.8 % apart at batch_size 64). Needs batch_size > 1: one row would always standardize to 0."""
    eval_interval: int = 50_000
    """Env steps between greedy evaluations (0 disables periodic evaluation)."""
    eval_episodes: int = 10
    """Episodes per periodic greedy evaluation."""
    final_eval_episodes: int = 100
    """Episodes of the greedy evaluation that ends the run."""
    keep_best_policy: bool = False
    """Keep the policy of the best periodic evaluation (tfrl.best_policy): the run then also evaluates it at the
    end ("best_eval", on the final evaluation's episodes) and exports it instead of the last policy."""
    log_interval: int = 10_000
    """Env steps between log lines and TensorBoard scalars."""
    checkpoint_interval: int = 50_000
    """Env steps between checkpoints (network, optimizer, update counter, RNG, loop state; see tfrl.checkpoints);
    0 = only at the end of training. A run resumes from its newest checkpoint."""

    def __post_init__(self):
        for name in ("total_env_steps", "num_envs", "n_steps", "batch_size", "n_epochs", "final_eval_episodes",
                     "log_interval"):
            require(getattr(self, name) > 0, f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("eval_interval", "eval_episodes", "max_grad_norm", "value_coef", "entropy_coef",
                     "checkpoint_interval"):
            require(getattr(self, name) >= 0, f"{name} must be >= 0, got {getattr(self, name)}")
        rollout = self.num_envs * self.n_steps
        require(rollout % self.batch_size == 0,
                f"num_envs * n_steps = {rollout} must be a multiple of batch_size = {self.batch_size}, "
                "so that every transition is in one minibatch per epoch")
        require(self.batch_size > 1 or not self.normalize_advantage,
                "batch_size must be > 1 with normalize_advantage: one row always standardizes to 0")
        require(len(self.hidden_sizes) > 0 and all(h > 0 for h in self.hidden_sizes),
                f"hidden_sizes must be positive layer sizes, got {self.hidden_sizes}")
        require(self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}")
        require(self.adam_eps > 0, f"adam_eps must be > 0, got {self.adam_eps}")
        require(self.clip_range > 0, f"clip_range must be > 0, got {self.clip_range}")
        require(0 <= self.gamma <= 1, f"gamma must be in [0, 1], got {self.gamma}")
        require(0 <= self.gae_lambda <= 1, f"gae_lambda must be in [0, 1], got {self.gae_lambda}")
        require(self.activation in ACTIVATIONS,
                f"activation must be one of {', '.join(ACTIVATIONS)}, got {self.activation!r}")
        for name in ("lr_schedule", "clip_range_schedule"):
            require(getattr(self, name) in SCHEDULES,
                    f"{name} must be one of {', '.join(SCHEDULES)}, got {getattr(self, name)!r}")
        require(not self.keep_best_policy or (self.eval_interval > 0 and self.eval_episodes > 0),
                "keep_best_policy needs periodic evaluations: eval_interval > 0 and eval_episodes > 0")

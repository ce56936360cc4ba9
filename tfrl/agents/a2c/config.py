"""A2C hyperparameters: one frozen dataclass, every field with its unit."""

from __future__ import annotations

import dataclasses

from tfrl.config import require
from tfrl.schedules import SCHEDULES

OPTIMIZERS = ("rmsprop", "adam")
ACTIVATIONS = ("tanh", "relu")


@dataclasses.dataclass(frozen=True)
class A2CConfig:
    """Synchronous advantage actor-critic (Mnih et al. 2016; OpenAI baselines' / SB3's A2C).

    Defaults are SB3's A2C defaults. "env steps" count transitions summed over
    all vector envs; one update consumes num_envs * n_steps of them.
    """

    total_env_steps: int = 500_000
    """Length of training, in env steps."""
    num_envs: int = 8
    """Parallel environments stepped together (one batched NumPy forward pass per vector step)."""
    n_steps: int = 5
    """Rollout length per env, in vector steps: each update trains on num_envs * n_steps transitions."""
    gamma: float = 0.99
    """Discount per env step."""
    gae_lambda: float = 1.0
    """GAE lambda (Schulman et al. 2016); 1.0 = plain n-step returns bootstrapped at the rollout's end."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Units of each hidden Dense layer, of each torso (policy and value) when they are separate."""
    shared_torso: bool = False
    """One torso feeding both the policy and the value head; False = separate torsos (SB3's default)."""
    activation: str = "tanh"
    """Hidden-layer activation: tanh or relu."""
    learning_rate: float = 7e-4
    """Optimizer step size at env step 0."""
    lr_schedule: str = "constant"
    """constant, or linear: falls linearly from learning_rate to 0 over total_env_steps (SB3 zoo's "lin_<lr>")."""
    optimizer: str = "rmsprop"
    """rmsprop (as in A2C/SB3) or adam."""
    rmsprop_decay: float = 0.99
    """RMSprop decay of the mean squared gradient (PyTorch's alpha, Keras' rho)."""
    rmsprop_eps: float = 1e-5
    """RMSprop epsilon, PyTorch/SB3 convention: step = lr * g / (sqrt(v) + eps).
    Keras adds its epsilon inside the root, so the learner passes eps**2 (sqrt(v + eps^2) ~ sqrt(v) + eps)."""
    value_coef: float = 0.5
    """Weight of the value loss mean((returns - V)^2) in the total loss."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus: loss -= entropy_coef * mean(entropy), entropy in nats."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip (0 disables)."""
    normalize_advantage: bool = False
    """Standardize advantages to zero mean, unit std within each update's batch."""
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
    checkpoint_interval: int = 25_000
    """Env steps between checkpoints (network, optimizer, update counter, RNG, loop state; see tfrl.checkpoints);
    0 = only at the end of training. A run resumes from its newest checkpoint."""

    def __post_init__(self):
        for name in ("total_env_steps", "num_envs", "n_steps", "final_eval_episodes", "log_interval"):
            require(getattr(self, name) > 0, f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("eval_interval", "eval_episodes", "max_grad_norm", "value_coef", "entropy_coef",
                     "checkpoint_interval"):
            require(getattr(self, name) >= 0, f"{name} must be >= 0, got {getattr(self, name)}")
        require(len(self.hidden_sizes) > 0 and all(h > 0 for h in self.hidden_sizes),
                f"hidden_sizes must be positive layer sizes, got {self.hidden_sizes}")
        require(self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}")
        require(0 <= self.gamma <= 1, f"gamma must be in [0, 1], got {self.gamma}")
        require(0 <= self.gae_lambda <= 1, f"gae_lambda must be in [0, 1], got {self.gae_lambda}")
        require(0 <= self.rmsprop_decay < 1, f"rmsprop_decay must be in [0, 1), got {self.rmsprop_decay}")
        require(self.rmsprop_eps > 0, f"rmsprop_eps must be > 0, got {self.rmsprop_eps}")
        require(self.activation in ACTIVATIONS,
                f"activation must be one of {', '.join(ACTIVATIONS)}, got {self.activation!r}")
        require(self.lr_schedule in SCHEDULES,
                f"lr_schedule must be one of {', '.join(SCHEDULES)}, got {self.lr_schedule!r}")
        require(self.optimizer in OPTIMIZERS,
                f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        require(not self.keep_best_policy or (self.eval_interval > 0 and self.eval_episodes > 0),
                "keep_best_policy needs periodic evaluations: eval_interval > 0 and eval_episodes > 0")

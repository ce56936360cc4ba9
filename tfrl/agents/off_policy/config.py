"""The hyperparameters every replay-based agent has: one frozen dataclass, every field with its unit. DQN's and
SAC's configs extend it, giving some fields their own defaults."""

from __future__ import annotations

import dataclasses

from tfrl.config import LoopConfig, require, require_positive_sizes


@dataclasses.dataclass(frozen=True)
class OffPolicyConfig(LoopConfig):
    """A replay, train calls every train_period_env_steps env steps, K gradient steps per call, target networks.
    The run's length, vector envs and cadences are LoopConfig's fields (tfrl.config)."""

    _NO_MEMORY = ("memory (lstm_units) is built for DQN (an R2D2-style sequence replay), A2C and PPO; this agent "
                  "learns from single transitions of its replay: use --agent=dqn, ppo or a2c")
    REFUSED = {"lstm_units": _NO_MEMORY, "sequence_length": _NO_MEMORY, "burn_in": _NO_MEMORY}

    hidden_sizes: tuple[int, ...] = (256, 256)
    """Units of each hidden Dense (ReLU) layer of every network."""
    learning_rate: float = 3e-4
    """Adam step size."""
    batch_size: int = 256
    """Transitions per gradient step."""
    replay_capacity: int = 1_000_000
    """Replay buffer size, in transitions; the oldest are overwritten first."""
    learning_starts: int = 100
    """Env steps collected before the first gradient step."""
    gamma: float = 0.99
    """Discount per env step."""
    train_period_env_steps: int = 1
    """Env steps between train calls."""
    gradient_steps_per_train: int = 1
    """Gradient steps per train call, all inside one tf.function call (its fixed cost is paid once per call)."""
    target_update_tau: float = 0.005
    """Target update: target <- tau * online + (1 - tau) * target; 1.0 is a hard copy, smaller is Polyak averaging."""
    max_grad_norm: float = 0.0
    """Global gradient-norm clip of each optimizer's step (0 disables)."""
    layer_init: str = "glorot"
    """Initial weights of every network's Dense layers: glorot (Keras' default: Glorot-uniform kernels, zero
    biases) or torch (PyTorch's nn.Linear default, which SB3's DQN, SAC and TD3 keep: kernels and biases uniform in
    +-1/sqrt(fan_in))."""
    adam_epsilon: float = 1e-7
    """Every Adam optimizer's epsilon, added to sqrt(v) (Keras' default 1e-7; PyTorch's, and so SB3's, is 1e-8,
    added to the bias-corrected sqrt(v))."""
    train_in_background: bool = False
    """Run each train call in a background thread while the actor keeps stepping the envs (TensorFlow releases
    Python's GIL inside its ops, so the two share the machine's cores). This changes the algorithm a little: the
    actor acts with the weights of the train call before the last one (a policy lag of one train call), and a
    NaN is reported at the next train call. Results are as reproducible as without it."""

    @property
    def first_train_at(self) -> int:
        """The env step of the first train call."""
        return max(self.learning_starts, self.train_period_env_steps)

    def __post_init__(self):
        super().__post_init__()
        for name in ("batch_size", "replay_capacity", "train_period_env_steps", "gradient_steps_per_train"):
            require(getattr(self, name) > 0, f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("learning_starts", "max_grad_norm"):
            require(getattr(self, name) >= 0, f"{name} must be >= 0, got {getattr(self, name)}")
        require_positive_sizes("hidden_sizes", self.hidden_sizes)
        require(self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}")
        require(self.layer_init in ("glorot", "torch"), f"layer_init must be glorot or torch, got {self.layer_init!r}")
        require(self.adam_epsilon > 0, f"adam_epsilon must be > 0, got {self.adam_epsilon}")
        require(0 <= self.gamma <= 1, f"gamma must be in [0, 1], got {self.gamma}")
        require(0 < self.target_update_tau <= 1, f"target_update_tau must be in (0, 1], got {self.target_update_tau}")
        require(self.batch_size <= self.replay_capacity, "batch_size must not exceed replay_capacity")

"""DQN hyperparameters: one frozen dataclass, every field with its unit."""

from __future__ import annotations

import dataclasses

from tfrl.config import TORSOS, LoopConfig, require, require_positive_sizes


@dataclasses.dataclass(frozen=True)
class DQNConfig(LoopConfig):
    """Deep Q-learning (Mnih et al. 2015) with double Q-learning, n-step returns and a dueling head as options.

    The run's length, vector envs and cadences are LoopConfig's fields (tfrl.config).
    """

    RENAMED = {"n_step": "n_step_return", "train_freq": "train_period_env_steps",
               "gradient_steps": "gradient_steps_per_train",
               "target_update_period": "target_update_period_env_steps"}
    NETWORK_FIELDS = ("torso", "hidden_sizes", "dueling")

    torso: str = "auto"
    """What reads the observations (tfrl.networks): auto (a CNN for HWC uint8 images, else mlp), mlp, nature_cnn
    or minatar_cnn."""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """Units of each hidden Dense (ReLU) layer of the Q-network (after the CNN, if any)."""
    dueling: bool = False
    """Dueling head (Wang et al. 2016): Q = V + A - mean(A)."""
    layer_init: str = "glorot"
    """Initial weights of the Q-network's layers: glorot (Keras' default: Glorot-uniform kernels, zero biases) or
    torch (PyTorch's nn.Linear default, kept by SB3's DQN: kernels and biases uniform in +-1/sqrt(fan_in))."""
    learning_rate: float = 6.3e-4
    """Adam step size at the first gradient step."""
    adam_epsilon: float = 1e-7
    """Adam's epsilon, added to sqrt(v) (Keras' default 1e-7; PyTorch's and so SB3's DQN default is 1e-8, added to
    the bias-corrected sqrt(v))."""
    final_learning_rate_fraction: float = 1.0
    """Step size at the last gradient step, as a fraction of learning_rate; it falls linearly in between
    (1.0 = constant). A decaying step size steadies the final policy."""
    batch_size: int = 128
    """Transitions per gradient step."""
    replay_capacity: int = 50_000
    """Replay buffer size, in transitions; the oldest are overwritten first."""
    learning_starts: int = 0
    """Env steps collected before the first gradient step."""
    gamma: float = 0.99
    """Discount per env step."""
    n_step_return: int = 1
    """Rewards summed before bootstrapping, in env steps of one env: target = sum_k gamma^k r_k + gamma^n Q(s_n, a*)."""
    train_period_env_steps: int = 4
    """Env steps between train calls."""
    gradient_steps_per_train: int = 4
    """Gradient steps per train call, all inside one tf.function call (its fixed cost is paid once per call)."""
    target_update_period_env_steps: int = 250
    """Env steps between target-network updates."""
    target_update_tau: float = 1.0
    """Target update: target <- tau * online + (1 - tau) * target; 1.0 is a hard copy, smaller is Polyak averaging."""
    double_dqn: bool = True
    """Pick the bootstrap action with the online network, value it with the target network (van Hasselt et al. 2016)."""
    max_grad_norm: float = 10.0
    """Global gradient-norm clip (0 disables)."""
    epsilon_start: float = 1.0
    """Exploration rate at env step 0."""
    epsilon_end: float = 0.1
    """Exploration rate after the decay."""
    epsilon_decay_fraction: float = 0.12
    """Fraction of total_env_steps over which epsilon falls linearly from start to end."""
    train_in_background: bool = False
    """Run each train call in a background thread while the actor keeps stepping the envs (TensorFlow releases
    Python's GIL inside its ops, so the two share the machine's cores). This changes the algorithm a little: the
    actor acts with the weights of the train call before the last one (a policy lag of one train call), and a
    NaN is reported at the next train call. Results are as reproducible as without it."""
    prioritized_replay: bool = False
    """Sample transitions in proportion to their last |TD error| (Schaul et al. 2016, proportional; see
    tfrl.prioritized_replay), with importance-sampling weights on the loss."""
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
        first_train = max(self.learning_starts, self.train_period_env_steps)
        calls = max(0, (self.total_env_steps - first_train) // self.train_period_env_steps + 1)
        return calls * self.gradient_steps_per_train

    def __post_init__(self):
        super().__post_init__()
        for name in ("batch_size", "replay_capacity", "n_step_return", "train_period_env_steps",
                     "gradient_steps_per_train", "target_update_period_env_steps"):
            require(getattr(self, name) > 0, f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("learning_starts", "max_grad_norm"):
            require(getattr(self, name) >= 0, f"{name} must be >= 0, got {getattr(self, name)}")
        require_positive_sizes("hidden_sizes", self.hidden_sizes)
        require(self.torso in TORSOS, f"torso must be one of {', '.join(TORSOS)}, got {self.torso!r}")
        require(self.layer_init in ("glorot", "torch"), f"layer_init must be glorot or torch, got {self.layer_init!r}")
        require(self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}")
        require(self.adam_epsilon > 0, f"adam_epsilon must be > 0, got {self.adam_epsilon}")
        require(0 <= self.final_learning_rate_fraction <= 1,
                f"final_learning_rate_fraction must be in [0, 1], got {self.final_learning_rate_fraction}")
        require(0 <= self.gamma <= 1, f"gamma must be in [0, 1], got {self.gamma}")
        require(0 < self.target_update_tau <= 1, f"target_update_tau must be in (0, 1], got {self.target_update_tau}")
        for name in ("epsilon_start", "epsilon_end", "epsilon_decay_fraction"):
            require(0 <= getattr(self, name) <= 1, f"{name} must be in [0, 1], got {getattr(self, name)}")
        require(self.batch_size <= self.replay_capacity, "batch_size must not exceed replay_capacity")
        require(0 <= self.priority_exponent <= 1, f"priority_exponent must be in [0, 1], got {self.priority_exponent}")
        require(0 <= self.importance_sampling_start <= 1,
                f"importance_sampling_start must be in [0, 1], got {self.importance_sampling_start}")
        require(self.priority_epsilon > 0, f"priority_epsilon must be > 0, got {self.priority_epsilon}")

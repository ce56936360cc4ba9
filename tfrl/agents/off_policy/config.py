"""The hyperparameters every replay-based agent has: one frozen dataclass, every field with its unit. DQN's and
SAC's configs extend it, giving some fields their own defaults."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from tfrl.config import LoopConfig, require, require_positive_sizes


@dataclasses.dataclass(frozen=True)
class OffPolicyConfig(LoopConfig):
    """A replay, train calls every train_period_env_steps env steps, K gradient steps per call, target networks.
    The run's length, vector envs and cadences are LoopConfig's fields (tfrl.config)."""

    NO_MEMORY: ClassVar[str] = ("memory (lstm_units) is built for DQN and SAC (a sequence replay, R2D2-style), A2C "
                                "and PPO; this agent learns from single transitions of its replay")
    """Why this agent refuses lstm_units; "" where it takes it (DQN, SAC)."""

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

    lstm_units: int = 0
    """Memory (R2D2, Kapturowski et al. 2019; DQN and SAC): units of an LSTM in each network (DQN's after its torso;
    SAC's reading the observations, hidden_sizes after it), whose state the actor carries through each episode.
    The replay then keeps every env's steps in order with the states the actor had, and trains on windows of
    burn_in + sequence_length (+ the n-step targets') steps (tfrl.replay.sequences). 0 = no memory."""
    sequence_length: int = 0
    """With lstm_units: the steps of each window trained on (batch_size counts these steps: batch_size /
    sequence_length windows per gradient step)."""
    burn_in: int = 0
    """With lstm_units: steps at each window's start that only warm the LSTM states from the stored ones (R2D2's
    burn-in): no loss and no gradient there."""

    @property
    def recurrent(self) -> bool:
        return self.lstm_units > 0

    @property
    def window_steps(self) -> int:
        """With lstm_units: the steps of one sampled window (burn-in, trained steps, the last targets' steps)."""
        return self.burn_in + self.sequence_length + getattr(self, "n_step_return", 1)

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
        if self.hidden_sizes or not self.lstm_units:  # with memory the LSTM can read the observations directly
            require_positive_sizes("hidden_sizes", self.hidden_sizes)
        require(self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}")
        require(self.layer_init in ("glorot", "torch"), f"layer_init must be glorot or torch, got {self.layer_init!r}")
        require(self.adam_epsilon > 0, f"adam_epsilon must be > 0, got {self.adam_epsilon}")
        require(0 <= self.gamma <= 1, f"gamma must be in [0, 1], got {self.gamma}")
        require(0 < self.target_update_tau <= 1, f"target_update_tau must be in (0, 1], got {self.target_update_tau}")
        require(self.batch_size <= self.replay_capacity, "batch_size must not exceed replay_capacity")
        self._check_memory()

    def _check_memory(self) -> None:
        require(self.lstm_units >= 0, f"lstm_units must be >= 0 (0: no memory), got {self.lstm_units}")
        require(self.sequence_length >= 0 and self.burn_in >= 0,
                f"sequence_length and burn_in must be >= 0, got {self.sequence_length} and {self.burn_in}")
        if not self.recurrent:
            require(not self.sequence_length and not self.burn_in,
                    "sequence_length and burn_in apply to networks with memory only: set lstm_units too")
            return
        require(not self.NO_MEMORY, f"lstm_units: {self.NO_MEMORY}")
        require(self.sequence_length > 0, "lstm_units needs sequence_length > 0: the steps of each trained window "
                                          "(e.g. 20 for short episodes; R2D2 trains on 80 after a burn_in of 40)")
        require(self.batch_size % self.sequence_length == 0,
                f"batch_size={self.batch_size} must be a multiple of sequence_length={self.sequence_length}: with "
                "memory a batch is whole windows of sequence_length trained steps")
        ring = self.replay_capacity // self.num_envs
        require(self.window_steps <= ring,
                f"a window of {self.window_steps} steps (burn_in + sequence_length + the targets' steps) is longer "
                f"than what the replay keeps of each env (replay_capacity / num_envs = {ring} steps)")

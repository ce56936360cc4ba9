"""The hyperparameters A2C and PPO share: rollouts, advantages, the network and the loss weights."""

from __future__ import annotations

import dataclasses
import math

from tfrl.config import TORSOS, LoopConfig, require, require_positive_sizes
from tfrl.schedules import SCHEDULES

ACTIVATIONS = ("tanh", "relu")


@dataclasses.dataclass(frozen=True)
class ActorCriticConfig(LoopConfig):
    """An actor-critic agent trained on rollouts of rollout_length vector steps of num_envs envs.

    One update consumes num_envs * rollout_length env steps. Defaults are SB3's A2C defaults; PPOConfig
    changes some.
    """

    RENAMED = {"n_steps": "rollout_length"}
    NETWORK_FIELDS = ("torso", "hidden_sizes", "shared_torso", "activation", "lstm_units", "post_lstm_sizes",
                      "normalize_observations")

    total_env_steps: int = 500_000
    num_envs: int = 8
    eval_interval: int = 50_000
    log_interval: int = 10_000

    rollout_length: int = 5
    """Rollout length per env, in vector steps: each update trains on num_envs * rollout_length transitions."""
    gamma: float = 0.99
    """Discount per env step."""
    gae_lambda: float = 1.0
    """GAE lambda (Schulman et al. 2016); 1.0 = plain n-step returns bootstrapped at the rollout's end."""
    torso: str = "auto"
    """What reads the observations (tfrl.models.networks): auto (a CNN for HWC uint8 images, else mlp), mlp, nature_cnn
    or minatar_cnn. A CNN is shared by the policy and the value."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Units of each hidden Dense layer, of each torso (policy and value) when they are separate. With lstm_units
    it may be empty: the LSTM then reads the observations (or the CNN's features) directly."""
    shared_torso: bool = False
    """One torso feeding both the policy and the value head; False = separate torsos (SB3's default)."""
    activation: str = "tanh"
    """Hidden-layer activation: tanh or relu."""
    layer_init: str = "orthogonal"
    """Initial weights of the Dense layers: orthogonal (SB3's ortho_init: orthogonal kernels with gain sqrt(2) in
    the torsos, 0.01 in the policy head, 1 in the value head; zero biases) or torch (SB3 with ortho_init=False:
    PyTorch's nn.Linear default, kernels and biases uniform in +-1/sqrt(fan_in))."""
    log_std_init: float = 0.0
    """A Gaussian policy's (Box actions) initial log standard deviation, every action dimension alike (SB3's
    log_std_init; 0 is a standard deviation of 1)."""
    lstm_units: int = 0
    """Memory: units of an LSTM after each torso (one shared LSTM with shared_torso), whose state the policy
    carries from step to step of an episode (tfrl.agents.actor_critic.recurrent); 0 = no memory, the policy sees
    the current observation only."""
    post_lstm_sizes: tuple[int, ...] = ()
    """With lstm_units: units of Dense layers between each LSTM and its head (activation as the torso's); empty =
    the heads read the LSTM's output. hidden_sizes=() with post_lstm_sizes=(64,) is sb3-contrib's MlpLstmPolicy
    layout (the LSTM first, its net_arch after it)."""
    learning_rate: float = 7e-4
    """Optimizer step size at env step 0."""
    lr_schedule: str = "constant"
    """constant, or linear: falls linearly from learning_rate to 0 over total_env_steps (SB3 zoo's "lin_<lr>")."""
    value_coef: float = 0.5
    """Weight of the value loss mean((returns - V)^2) in the total loss."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus: loss -= entropy_coef * mean(entropy), entropy in nats."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip of each gradient step (0 disables)."""
    normalize_advantage: bool = False
    """Standardize advantages to zero mean, unit std within each gradient step's batch."""
    normalize_observations: bool = False
    """Normalize observations by their running mean and std (SB3's VecNormalize; tfrl.models.normalization), frozen at
    evaluation and inside the export."""
    observation_clip: float = 10.0
    """Normalized observations are clipped to [-observation_clip, observation_clip]."""
    normalize_rewards: bool = False
    """Divide training rewards by the running std of the discounted return (tfrl.models.normalization)."""
    reward_clip: float = 10.0
    """Scaled rewards are clipped to [-reward_clip, reward_clip]."""

    def __post_init__(self):
        super().__post_init__()
        require(self.rollout_length > 0, f"rollout_length must be > 0, got {self.rollout_length}")
        for name in ("observation_clip", "reward_clip"):
            require(getattr(self, name) > 0, f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("max_grad_norm", "value_coef", "entropy_coef"):
            require(getattr(self, name) >= 0, f"{name} must be >= 0, got {getattr(self, name)}")
        require(self.lstm_units >= 0, f"lstm_units must be >= 0 (0: no memory), got {self.lstm_units}")
        if self.hidden_sizes or not self.lstm_units:  # the LSTM can read the observations directly
            require_positive_sizes("hidden_sizes", self.hidden_sizes)
        if self.post_lstm_sizes:
            require(self.lstm_units > 0, "post_lstm_sizes applies to a policy with memory only: set lstm_units too")
            require_positive_sizes("post_lstm_sizes", self.post_lstm_sizes)
        require(self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}")
        require(0 <= self.gamma <= 1, f"gamma must be in [0, 1], got {self.gamma}")
        require(0 <= self.gae_lambda <= 1, f"gae_lambda must be in [0, 1], got {self.gae_lambda}")
        require(self.torso in TORSOS, f"torso must be one of {', '.join(TORSOS)}, got {self.torso!r}")
        require(self.layer_init in ("orthogonal", "torch"),
                f"layer_init must be orthogonal or torch, got {self.layer_init!r}")
        require(math.isfinite(self.log_std_init), f"log_std_init must be a finite number, got {self.log_std_init}")
        require(self.activation in ACTIVATIONS,
                f"activation must be one of {', '.join(ACTIVATIONS)}, got {self.activation!r}")
        require(self.lr_schedule in SCHEDULES,
                f"lr_schedule must be one of {', '.join(SCHEDULES)}, got {self.lr_schedule!r}")

    @property
    def rollout_size(self) -> int:
        """Transitions per update: num_envs * rollout_length."""
        return self.num_envs * self.rollout_length

    @property
    def env_steps_per_collect(self) -> int:
        """One rollout."""
        return self.rollout_size

    @property
    def recurrent(self) -> bool:
        return self.lstm_units > 0

    @property
    def sequence_steps(self) -> int:
        """Steps of each training sequence of a recurrent policy (A2C: the whole rollout of one env)."""
        return self.rollout_length

    @property
    def gradient_steps_per_update(self) -> int:
        """Optimizer steps one update makes: one for the whole rollout (A2C); PPO takes minibatches."""
        return 1

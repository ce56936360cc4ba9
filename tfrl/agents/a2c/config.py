"""A2C hyperparameters: one frozen dataclass, every field with its unit."""

from __future__ import annotations

import dataclasses

from tfrl.agents.actor_critic.config import ActorCriticConfig
from tfrl.config import require

OPTIMIZERS = ("rmsprop", "adam")


@dataclasses.dataclass(frozen=True)
class A2CConfig(ActorCriticConfig):
    """Synchronous advantage actor-critic (Mnih et al. 2016; OpenAI baselines' / SB3's A2C): one gradient step per
    rollout. Defaults are SB3's A2C defaults; the shared fields are ActorCriticConfig's."""

    RENAMED = {**ActorCriticConfig.RENAMED, "rmsprop_eps": "rmsprop_epsilon"}

    optimizer: str = "rmsprop"
    """rmsprop (as in A2C/SB3) or adam."""
    rmsprop_decay: float = 0.99
    """RMSprop decay of the mean squared gradient (PyTorch's alpha, Keras' rho)."""
    rmsprop_epsilon: float = 1e-5
    """RMSprop epsilon, PyTorch/SB3 convention: step = lr * g / (sqrt(v) + eps).
    Keras adds its epsilon inside the root, so the learner passes eps**2 (sqrt(v + eps^2) ~ sqrt(v) + eps)."""
    adam_epsilon: float = 1e-7
    """Adam's epsilon with optimizer=adam (outside the root, as PyTorch's; Keras' default, as PPO's and the
    off-policy agents' adam_epsilon)."""

    def __post_init__(self):
        super().__post_init__()
        require(0 <= self.rmsprop_decay < 1, f"rmsprop_decay must be in [0, 1), got {self.rmsprop_decay}")
        require(self.rmsprop_epsilon > 0, f"rmsprop_epsilon must be > 0, got {self.rmsprop_epsilon}")
        require(self.adam_epsilon > 0, f"adam_epsilon must be > 0, got {self.adam_epsilon}")
        require(self.optimizer in OPTIMIZERS,
                f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")

"""What the off-policy agents' specs share (DQN, SAC, TD3): the search spaces `tfrl tune` samples of them
(tfrl.tuning.spaces; after rl-baselines3-zoo's samplers, gradient steps per env step at most 8)."""

from __future__ import annotations

from tfrl.tuning import spaces

SEARCH_SPACE = {
    "learning_rate": spaces.LOG_LEARNING_RATE,
    "batch_size": {"type": "categorical", "choices": [32, 64, 128, 256]},
    "gamma": spaces.GAMMAS,
    "replay_capacity": {"type": "categorical", "choices": [10_000, 50_000, 100_000]},
    "learning_starts": {"type": "categorical", "choices": [0, 1000, 5000, 10_000]},
    "train_period_env_steps": {"type": "categorical", "choices": [1, 4, 8, 16]},
    "gradient_steps_per_train": {"type": "categorical", "choices": [1, 2, 4, 8]},
}
CONTINUOUS_SEARCH_SPACE = {  # SAC's and TD3's
    **SEARCH_SPACE,
    "replay_capacity": {"type": "categorical", "choices": [10_000, 100_000, 1_000_000]},
    "batch_size": {"type": "categorical", "choices": [64, 128, 256, 512]},
    "target_update_tau": {"type": "categorical", "choices": [0.001, 0.005, 0.01, 0.02, 0.05]},
    "hidden_sizes": {"type": "categorical", "choices": ["64,64", "256,256", "400,300"]},
}

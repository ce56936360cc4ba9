"""How much memory a run will need, estimated from its config before anything is allocated or written.

A run whose estimate exceeds the memory the machine has available is refused with one line saying how much it
needs and for what (a replay of 10^11 transitions, 10^8 envs or layers of 10^8 units would otherwise grow until
the kernel kills the process, or swap it to a halt). The estimate counts what grows with the config:

    replay       DQN: capacity x (two observations, action, reward, discount), float32 and int32 (uint8 images;
                 frame-stacked ones: one frame per transition, tfrl.frame_replay)
    networks     parameters x copies (online, target, optimizer slots, gradients, the NumPy mirror,
                 the weights returned by each train call) + activations of one batch, forward and backward
    rollouts     A2C/PPO: rollout_length x num_envs rows, stored and packed for the learner
    envs         num_envs x a per-env allowance (an async env is a process of its own)

It is a floor, not a bound: TensorFlow itself and Python take a few hundred MB more.
"""

from __future__ import annotations

import os

import numpy as np

from tfrl import config as config_lib
from tfrl.errors import UsageError

_FLOAT = 4  # bytes of float32 and int32
_ENV_BYTES = {"sync": 1 << 20, "async": 150 << 20, "envpool": 1 << 20}  # per env; async: a process each


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else free physical pages; None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _mlp(sizes: list[int]) -> int:
    """Parameters of a stack of Dense layers of these sizes (inputs first)."""
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))


def _convolved(obs_shape, torso: str) -> tuple[int, int, int]:
    """(parameters, activations per row, features after the flatten) of a CNN torso (tfrl.networks)."""
    layers = config_lib.CONVOLUTIONS[torso]
    (height, width, channels), parameters, activations = obs_shape, 0, 0
    for filters, size, stride in layers:
        height, width = (height - size) // stride + 1, (width - size) // stride + 1
        parameters += size * size * channels * filters + filters
        channels = filters
        activations += height * width * channels
    return parameters, activations, height * width * channels


def estimate(agent: str, config, obs_shape, num_actions: int, vector_mode: str = "sync",
             obs_dtype: str = "float32", frame_stack: int = 0) -> dict[str, int]:
    """Bytes per component (see the module docstring) of a run of `agent` with `config`."""
    obs_size = int(np.prod(obs_shape))
    obs_bytes = obs_size * np.dtype(obs_dtype).itemsize
    torso = config_lib.resolved_torso(getattr(config, "torso", "mlp"), obs_shape, obs_dtype)
    conv_parameters, conv_activations, features = (0, 0, obs_size) if torso == "mlp" else _convolved(obs_shape, torso)
    hidden = list(config.hidden_sizes)
    parts = {"envs": config.num_envs * _ENV_BYTES.get(vector_mode, _ENV_BYTES["async"])}
    if agent == "sac":  # an actor and four Q-networks (two targets), three optimizers
        parameters = _mlp([obs_size, *hidden, 2 * num_actions]) + 4 * _mlp([obs_size + num_actions, *hidden, 1])
        rows = config.batch_size * config.gradient_steps_per_train
        parts["replay"] = config.replay_capacity * (2 * obs_size + num_actions + 2) * _FLOAT
        parts["networks"] = 6 * parameters * _FLOAT + 12 * rows * (sum(hidden) + obs_size) * _FLOAT
    elif agent == "dqn":
        parameters = conv_parameters + _mlp([features, *hidden, num_actions + 1])  # + 1: a dueling head's value
        rows = config.batch_size * config.gradient_steps_per_train
        if frame_stack:  # a frame and its predecessor's ref, with 2 % to spare; two refs per transition
            frame_bytes = obs_bytes // frame_stack + 8
            parts["replay"] = config.replay_capacity * (frame_bytes * 51 // 50 + 2 * 8 + 3 * _FLOAT)
        else:
            parts["replay"] = config.replay_capacity * (2 * obs_bytes + 3 * _FLOAT)
        parts["networks"] = 8 * parameters * _FLOAT + 3 * rows * (sum(hidden) + conv_activations + obs_size) * _FLOAT
    else:
        torsos = 1 if config.shared_torso else 2
        parameters = conv_parameters + torsos * _mlp([features, *hidden]) + (hidden[-1] + 1) * (num_actions + 1)
        rows = config.rollout_size
        parts["rollouts"] = 2 * rows * (obs_bytes + (num_actions + 8) * _FLOAT)
        activations = torsos * sum(hidden) + conv_activations + obs_size
        parts["networks"] = 6 * parameters * _FLOAT + 3 * rows * activations * _FLOAT
    return parts


def check(agent: str, config, env_info, vector_mode: str = "sync") -> None:
    """UsageError if the estimate for the env of `env_info` (tfrl.envs.EnvInfo) exceeds the memory available now."""
    parts = estimate(agent, config, env_info.obs_shape, env_info.action_size, vector_mode, env_info.obs_dtype,
                     env_info.frame_stack)
    needed, available = sum(parts.values()), available_bytes()
    if available is None or needed <= available:
        return
    detail = ", ".join(f"{name} {_human(size)}" for name, size in sorted(parts.items(), key=lambda p: -p[1]))
    raise UsageError(f"this run needs about {_human(needed)} of memory ({detail}), more than the "
                     f"{_human(available)} available: lower replay_capacity, num_envs, hidden_sizes or the batch")


def _human(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if size < 1000 or unit == "PB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1000
    raise AssertionError("unreachable")

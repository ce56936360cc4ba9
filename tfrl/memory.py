"""How much memory a run will need, estimated from its config before anything is allocated or written.

A run whose estimate exceeds the memory the machine has available is refused with one line saying how much it
needs and for what (a replay of 10^11 transitions, 10^8 envs, layers of 10^8 units or 10^9 PPO epochs would
otherwise grow until the kernel kills the process, or swap it to a halt). Each agent's spec
(tfrl.agents.core.AgentSpec.estimate_memory) names the components that grow with its config; this module holds
the arithmetic they share:

    replay       capacity x (two observations, action, reward, discount), float32 and int32 (uint8 images;
                 frame-stacked ones: one frame per transition, tfrl.replay.frames)
    networks     parameters x copies (online, target, optimizer slots, gradients, the NumPy mirror,
                 the weights returned by each train call) + activations of one batch, forward and backward
    envs         num_envs x a per-env allowance (an async env is a process of its own)

It is a floor, not a bound: TensorFlow itself and Python take a few hundred MB more.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Mapping, Sequence

import numpy as np

from tfrl import config as config_lib
from tfrl.errors import UsageError

FLOAT = 4  # bytes of float32 and int32
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


def mlp_parameters(sizes: Sequence[int]) -> int:
    """Parameters of a stack of Dense layers of these sizes (inputs first)."""
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))


@dataclasses.dataclass(frozen=True)
class Torso:
    """What reads the observations, in numbers: parameters, activations per row, features it hands on."""

    parameters: int
    activations: int
    features: int


def torso(spec, name: str) -> Torso:
    """The torsos (config.field_torsos: `name` resolved per field) over the observations of `spec` (an ObsSpec),
    their numbers summed: a CNN's convolutions, or the flatten of an MLP (no parameters, the field's size)."""
    parts = [_field_torso(field.shape, resolved) for field, resolved in
             zip(spec.inputs, config_lib.field_torsos(name, spec).values())]
    return Torso(sum(p.parameters for p in parts), sum(p.activations for p in parts), sum(p.features for p in parts))


def _field_torso(obs_shape: Sequence[int], resolved: str) -> Torso:
    if resolved == "mlp":
        return Torso(0, 0, int(np.prod(obs_shape)))
    (height, width, channels), parameters, activations = obs_shape, 0, 0
    for filters, size, stride in config_lib.CONVOLUTIONS[resolved]:
        height, width = (height - size) // stride + 1, (width - size) // stride + 1
        parameters += size * size * channels * filters + filters
        channels = filters
        activations += height * width * channels
    return Torso(parameters, activations, height * width * channels)


def observation_size(env_info) -> int:
    """Numbers in one observation (every field's)."""
    return sum(field.size for field in env_info.observations.fields)


def observation_bytes(env_info) -> int:
    """Bytes of one observation as tfrl stores it (float32, uint8 images and masks)."""
    return env_info.observations.nbytes


def replay_bytes(capacity: int, env_info, extra_floats: int) -> int:
    """A replay of `capacity` transitions: two observations (or, frame-stacked, one frame and two refs) and
    `extra_floats` 4-byte numbers (action, reward, discount, ...)."""
    if env_info.frame_stack:  # a frame and its predecessor's ref, with 2 % to spare; two refs per transition
        frame_bytes = observation_bytes(env_info) // env_info.frame_stack + 8
        return capacity * (frame_bytes * 51 // 50 + 2 * 8 + extra_floats * FLOAT)
    return capacity * (2 * observation_bytes(env_info) + extra_floats * FLOAT)


def networks_bytes(parameters: int, copies: int, rows: int, activations_per_row: int, passes: int) -> int:
    """`copies` of the parameters, and `passes` x the activations of `rows` rows, in float32."""
    return copies * parameters * FLOAT + passes * rows * activations_per_row * FLOAT


def envs_bytes(num_envs: int, vector_mode: str) -> int:
    return num_envs * _ENV_BYTES.get(vector_mode, _ENV_BYTES["async"])


def check(parts: Mapping[str, int]) -> None:
    """UsageError if the components' sum exceeds the memory available now."""
    needed, available = sum(parts.values()), available_bytes()
    if available is None or needed <= available:
        return
    detail = ", ".join(f"{name} {human(size)}" for name, size in sorted(parts.items(), key=lambda p: -p[1]))
    raise UsageError(f"this run needs about {human(needed)} of memory ({detail}), more than the "
                     f"{human(available)} available: lower replay_capacity, num_envs, hidden_sizes (lstm_units), the "
                     "batch or the epochs")


def human(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if size < 1000 or unit == "PB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1000
    raise AssertionError("unreachable")

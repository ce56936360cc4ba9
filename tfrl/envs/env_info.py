"""What an agent's networks are built for, read off an env's spaces: EnvInfo, and env_info() which refuses the
action spaces tfrl cannot act in (one line naming the fix)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

import gymnasium as gym
import numpy as np

from tfrl.envs.observations import ObsSpec, observation_spec
from tfrl.errors import UsageError
from tfrl.models.policy_inputs import MASK_KEY, Field

STRUCTURED = "structured"  # the obs_dtype of Dict observations: their fields hold the dtypes


class EnvIdError(UsageError):
    """Unknown or unsupported environment id, or spaces tfrl cannot train on."""


@dataclasses.dataclass(frozen=True)
class EnvInfo:
    """What an agent's networks are built for: the observations (tfrl.envs.observations) and the action space."""

    env_id: str
    obs_shape: tuple[int, ...]  # () for Dict observations
    num_actions: int  # Discrete actions: how many; MultiDiscrete: the sum of every dimension's; Box actions: 0
    action_shape: tuple[int, ...] = ()  # Box actions: the shape of one action
    action_low: tuple[float, ...] = ()  # Box actions: the bounds, flattened
    action_high: tuple[float, ...] = ()
    obs_dtype: str = "float32"  # "uint8" for images; STRUCTURED for Dict observations (their fields say)
    frame_stack: int = 0  # observations stack this many frames in their last axis (Atari: 4); 0 if not
    obs_fields: tuple[Field, ...] = ()  # Dict observations: their fields
    action_nvec: tuple[int, ...] = ()  # MultiDiscrete (and MultiBinary: all 2) actions: each dimension's count
    binary_actions: bool = False  # MultiBinary actions (the env takes 0/1 as int8)
    env_space: str = ""  # the env's own observation space (tfrl.envs.observations.env_space_json), "" if taken as is
    # The dtype of the env's own action mask (int8 for a Box(0, 1, (A,), int8)): what the export's "action_mask"
    # input takes, so that a client sends the env's masks as they are. Training stores masks as uint8.
    mask_dtype: str = "uint8"

    @property
    def continuous(self) -> bool:
        return self.num_actions == 0

    @property
    def action_kind(self) -> str:
        """"discrete", "multi_discrete" or "continuous": what tfrl.agents.core.AgentSpec.actions lists."""
        return "continuous" if self.continuous else "multi_discrete" if self.action_nvec else "discrete"

    @property
    def action_size(self) -> int:
        """Outputs a policy needs per action: the number of actions (all dimensions'), or the Box's size."""
        return self.num_actions or int(np.prod(self.action_shape))

    @property
    def observations(self) -> ObsSpec:
        if self.obs_fields:
            return ObsSpec(self.obs_fields, structured=True)
        return ObsSpec.flat(self.obs_shape, self.obs_dtype)

    @property
    def export_observations(self) -> ObsSpec:
        """What the exported signature takes: the observations, the action mask in the env's own dtype."""
        spec = self.observations
        if spec.mask is None or self.mask_dtype == spec.mask.dtype:
            return spec
        return ObsSpec(tuple(dataclasses.replace(field, dtype=self.mask_dtype) if field.key == MASK_KEY else field
                             for field in spec.fields), structured=True)

    @property
    def masked(self) -> bool:
        """The env says which actions are legal (an action_mask field)."""
        return self.observations.mask is not None

    @property
    def images(self) -> bool:
        """Some observation is a HWC uint8 image."""
        return self.obs_dtype == "uint8" or any(field.image for field in self.obs_fields)

    def to_dict(self):
        record = {"env_id": self.env_id, "obs_shape": list(self.obs_shape), "num_actions": self.num_actions}
        if self.obs_dtype != "float32":
            record["obs_dtype"] = self.obs_dtype
        if self.obs_fields:
            record["obs_fields"] = self.observations.to_json()
        if self.frame_stack:
            record["frame_stack"] = self.frame_stack
        if self.continuous:
            record.update(action_shape=list(self.action_shape), action_low=list(self.action_low),
                          action_high=list(self.action_high))
        if self.action_nvec:
            record.update(action_nvec=list(self.action_nvec), binary_actions=self.binary_actions)
        if self.env_space:
            record["env_space"] = json.loads(self.env_space)
        if self.mask_dtype != "uint8":
            record["mask_dtype"] = self.mask_dtype
        return record

    @classmethod
    def from_dict(cls, record: Mapping[str, Any], env_id: str | None = None) -> EnvInfo:
        fields = ObsSpec.from_json(record["obs_fields"]).fields if record.get("obs_fields") else ()
        return cls(env_id or record["env_id"], tuple(record["obs_shape"]), int(record["num_actions"]),
                   tuple(record.get("action_shape", ())), tuple(record.get("action_low", ())),
                   tuple(record.get("action_high", ())), record.get("obs_dtype", "float32"),
                   int(record.get("frame_stack", 0)), fields, tuple(int(n) for n in record.get("action_nvec", ())),
                   bool(record.get("binary_actions", False)),
                   json.dumps(record["env_space"]) if record.get("env_space") else "",
                   str(record.get("mask_dtype", "uint8")))


def env_info(env: gym.vector.VectorEnv, env_id: str) -> EnvInfo:
    """The env's EnvInfo (env.obs_spec: tfrl.envs.make_vector_env's); EnvIdError for an action space tfrl cannot
    act in."""
    spec: ObsSpec = getattr(env, "obs_spec", None) or observation_spec(env.single_observation_space)
    if spec.structured:
        observations = {"obs_shape": (), "obs_dtype": STRUCTURED, "obs_fields": spec.fields}
    else:
        observations = {"obs_shape": spec.fields[0].shape, "obs_dtype": spec.fields[0].dtype}
    mask_dtype = getattr(env, "mask_dtype", "uint8") if spec.mask is not None else "uint8"
    info = _actions(env.single_action_space, env_id, {**observations, "frame_stack": getattr(env, "frame_stack", 0),
                                                      "env_space": getattr(env, "env_space", ""),
                                                      "mask_dtype": mask_dtype})
    _check_mask(info, spec)
    return info


def _actions(space: gym.Space, env_id: str, observations: dict) -> EnvInfo:
    if isinstance(space, gym.spaces.Discrete):
        return EnvInfo(env_id=env_id, num_actions=int(space.n), **observations)
    if isinstance(space, (gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        binary = isinstance(space, gym.spaces.MultiBinary)
        nvec = (2,) * int(np.prod(space.n)) if binary else tuple(int(n) for n in np.ravel(space.nvec))
        if not binary and (np.asarray(space.start) != 0).any():
            raise EnvIdError(f"{env_id} has MultiDiscrete actions with a start other than 0 ({space}); shift them "
                             "with a gymnasium.ActionWrapper")
        return EnvInfo(env_id=env_id, num_actions=sum(nvec), action_nvec=nvec, binary_actions=binary, **observations)
    if isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating):
        low, high = _finite_bounds(space, env_id)
        return EnvInfo(env_id=env_id, num_actions=0, action_shape=tuple(space.shape), action_low=low,
                       action_high=high, **observations)
    raise EnvIdError(f"{env_id} has action space {space}; tfrl agents act in Discrete, MultiDiscrete, MultiBinary "
                     "or (float) Box spaces")


def _finite_bounds(space: gym.spaces.Box, env_id: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    low, high = np.asarray(space.low, np.float64).ravel(), np.asarray(space.high, np.float64).ravel()
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise EnvIdError(f"{env_id} has Box actions with infinite bounds ({space}): tfrl clips actions to the "
                         "bounds; give the env finite ones (gymnasium.wrappers.ClipAction or RescaleAction)")
    with np.errstate(over="ignore"):  # the overflow is the error below
        span = np.asarray(space.high, np.float32) - np.asarray(space.low, np.float32)
    if not np.isfinite(span).all():  # actions are rescaled from [-1, 1] by this span: every one would be inf
        raise EnvIdError(f"{env_id} has Box action bounds whose span (high - low) overflows float32 ({space}): "
                         "tfrl rescales actions to the bounds; wrap the env in gymnasium.wrappers.RescaleAction "
                         "(e.g. to [-1, 1])")
    return tuple(low.tolist()), tuple(high.tolist())


def _check_mask(info: EnvInfo, spec: ObsSpec) -> None:
    mask = spec.mask
    if mask is None:
        return
    if info.continuous:
        raise EnvIdError(f"{info.env_id} has an {MASK_KEY!r} observation but Box actions: masks choose among "
                         "Discrete (or MultiDiscrete) actions")
    if mask.size != info.num_actions:
        raise EnvIdError(f"{info.env_id}: its {MASK_KEY!r} has {mask.size} entries, but it has {info.num_actions} "
                         "actions (MultiDiscrete: one entry per value of every dimension); one per action")

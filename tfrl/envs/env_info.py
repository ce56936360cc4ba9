"""What an agent's networks are built for, read off an env's spaces: EnvInfo, and env_info() which refuses the
action spaces tfrl cannot act in (one line naming the fix)."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Mapping

import gymnasium as gym
import numpy as np

from tfrl.envs.observations import ObsSpec, observation_spec
from tfrl.errors import UsageError
from tfrl.models import env_space
from tfrl.models.policy_inputs import MASK_KEY, Field

STRUCTURED = "structured"  # the obs_dtype of Dict observations: their fields hold the dtypes
# The dtypes an exported signature's mask input may take: the env's own, if it is one of these.
MASK_DTYPES = ("uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "bool", "float16", "float32",
               "float64")


class EnvIdError(UsageError):
    """Unknown or unsupported environment id, or spaces tfrl cannot train on."""


@dataclasses.dataclass(frozen=True)
class ActionPart:
    """One part of a Dict or Tuple action space (a hybrid action): its key (a Dict key, or a Tuple index as a
    string) and its space, one of Discrete (n), MultiDiscrete or MultiBinary (nvec) and Box (shape, low, high)."""

    key: str
    kind: str  # "discrete", "multi_discrete", "multi_binary" or "continuous"
    nvec: tuple[int, ...] = ()  # discrete: (n,); multi_discrete and multi_binary: each dimension's count
    shape: tuple[int, ...] = ()  # continuous: one action's shape
    low: tuple[float, ...] = ()  # continuous: the bounds, flattened
    high: tuple[float, ...] = ()

    @property
    def discrete(self) -> bool:
        return self.kind != "continuous"

    @property
    def size(self) -> int:
        """Entries the part takes in an action mask (its values; 0 for Box), or a Box's flattened size."""
        return sum(self.nvec) if self.discrete else int(np.prod(self.shape))

    def to_dict(self) -> dict:
        record = {"key": self.key, "kind": self.kind}
        if self.discrete:
            record["nvec"] = list(self.nvec)
        else:
            record.update(shape=list(self.shape), low=list(self.low), high=list(self.high))
        return record

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> ActionPart:
        return cls(str(record["key"]), str(record["kind"]), tuple(int(n) for n in record.get("nvec", ())),
                   tuple(int(n) for n in record.get("shape", ())), tuple(record.get("low", ())),
                   tuple(record.get("high", ())))


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
    # A Dict or Tuple action space (hybrid actions): its parts, in the space's order, and "Dict" or "Tuple".
    # num_actions is then the discrete parts' values (an action mask's entries).
    action_parts: tuple[ActionPart, ...] = ()
    action_container: str = ""

    @property
    def continuous(self) -> bool:
        return self.num_actions == 0 and not self.action_parts

    @property
    def hybrid(self) -> bool:
        return bool(self.action_parts)

    @property
    def action_kind(self) -> str:
        """"discrete", "multi_discrete", "continuous" or "hybrid" (Dict and Tuple actions): what
        tfrl.agents.core.AgentSpec.actions lists."""
        if self.hybrid:
            return "hybrid"
        return "continuous" if self.continuous else "multi_discrete" if self.action_nvec else "discrete"

    @property
    def action_size(self) -> int:
        """Outputs a policy needs per action: the number of actions (all dimensions'), or the Box's size (of a
        hybrid action: the parts' together)."""
        if self.hybrid:
            return sum(part.size for part in self.action_parts)
        return self.num_actions or int(np.prod(self.action_shape))

    @property
    def mask_groups(self) -> tuple[int, ...]:
        """The action mask's groups, each of which must leave some value legal: a MultiDiscrete action's
        dimensions, each dimension of every discrete part of a hybrid one; () for one Discrete action."""
        if self.hybrid:
            return tuple(n for part in self.action_parts if part.discrete for n in part.nvec)
        return self.action_nvec

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

    def action_space_json(self) -> dict:
        """The action space as the export's metadata records it ("action_space")."""
        if self.hybrid:  # the export's outputs "action.<key>", one per part
            return {"type": self.action_container, "parts": [part.to_dict() for part in self.action_parts]}
        if self.action_nvec:
            return ({"type": "MultiBinary", "n": len(self.action_nvec)} if self.binary_actions
                    else {"type": "MultiDiscrete", "nvec": list(self.action_nvec)})
        if not self.continuous:
            return {"type": "Discrete", "n": self.num_actions}
        return {"type": "Box", "shape": list(self.action_shape), "low": list(self.action_low),
                "high": list(self.action_high)}

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
        if self.hybrid:
            record.update(action_parts=[part.to_dict() for part in self.action_parts],
                          action_container=self.action_container)
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
                   str(record.get("mask_dtype", "uint8")),
                   tuple(ActionPart.from_dict(part) for part in record.get("action_parts", ())),
                   str(record.get("action_container", "")))


def checked_record(raw: Mapping[str, Any] | None, source: str) -> Mapping[str, Any] | None:
    """`raw` if it is an EnvInfo record (EnvInfo.to_dict, as config.json keeps it); UsageError naming the file
    otherwise."""
    if raw is None:
        return None
    try:
        info = EnvInfo.from_dict(raw)
        fields, parts = info.obs_fields, info.action_parts
        sizes = [*info.obs_shape, info.num_actions, *info.action_shape, info.frame_stack, *info.action_nvec,
                 *(n for field in fields for n in field.shape),
                 *(n for part in parts for n in (*part.nvec, *part.shape))]
        valid = (all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in sizes)
                 and info.obs_dtype in ("float32", "uint8", "structured") and isinstance(info.env_id, str)
                 and (info.obs_dtype == "structured") == bool(fields)
                 and all(field.dtype in ("float32", "uint8") for field in fields)
                 and len(info.action_low) == len(info.action_high) and info.mask_dtype in MASK_DTYPES
                 and all(isinstance(b, (int, float)) for b in (*info.action_low, *info.action_high))
                 and info.action_container in ("", "Dict", "Tuple") and bool(parts) == bool(info.action_container)
                 and all(_valid_part(part) for part in parts))
    except (KeyError, TypeError, ValueError):
        valid = False
    if not valid:
        raise UsageError(f"{source}: 'env_info' is not a valid record of the env's spaces: {raw!r:.200}")
    env_space.parse(info.env_space, f"{source}: 'env_info'")
    return raw


def _valid_part(part: ActionPart) -> bool:
    if part.kind == "continuous":
        return (bool(part.shape) and len(part.low) == len(part.high) == math.prod(part.shape)
                and all(isinstance(b, (int, float)) for b in (*part.low, *part.high)))
    return part.kind in ("discrete", "multi_discrete", "multi_binary") and all(n >= 1 for n in part.nvec) and (
        len(part.nvec) == 1 if part.kind == "discrete" else bool(part.nvec))


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
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        return _hybrid_actions(space, env_id, observations)
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


def _hybrid_actions(space: gym.spaces.Dict | gym.spaces.Tuple, env_id: str, observations: dict) -> EnvInfo:
    """A Dict or Tuple of Discrete, MultiDiscrete, MultiBinary and Box parts (not nested)."""
    named = space.spaces.items() if isinstance(space, gym.spaces.Dict) else enumerate(space.spaces)
    parts = []
    for key, part in named:
        if isinstance(part, (gym.spaces.Dict, gym.spaces.Tuple)):
            raise EnvIdError(f"{env_id} has a nested action space (part {key!r} is {part}); tfrl takes a Dict or "
                             "Tuple of Discrete, MultiDiscrete, MultiBinary and Box parts, one level deep")
        if isinstance(part, gym.spaces.Box) and not part.shape:
            raise EnvIdError(f"{env_id}: action part {key!r} is a Box of shape (); give it shape (1,)")
        info = _actions(part, f"{env_id} (action part {key!r})", observations)
        if info.continuous:
            parts.append(ActionPart(str(key), "continuous", shape=info.action_shape, low=info.action_low,
                                    high=info.action_high))
        else:
            kind = "multi_binary" if info.binary_actions else "multi_discrete" if info.action_nvec else "discrete"
            parts.append(ActionPart(str(key), kind, nvec=info.action_nvec or (info.num_actions,)))
    if not parts:
        raise EnvIdError(f"{env_id} has an empty {type(space).__name__} action space")
    container = "Dict" if isinstance(space, gym.spaces.Dict) else "Tuple"
    return EnvInfo(env_id=env_id, num_actions=sum(part.size for part in parts if part.discrete),
                   action_parts=tuple(parts), action_container=container, **observations)


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
    if info.continuous or (info.hybrid and not info.num_actions):
        raise EnvIdError(f"{info.env_id} has an {MASK_KEY!r} observation but Box actions: masks choose among "
                         "Discrete (or MultiDiscrete) actions")
    if info.hybrid and mask.size != info.num_actions:
        discrete = ", ".join(f"{part.key!r}: {part.size}" for part in info.action_parts if part.discrete)
        boxes = [part.key for part in info.action_parts if not part.discrete]
        raise EnvIdError(f"{info.env_id}: its {MASK_KEY!r} has {mask.size} entries, but its discrete action parts "
                         f"({discrete}) have {info.num_actions} values: one entry per value of each discrete part, "
                         f"in the parts' order" + (f"; Box parts ({', '.join(map(repr, boxes))}) take none"
                                                   if boxes else ""))
    if mask.size != info.num_actions:
        raise EnvIdError(f"{info.env_id}: its {MASK_KEY!r} has {mask.size} entries, but it has {info.num_actions} "
                         "actions (MultiDiscrete: one entry per value of every dimension); one per action")

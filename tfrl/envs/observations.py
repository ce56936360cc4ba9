"""What an observation is made of, and the one form tfrl stores and passes it in. Needs no TensorFlow.

A flat env (a Box, Discrete, MultiDiscrete or MultiBinary observation) has one field, "observation": a batch
is one array [N, *shape] (float32, or uint8 for images), as it always was.

A Dict (or Tuple) env has one field per entry, keyed by name: nested Dicts become dotted keys ("arm.joints"),
Tuple entries their index ("0", "1", ...). Each entry is converted once, in the env (StructuredObservation):
float Boxes to float32, uint8 Boxes kept (HWC images), bool Boxes to uint8 images of 0 and 255 (3-D) or float32
0/1 vectors, other integer Boxes to float32, Discrete to a one-hot float32 vector, MultiDiscrete to concatenated
one-hots, MultiBinary to float32. A batch is then a NumPy structured array [N] whose fields are the entries, each
with its own shape and dtype: replay buffers, rollouts, n-step buffers and checkpoints store it as they store any
array, without copying the entries into one float array (an image entry stays uint8), and every field is read
back by name (`fields`).

An entry named "action_mask" (MASK_KEY; 1 = the action is legal, one entry per action) is the env's action mask:
kept as uint8, never a network input, read by the agents that mask. An env with an `action_masks()` method
(sb3-contrib's convention) gets one the same way: its observation becomes {"observation": ..., "action_mask":
...} (MaskedObservation).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Mapping, Sequence

import gymnasium as gym
import numpy as np

from tfrl.models.policy_inputs import FLAT_KEY, MASK_KEY, Field, nested_key


@dataclasses.dataclass(frozen=True)
class ObsSpec:
    """The fields of an observation; `structured` when they come as a Dict (see the module docstring)."""

    fields: tuple[Field, ...]
    structured: bool = False

    @classmethod
    def flat(cls, shape: Sequence[int], dtype: str = "float32") -> ObsSpec:
        return cls((Field(FLAT_KEY, tuple(shape), str(dtype)),))

    @property
    def inputs(self) -> tuple[Field, ...]:
        """The fields networks read: all but the action mask."""
        return tuple(field for field in self.fields if field.key != MASK_KEY)

    @property
    def mask(self) -> Field | None:
        return next((field for field in self.fields if field.key == MASK_KEY), None)

    @property
    def numpy_dtype(self) -> np.dtype:
        """The dtype of a batch's rows: the structured dtype of the fields, or the one field's dtype."""
        if not self.structured:
            return np.dtype(self.fields[0].dtype)
        return np.dtype([(field.key, field.dtype, field.shape) for field in self.fields])

    @property
    def row_shape(self) -> tuple[int, ...]:
        """The shape of one row as stored: () for a structured row (its fields are inside its dtype)."""
        return () if self.structured else self.fields[0].shape

    @property
    def nbytes(self) -> int:
        """Bytes of one observation as stored."""
        return sum(field.size * np.dtype(field.dtype).itemsize for field in self.fields)

    def fields_of(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        """{key: [*lead, *shape]} of a batch (views, no copy); lead = the batch's shape."""
        if not self.structured:
            return {FLAT_KEY: batch}
        return {field.key: batch[field.key] for field in self.fields}

    def empty(self, lead: Sequence[int]) -> np.ndarray:
        """A zero batch of shape [*lead] rows."""
        return np.zeros((*lead, *self.row_shape), self.numpy_dtype)

    def to_json(self) -> list[dict]:
        return [{"key": f.key, "shape": list(f.shape), "dtype": f.dtype} for f in self.fields]

    @classmethod
    def from_json(cls, fields: Sequence[Mapping[str, Any]]) -> ObsSpec:
        return cls(tuple(Field(str(f["key"]), tuple(int(n) for n in f["shape"]), str(f["dtype"])) for f in fields),
                   structured=True)


def observation_dtype(space: gym.Space) -> np.dtype:
    """How a non-Dict observation is stored and fed to the networks: uint8 Boxes (images) as uint8, 4x smaller
    than float32 (the networks scale them to [0, 1]); everything else as float32."""
    return np.dtype(np.uint8) if space.dtype == np.uint8 else np.dtype(np.float32)


def observation_spec(space: gym.Space) -> ObsSpec:
    """The fields of an adapted env's observations (tfrl.envs.adapted): a Dict's, or the one array's."""
    if isinstance(space, gym.spaces.Dict):
        return ObsSpec(structured_space_fields(space), structured=True)
    return ObsSpec.flat(space.shape, observation_dtype(space).name)


def structured_space_fields(space: gym.spaces.Dict | gym.spaces.Tuple) -> tuple[Field, ...]:
    """The fields of a Dict or Tuple observation space, after StructuredObservation's conversions."""
    return tuple(Field(key, converted.shape, converted.dtype.name) for key, (_, converted) in _entries(space, ""))


def _entries(space, prefix: str):
    """[(dotted key, (the entry's space, the space it is converted to))], depth first."""
    if isinstance(space, gym.spaces.Dict):
        items = space.spaces.items()
    elif isinstance(space, gym.spaces.Tuple):
        items = ((str(i), sub) for i, sub in enumerate(space.spaces))
    else:
        return [(prefix, (space, _converted_space(space, prefix)))]
    entries = []
    for name, sub in items:
        entries += _entries(sub, nested_key(prefix, name))
    return entries


def env_space_json(space: gym.Space) -> str:
    """The env's own observation space as tfrl.models.env_space reads it (JSON), so that a policy object takes the env's
    observations; "" when it takes them as they are (a Box or MultiBinary, or a one-level Dict of them)."""
    description = _description(space)
    return json.dumps(description) if _converted(description, top=True) else ""


def _description(space: gym.Space) -> dict:
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": [int(n) for n in np.ravel(space.nvec)],
                "start": [int(s) for s in np.ravel(space.start)], "shape": list(space.shape)}
    if isinstance(space, gym.spaces.Dict):
        return {"type": "Dict", "spaces": {str(name): _description(sub) for name, sub in space.spaces.items()}}
    if isinstance(space, gym.spaces.Tuple):
        return {"type": "Tuple", "spaces": [_description(sub) for sub in space.spaces]}
    if isinstance(space, gym.spaces.MultiBinary) and len(space.shape) > 1:
        return {"type": "MultiBinary", "shape": list(space.shape)}  # flattened for the networks
    return {"type": "Box"}  # a Box, a MultiBinary of one dimension: the policy object casts its values


def _converted(description: dict, top: bool) -> bool:
    """Whether tfrl's conversion changes more than dtypes: integers to one-hots, a Tuple or a nested Dict."""
    if description["type"] == "Dict":
        return not top or any(_converted(sub, False) for sub in description["spaces"].values())
    return description["type"] != "Box"


def _converted_space(space: gym.Space, key: str) -> gym.spaces.Box:
    if key == MASK_KEY:
        if not isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
            raise ValueError(f"entry {MASK_KEY!r} has space {space}; a mask is a Box or MultiBinary of 0s and 1s, "
                             "one entry per action")
        return gym.spaces.Box(0, 1, (gym.spaces.flatdim(space),), np.uint8)
    if isinstance(space, gym.spaces.Box):
        if space.dtype == np.uint8 or (space.dtype == np.bool_ and len(space.shape) == 3):
            return gym.spaces.Box(0, 255, space.shape, np.uint8)
        return gym.spaces.Box(-np.inf, np.inf, space.shape, np.float32)
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        return gym.spaces.Box(0.0, 1.0, (gym.spaces.flatdim(space),), np.float32)
    raise ValueError(f"entry {key!r} has space {space}; tfrl takes Box, Discrete, MultiDiscrete, MultiBinary, "
                     "Dict and Tuple entries")


def stored_as_given(space: gym.Space) -> bool:
    """A Dict of Boxes (no nesting, no action mask, no boolean image): to_batch's copy into the fields' dtypes is
    all the conversion it needs, so the env is used without StructuredObservation's per-step work."""
    return isinstance(space, gym.spaces.Dict) and all(
        isinstance(entry, gym.spaces.Box) and key != MASK_KEY and "." not in key
        and not (entry.dtype == np.bool_ and len(entry.shape) == 3) for key, entry in space.spaces.items())


def _converter(space: gym.Space, key: str) -> Callable[[Any], np.ndarray]:
    """The function that converts one entry's values (chosen once per entry: it runs on every env step)."""
    if key == MASK_KEY:
        size = gym.spaces.flatdim(space)
        return lambda value: mask_entries(value, size)
    if isinstance(space, gym.spaces.Box):
        if space.dtype == np.bool_ and len(space.shape) == 3:
            return lambda value: np.asarray(value, np.uint8) * np.uint8(255)
        dtype = np.uint8 if space.dtype == np.uint8 else np.float32
        return lambda value: np.asarray(value, dtype)
    return lambda value: np.asarray(gym.spaces.flatten(space, value), np.float32)  # one-hot(s) / 0-1


def _path(space: gym.Space, key: str) -> tuple:
    """The indices that reach a dotted key's entry: ints into Tuples, names into Dicts."""
    path = []
    for part in key.split("."):
        tuple_space = isinstance(space, gym.spaces.Tuple)
        path.append(int(part) if tuple_space else part)
        space = space.spaces[int(part)] if tuple_space else space.spaces[part]
    return tuple(path)


class StructuredObservation(gym.ObservationWrapper):
    """A Dict or Tuple observation as a flat Dict of the converted entries, keyed by their dotted keys."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        entries = _entries(env.observation_space, "")
        self._readers = [(key, _path(env.observation_space, key), _converter(space, key))
                         for key, (space, _) in entries]
        self._keys = _top_keys(env.observation_space)
        self.observation_space = gym.spaces.Dict({key: converted for key, (_, converted) in entries})

    def observation(self, observation):
        _check_keys(observation, self._keys)
        converted = {}
        for key, path, convert in self._readers:
            value = observation
            for index in path:
                value = value[index]
            converted[key] = convert(value)
        return converted


class CheckedDictKeys(gym.ObservationWrapper):
    """A Dict observation used as it is (stored_as_given): ValueError if its keys are not its space's, which the
    vector env would drop or miss without a word."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._keys = _top_keys(env.observation_space)

    def observation(self, observation):
        _check_keys(observation, self._keys)
        return observation


def _top_keys(space: gym.Space) -> frozenset | None:
    return frozenset(space.spaces) if isinstance(space, gym.spaces.Dict) else None


def _check_keys(observation, keys: frozenset | None) -> None:
    if keys is not None and (not isinstance(observation, Mapping) or observation.keys() != keys):
        given = sorted(observation) if isinstance(observation, Mapping) else type(observation).__name__
        raise ValueError(f"its observation has the keys {given}, its observation space {sorted(keys)}")


class MaskedObservation(gym.ObservationWrapper):
    """An env with an action_masks() method: its observation becomes {"observation": obs, "action_mask": mask},
    the mask taken after every reset and step (so that the last observation of an episode has its own)."""

    def __init__(self, env: gym.Env, num_actions: int):
        super().__init__(env)
        self.observation_space = masked_space(env.observation_space, num_actions)

    def observation(self, observation):
        mask = self.env.get_wrapper_attr("action_masks")()
        return {FLAT_KEY: observation, MASK_KEY: mask_entries(mask, self.observation_space[MASK_KEY].shape[0])}


def masked_space(space: gym.Space, num_actions: int) -> gym.spaces.Dict:
    """MaskedObservation's space over an env's observation `space`."""
    return gym.spaces.Dict({FLAT_KEY: space, MASK_KEY: gym.spaces.Box(0, 1, (num_actions,), np.uint8)})


def mask_entries(mask, num_actions: int) -> np.ndarray:
    """An env's mask as uint8 0/1 entries; ValueError when it is not one 0 or 1 (or bool) per action: a mask of
    probabilities or of action indices would otherwise be read silently as something else."""
    mask = np.asarray(mask)
    if mask.size != num_actions:
        raise ValueError(f"its {MASK_KEY} has {mask.size} entries, not one per action ({num_actions})")
    if mask.dtype != np.bool_ and not (np.issubdtype(mask.dtype, np.number) and ((mask == 0) | (mask == 1)).all()):
        raise ValueError(f"its {MASK_KEY} holds values other than 0 and 1 (dtype {mask.dtype}, e.g. "
                         f"{mask.reshape(-1)[:4].tolist()}); 1 = legal, 0 = illegal")
    return mask.reshape(-1).astype(np.uint8)


def to_batch(spec: ObsSpec, observations) -> np.ndarray:
    """A vector env's observations (an array, or a dict of arrays [N, ...]) as one batch in tfrl's form: a copy
    (vector envs reuse their buffers)."""
    if not spec.structured:
        return np.array(observations, dtype=spec.numpy_dtype)
    first = observations[spec.fields[0].key]
    batch = spec.empty((len(first),))
    for field in spec.fields:
        batch[field.key] = observations[field.key]
    return batch


def to_row(spec: ObsSpec, observation) -> np.ndarray:
    """One env's observation (an array, or a dict of arrays) as one row of a batch."""
    if not spec.structured:
        return np.asarray(observation, dtype=spec.numpy_dtype)
    row = spec.empty(())
    for field in spec.fields:
        row[field.key] = observation[field.key]
    return row


def legal_actions(batch: np.ndarray) -> np.ndarray | None:
    """bool [N, A]: the legal actions of each row of a batch, None for observations without an action mask."""
    names = batch.dtype.names
    return batch[MASK_KEY].astype(bool) if names and MASK_KEY in names else None


def check_some_action_is_legal(batch: np.ndarray, nvec: Sequence[int] = ()) -> None:
    """ValueError naming the first row whose mask leaves no legal action (for MultiDiscrete masks, nvec: in some
    dimension)."""
    legal = legal_actions(batch)
    if legal is None:
        return
    segments = np.split(legal, np.cumsum(nvec)[:-1], axis=-1) if nvec else [legal]
    for segment in segments:
        empty = np.flatnonzero(~segment.any(axis=-1))
        if len(empty):
            raise ValueError(f"env {int(empty[0])}'s {MASK_KEY} allows no action")

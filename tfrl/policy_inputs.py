"""What a policy object accepts, checked and batched with NumPy alone (no TensorFlow, no gymnasium).

A policy takes one observation or a batch: an array, or for Dict observations a dict {key: array} or a structured
array with one field per key. `fields` describes what it takes (Field, here so that tfrl.portable needs neither
TensorFlow nor gymnasium).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np

from tfrl.errors import UsageError


MASK_KEY = "action_mask"
FLAT_KEY = "observation"  # the one field of a flat env, and the export's input name for it
STATE_NAME = "state"  # the export's state input and output of a policy with memory


def nested_key(prefix: str, name) -> str:
    """A nested Dict or Tuple entry's key: its parents' keys and its own name (a Tuple's: its index), dotted."""
    return f"{prefix}.{name}" if prefix else str(name)


def input_name(key: str) -> str:
    """A Dict observation field's input name in the serving signature ("." becomes "_")."""
    return key.replace(".", "_")


@dataclasses.dataclass(frozen=True)
class Field:
    """One entry of an observation (tfrl.observations, which re-exports it): its key, shape and dtype."""

    key: str
    shape: tuple[int, ...]
    dtype: str  # "float32", or "uint8" (images, masks)

    @property
    def image(self) -> bool:
        return self.dtype == "uint8" and len(self.shape) == 3 and self.key != MASK_KEY

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))


def as_batch(fields: Sequence[Any], structured: bool, obs, source: str) -> tuple[Any, bool]:
    """(the observations as a batch: one array, or {key: array}; whether one observation was given)."""
    if not structured:
        return field_batch(fields[0], obs, "observations", source)
    if not isinstance(obs, Mapping) and getattr(getattr(obs, "dtype", None), "names", None) is None:
        raise UsageError(f"{source} takes a dict of {', '.join(f.key for f in fields)}, got {type(obs).__name__}")
    keys = [field.key for field in fields]
    given = set(obs.keys() if isinstance(obs, Mapping) else obs.dtype.names)
    missing, extra = sorted(set(keys) - given), sorted(given - set(keys))
    if missing or extra:
        raise UsageError(f"{source} takes the fields {', '.join(keys)}; "
                         + (f"missing {', '.join(missing)}" if missing else f"unknown {', '.join(extra)}"))
    arrays = {field.key: field_batch(field, obs[field.key], f"field {field.key!r}", source) for field in fields}
    singles = {single for _, single in arrays.values()}
    if len(singles) > 1 or len({len(array) for array, _ in arrays.values()}) > 1:
        raise UsageError(f"{source}: the fields are not all one observation or all a batch of one size")
    return {key: array for key, (array, _) in arrays.items()}, singles.pop()


def batch_rows(batch) -> int:
    """Rows of a batch: one array's length, or a dict's (of equal-length arrays) first array's."""
    return len(next(iter(batch.values()))) if isinstance(batch, dict) else len(batch)


def field_batch(field, value, what: str, source: str) -> tuple[np.ndarray, bool]:
    """One field's value as a batch [N, *shape] in its dtype, and whether it was one observation."""
    array = np.asarray(value)
    if array.dtype == np.bool_ and field.dtype == "uint8" and field.key != MASK_KEY:
        array = array.astype(np.uint8) * np.uint8(255)  # a boolean grid (MinAtar's): the networks read 0 and 255
    if field.dtype == "uint8" and array.dtype != np.uint8 and field.image:  # a float image would be truncated
        raise UsageError(f"{source} takes uint8 {what} (images), got {array.dtype}")
    if array.dtype.kind not in "biuf":
        raise UsageError(f"{source} takes numbers as {what}, got {array.dtype}")
    array = array.astype(field.dtype, copy=False)
    if array.shape == tuple(field.shape):
        return array[None], True
    if array.shape[1:] != tuple(field.shape):
        raise UsageError(f"{source} takes {what} of shape {tuple(field.shape)} (or a batch "
                         f"[N, *{tuple(field.shape)}]), got {array.shape}")
    return array, False

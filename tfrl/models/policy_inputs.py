"""What a policy object accepts, checked and batched with NumPy alone (no TensorFlow, no gymnasium).

A policy takes one observation or a batch: an array, or for Dict observations a dict {key: array} or a structured
array with one field per key. `fields` describes what it takes (Field, here so that tfrl.models.portable needs neither
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
ACTION_PART = "action."  # the export's output of one part of a hybrid (Dict or Tuple) action: "action.<key>"
NO_LEGAL_ACTION = "no_legal_action"  # the export's flag output of a masked policy: the row's mask allows nothing


def nested_key(prefix: str, name) -> str:
    """A nested Dict or Tuple entry's key: its parents' keys and its own name (a Tuple's: its index), dotted."""
    return f"{prefix}.{name}" if prefix else str(name)


def input_name(key: str) -> str:
    """A Dict observation field's input name in the serving signature ("." becomes "_")."""
    return key.replace(".", "_")


@dataclasses.dataclass(frozen=True)
class Field:
    """One entry of an observation (tfrl.envs.observations, which re-exports it): its key, shape and dtype."""

    key: str
    shape: tuple[int, ...]
    dtype: str  # "float32", or "uint8" (images, masks)

    @property
    def image(self) -> bool:
        return self.dtype == "uint8" and len(self.shape) == 3 and self.key != MASK_KEY

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))


def as_batch(fields: Sequence[Any], structured: bool, obs, source: str,
             allow_non_finite: bool = False) -> tuple[Any, bool]:
    """(the observations as a batch: one array, or {key: array}; whether one observation was given).

    UsageError for what has no right answer: a NaN, an Inf or a number beyond float32's range in an observation
    (unless allow_non_finite), an action mask with values other than 0 and 1 or a row that allows no action."""
    if not structured:
        return field_batch(fields[0], obs, "observations", source, allow_non_finite)
    if not isinstance(obs, Mapping) and getattr(getattr(obs, "dtype", None), "names", None) is None:
        raise UsageError(f"{source} takes a dict of {', '.join(f.key for f in fields)}, got {type(obs).__name__}")
    keys = [field.key for field in fields]
    given = set(obs.keys() if isinstance(obs, Mapping) else obs.dtype.names)
    missing, extra = sorted(set(keys) - given), sorted(given - set(keys))
    if missing or extra:
        raise UsageError(f"{source} takes the fields {', '.join(keys)}; "
                         + (f"missing {', '.join(missing)}" if missing else f"unknown {', '.join(extra)}"))
    arrays = {field.key: field_batch(field, obs[field.key], f"field {field.key!r}", source, allow_non_finite)
              for field in fields}
    singles = {single for _, single in arrays.values()}
    if len(singles) > 1 or len({len(array) for array, _ in arrays.values()}) > 1:
        raise UsageError(f"{source}: the fields are not all one observation or all a batch of one size")
    return {key: array for key, (array, _) in arrays.items()}, singles.pop()


def env_actions(outputs: Mapping[str, Any], container: str | None = None):
    """The batch of actions the env's step takes from a policy's outputs: "action", or for a hybrid action its
    parts ("action.<key>") as a dict, a tuple for a Tuple space (container; None: parts keyed 0, 1, ... are a
    Tuple's)."""
    parts = {name[len(ACTION_PART):]: np.asarray(value) for name, value in outputs.items()
             if name.startswith(ACTION_PART)}
    if not parts:
        return np.asarray(outputs["action"])
    if container == "Tuple" or (container is None and set(parts) == {str(i) for i in range(len(parts))}):
        return tuple(parts[str(i)] for i in range(len(parts)))
    return parts


def action_container(metadata: Mapping[str, Any] | None) -> str | None:
    """"Dict" or "Tuple" where an export's metadata records a hybrid action space (its "action_space" type)."""
    container = ((metadata or {}).get("action_space") or {}).get("type")
    return container if container in ("Dict", "Tuple") else None


def action_row(actions, row):
    """actions[row] of a batch of actions (of each part of a hybrid one)."""
    if isinstance(actions, dict):
        return {key: value[row] for key, value in actions.items()}
    if isinstance(actions, tuple):
        return tuple(value[row] for value in actions)
    return actions[row]


def batch_rows(batch) -> int:
    """Rows of a batch: one array's length, or a dict's (of equal-length arrays) first array's."""
    return len(next(iter(batch.values()))) if isinstance(batch, dict) else len(batch)


def check_answer(outputs: Mapping[str, Any], source: str) -> None:
    """UsageError if the policy's outputs flag a row whose action mask allows no action (in some part of a
    multi-part action): there is no right action to give."""
    flags = outputs.get(NO_LEGAL_ACTION)
    if flags is not None and np.any(flags):
        rows = np.flatnonzero(np.reshape(flags, -1))
        raise UsageError(f"{source}: the action mask of row {int(rows[0])} allows no action"
                         f"{' (in some part of the action)' if np.ndim(flags) else ''}: there is no right answer"
                         + (f" ({len(rows)} such rows)" if len(rows) > 1 else ""))


def field_batch(field, value, what: str, source: str, allow_non_finite: bool = False) -> tuple[np.ndarray, bool]:
    """One field's value as a batch [N, *shape] in its dtype, and whether it was one observation."""
    array = np.asarray(value)
    if array.dtype == np.bool_ and field.dtype == "uint8" and field.key != MASK_KEY:
        array = array.astype(np.uint8) * np.uint8(255)  # a boolean grid (MinAtar's): the networks read 0 and 255
    if field.dtype == "uint8" and array.dtype != np.uint8 and field.image:  # a float image would be truncated
        raise UsageError(f"{source} takes uint8 {what} (images), got {array.dtype}")
    if array.dtype.kind not in "biuf":
        raise UsageError(f"{source} takes numbers as {what}, got {array.dtype}")
    if array.shape != tuple(field.shape) and array.shape[1:] != tuple(field.shape):
        raise UsageError(f"{source} takes {what} of shape {tuple(field.shape)} (or a batch "
                         f"[N, *{tuple(field.shape)}]), got {array.shape}")
    if field.key == MASK_KEY:
        _check_mask(array, field.size, what, source)
    else:
        _check_values(array, field.dtype, what, source, allow_non_finite)
    with np.errstate(over="ignore", invalid="ignore"):  # allow_non_finite: out of range becomes inf, as asked
        array = array.astype(field.dtype, copy=False)
    return (array[None], True) if array.shape == tuple(field.shape) else (array, False)


def _check_values(array: np.ndarray, dtype: str, what: str, source: str, allow_non_finite: bool) -> None:
    """A float field: finite and within float32's range (a float64 beyond it would become inf); a uint8 one: whole
    numbers in [0, 255] (a cast would wrap -1 to 255)."""
    if not array.size:
        return
    if dtype == "uint8" and array.dtype != np.uint8:
        if not (np.all(np.isfinite(array)) and array.min() >= 0 and array.max() <= 255
                and np.all(np.mod(array, 1) == 0)):
            raise UsageError(f"{source} takes whole numbers in [0, 255] as {what}")
        return
    if array.dtype.kind == "f" and not allow_non_finite:
        # One reduction on the happy path: max |x| is NaN if any x is NaN, and NaN <= anything is False.
        if not np.abs(array).max() <= np.finfo(np.float32).max:
            index = [int(i) for i in np.argwhere(~(np.abs(array) <= np.finfo(np.float32).max))[0]]
            raise UsageError(f"{source}: {what} hold NaN or Inf (or a number beyond float32's range) at index "
                             f"{index}; the policy's answer would be garbage (load it with allow_non_finite=True "
                             "for the raw outputs)")


def _check_mask(array: np.ndarray, mask_size: int, what: str, source: str) -> None:
    """An action mask: every value 0 or 1 (bool, integer or float), and some action legal in every row."""
    if array.size and not np.all((array == 0) | (array == 1)):
        raise UsageError(f"{source}: {what} must hold only 0 and 1 (1 = legal), got "
                         f"{np.unique(array[~((array == 0) | (array == 1))])[:3].tolist()}")
    empty = np.flatnonzero(~array.reshape(-1, mask_size).astype(bool).any(axis=-1))
    if len(empty):
        raise UsageError(f"{source}: {what} of row {int(empty[0])} allows no action: there is no right answer")

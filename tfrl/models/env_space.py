"""The env's own observations, as a policy object takes them. Needs NumPy alone (no TensorFlow, no gymnasium).

tfrl converts some observations before its networks read them (tfrl.envs.observations): a Discrete entry becomes a
one-hot float vector, a MultiDiscrete one concatenated one-hots, a Tuple's parts the keys "0", "1", ..., nested
Dicts dotted keys. The exported SavedModel takes the converted form. A policy object (tfrl.load_policy, the
portable runtimes) also takes the env's own observations, converted here, when the export's metadata describes
the env's space ("env_space", written by tfrl.envs.observations.env_space_json):

    {"type": "Box"}                                          passed as it is (a Box, MultiBinary)
    {"type": "Discrete", "n": 8, "start": 0}                 an int -> a one-hot vector of 8
    {"type": "MultiDiscrete", "nvec": [3, 2], "start": [0, 0], "shape": [2]}
    {"type": "MultiBinary", "shape": [2, 3]}                 several dimensions -> flattened
    {"type": "Dict", "spaces": {"name": {...}, ...}}         nested: dotted keys ("arm.joints")
    {"type": "Tuple", "spaces": [{...}, ...]}                a tuple: the keys "0", "1", ...

Integer values of a Discrete or MultiDiscrete entry are the env's own (one, or a batch with a leading dimension);
float values, and rows of 0/1 integers as wide as the one-hot vectors with one 1 per dimension, are taken as the
one-hot vectors the networks read, unchanged. A Discrete entry's integer one-hots come as a batch [N, n]: a flat
[n] is n of the env's own values. A batch of Tuple observations is one tuple of arrays.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import numpy as np

from tfrl.errors import UsageError
from tfrl.models.policy_inputs import nested_key

_KINDS = ("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple")
_MISSING = object()


def parse(description: str | Mapping[str, Any] | None, source: str) -> dict | None:
    """The description as a dict (None for none); UsageError naming `source` when it is not one."""
    if not description:
        return None
    try:
        space = json.loads(description) if isinstance(description, str) else dict(description)
        _check(space)
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as e:
        raise UsageError(f"{source}: its env_space is not a description of an observation space ({e!r})") from None
    return space


def _check(space: Mapping[str, Any]) -> None:
    kind = space["type"]
    if kind not in _KINDS:
        raise ValueError(f"unknown type {kind!r}")
    if kind == "Discrete" and not (int(space["n"]) >= 1 and isinstance(space["start"], int)):
        raise ValueError(f"Discrete n {space['n']!r}, start {space['start']!r}")
    if kind == "MultiDiscrete" and not (len(space["nvec"]) == len(space["start"]) == int(np.prod(space["shape"]))
                                        and all(int(n) >= 1 for n in space["nvec"])):
        raise ValueError(f"MultiDiscrete nvec {space['nvec']!r}, start {space['start']!r}, shape {space['shape']!r}")
    if kind == "MultiBinary" and not all(int(n) >= 1 for n in space["shape"]):
        raise ValueError(f"MultiBinary shape {space['shape']!r}")
    children = space["spaces"].values() if kind == "Dict" else space["spaces"] if kind == "Tuple" else ()
    for child in children:
        _check(child)


def to_fields(space: Mapping[str, Any] | None, obs, source: str):
    """`obs` (one observation or a batch) with the env's own values converted to the form the policy's fields
    take; values already in that form pass unchanged, and what cannot be read is left for the fields to refuse."""
    if space is None or getattr(getattr(obs, "dtype", None), "names", None) is not None:
        return obs  # a structured array: tfrl's own batches, already converted
    if space["type"] not in ("Dict", "Tuple"):
        return _entry(space, obs, "observations", source)
    leaves = _leaves(space, "", ())
    if isinstance(obs, Mapping) and all(key in obs for key, _, _ in leaves):  # the fields' keys already
        return {**obs, **{key: _entry(leaf, obs[key], f"field {key!r}", source) for key, _, leaf in leaves}}
    converted = {}
    for key, path, leaf in leaves:
        value = _reach(obs, path)
        if value is _MISSING:
            return obs
        converted[key] = _entry(leaf, value, f"field {key!r}", source)
    return converted


def _leaves(space: Mapping[str, Any], prefix: str, path: tuple) -> list[tuple[str, tuple, Mapping]]:
    """[(dotted key, the indices that reach it, its space)], depth first, as tfrl.envs.observations names them."""
    if space["type"] == "Dict":
        items = [(name, name, child) for name, child in space["spaces"].items()]
    elif space["type"] == "Tuple":
        items = [(str(i), i, child) for i, child in enumerate(space["spaces"])]
    else:
        return [(prefix, path, space)]
    leaves = []
    for name, index, child in items:
        leaves += _leaves(child, nested_key(prefix, name), (*path, index))
    return leaves


def _reach(obs, path: tuple):
    for index in path:
        if isinstance(index, int):
            if not isinstance(obs, tuple) or index >= len(obs):  # a list could be a batch of tuples: not read
                return _MISSING
        elif not isinstance(obs, Mapping) or index not in obs:
            return _MISSING
        obs = obs[index]
    return obs


def _entry(space: Mapping[str, Any], value, what: str, source: str):
    """One entry: a Discrete or MultiDiscrete entry's integers as one-hot float32 vectors, a MultiBinary of several
    dimensions flattened; anything else (already converted) as is."""
    kind = space["type"]
    if kind == "MultiBinary":
        return _flattened(np.asarray(value), tuple(space["shape"]))
    if kind not in ("Discrete", "MultiDiscrete"):
        return value
    array = np.asarray(value)
    if array.dtype.kind not in "iu" or _one_hot_rows(array, space):
        return value  # one-hot vectors, as the networks read them
    if kind == "Discrete":
        return _one_hot(array, space["n"], space["start"], what, source)
    shape = tuple(space["shape"])
    lead = array.ndim - len(shape)
    if lead < 0 or array.shape[lead:] != shape:
        raise UsageError(f"{source} takes {what} as {len(space['nvec'])} integers of shape {shape} (or a batch "
                         f"[N, *{shape}]), or as their one-hot vectors; got integers of shape {array.shape}")
    flat = array.reshape(*array.shape[:lead], len(space["nvec"]))
    parts = [_one_hot(flat[..., j], n, start, f"{what} (dimension {j})", source)
             for j, (n, start) in enumerate(zip(space["nvec"], space["start"]))]
    return np.concatenate(parts, axis=-1)


def _one_hot_rows(array: np.ndarray, space: Mapping[str, Any]) -> bool:
    """Whether integers are already the one-hot vectors (the converted form, as 0/1 integers): rows as wide as the
    one-hots, each with exactly one 1 per dimension. The env's own values never take that shape: a Discrete
    entry's are scalars, so only a batch of rows [N, n] is read as one-hots (a flat [n] is a batch of n values,
    such as two envs' states 0 and 1 of a Discrete(2)); a MultiDiscrete entry's rows are as wide as its
    dimensions, narrower than the one-hots unless every dimension has one value, whose one-hot is the same."""
    discrete = space["type"] == "Discrete"
    widths = [space["n"]] if discrete else list(space["nvec"])
    if (array.ndim < (2 if discrete else 1) or array.shape[-1] != sum(widths)
            or not np.isin(array, (0, 1)).all()):
        return False
    ones = np.add.reduceat(array, np.cumsum([0] + widths[:-1]), axis=-1)
    return bool((ones == 1).all())


def _flattened(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A MultiBinary of several dimensions [..., *shape] as the networks read it, [..., prod(shape)]."""
    if len(shape) > 1 and array.ndim >= len(shape) and array.shape[array.ndim - len(shape):] == shape:
        return array.reshape(*array.shape[:array.ndim - len(shape)], int(np.prod(shape)))
    return array


def _one_hot(array: np.ndarray, n: int, start: int, what: str, source: str) -> np.ndarray:
    index = array.astype(np.int64) - start
    if index.size and (index.min() < 0 or index.max() >= n):
        bad = array.ravel()[np.flatnonzero((index.ravel() < 0) | (index.ravel() >= n))[0]]
        raise UsageError(f"{source}: {what} takes integers from {start} to {start + n - 1}, got {bad}")
    one_hot = np.zeros((*index.shape, n), np.float32)  # rows of n, not an n x n identity (n may be large)
    np.put_along_axis(one_hot, index[..., None], 1.0, axis=-1)
    return one_hot

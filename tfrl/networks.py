"""Keras 3 networks, and a NumPy mirror of them for acting.

Acting happens once per vector step; a TF call costs ~300 µs of fixed overhead
on a 2-core CPU while a NumPy forward pass of a small MLP costs ~10 µs. So the
actor runs `NumpyMLP`, refreshed with the learner's weights after every train
call, and the Keras model stays the single definition that is trained and exported.
"""

from __future__ import annotations

from typing import Sequence

import keras
import numpy as np

_ACTIVATIONS = {
    "relu": lambda x: np.maximum(x, 0.0),
    "tanh": np.tanh,
}


def mlp_torso(inputs, hidden_sizes: Sequence[int], activation: str, name: str = "torso"):
    x = inputs
    for i, units in enumerate(hidden_sizes):
        x = keras.layers.Dense(units, activation=activation, name=f"{name}_{i}")(x)
    return x


def q_network(obs_shape: Sequence[int], num_actions: int, hidden_sizes: Sequence[int],
              dueling: bool = False, name: str = "q_network") -> keras.Model:
    """obs [B, *obs_shape] -> Q-values [B, num_actions], always float32 (also under a mixed precision policy)."""
    obs = keras.Input(shape=tuple(obs_shape), name="observation", dtype="float32")
    x = keras.layers.Flatten(name="flatten")(obs) if len(obs_shape) > 1 else obs
    x = mlp_torso(x, hidden_sizes, "relu")
    if dueling:
        # Wang et al. 2016, eq. 9: subtracting the mean advantage makes V and A identifiable.
        value = keras.layers.Dense(1, name="value_head", dtype="float32")(x)  # [B, 1]
        advantage = keras.layers.Dense(num_actions, name="advantage_head", dtype="float32")(x)  # [B, A]
        q = value + advantage - keras.ops.mean(advantage, axis=-1, keepdims=True)
    else:
        q = keras.layers.Dense(num_actions, name="q_head", dtype="float32")(x)
    return keras.Model(obs, q, name=name)


class NumpyMLP:
    """Forward pass of a `q_network` (or any stack of named Dense layers) in NumPy.

    Reads weights by variable path ("torso_0/kernel", ...), so `update(values)`
    takes them in the model's `trainable_variables` order, as the learner returns them.
    """

    def __init__(self, model: keras.Model, activation: str = "relu"):
        self._paths = [v.path.split("/", 1)[-1] if v.path.startswith(model.name + "/") else v.path
                       for v in model.trainable_variables]
        self._torso = sorted({p.split("/")[0] for p in self._paths if p.startswith("torso_")},
                             key=lambda n: int(n.split("_")[1]))
        self._dueling = any(p.startswith("value_head/") for p in self._paths)
        self._activation = _ACTIVATIONS[activation]
        self.update([np.asarray(v.numpy()) for v in model.trainable_variables])

    def update(self, values: Sequence[np.ndarray]) -> None:
        if len(values) != len(self._paths):
            raise ValueError(f"expected {len(self._paths)} weight arrays, got {len(values)}")
        self._w = {p: np.asarray(v, dtype=np.float32) for p, v in zip(self._paths, values)}

    def _dense(self, x, name):
        return x @ self._w[f"{name}/kernel"] + self._w[f"{name}/bias"]

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        x = obs.reshape(obs.shape[0], -1)
        for name in self._torso:
            x = self._activation(self._dense(x, name))
        if self._dueling:
            value, advantage = self._dense(x, "value_head"), self._dense(x, "advantage_head")
            return value + advantage - advantage.mean(axis=-1, keepdims=True)
        return self._dense(x, "q_head")

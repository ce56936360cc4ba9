"""The CrossQ actor's forward pass in NumPy, for acting (no TensorFlow import: a rollout actor unpickles it).

Its renormalization layers act in evaluation mode, an affine map per feature from their moving statistics, so the
mirror copies every variable of the actor (tfrl.agents.crossq.learning.CrossQLearner.acting_variables), the
non-trainable statistics included.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tfrl.models.numpy_networks import numpy_input


def renorm_affine(gamma, beta, moving_mean, moving_variance, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """A renormalization layer in evaluation mode as y = x * scale + shift (float32)."""
    scale = (np.asarray(gamma, np.float32)
             / np.sqrt(np.asarray(moving_variance, np.float32) + np.float32(epsilon))).astype(np.float32)
    return scale, (np.asarray(beta, np.float32) - np.asarray(moving_mean, np.float32) * scale).astype(np.float32)


class NumpyRenormActor:
    """A crossq_actor's forward pass: obs [N, ...] -> (mean [N, D], log std [N, D]), the log std unclipped."""

    HEADS = ("mean_head", "log_std_head")

    def __init__(self, model):
        from tfrl.agents.crossq.batch_renorm import BatchRenorm  # the learner's side only

        position = {id(variable): i for i, variable in enumerate(model.weights)}
        self._torso, self._heads = [], {}
        for layer in model.layers:
            if isinstance(layer, BatchRenorm):
                self._torso.append(("renorm", tuple(position[id(v)] for v in (
                    layer.gamma, layer.beta, layer.moving_mean, layer.moving_variance)), layer.epsilon))
            elif layer.name in self.HEADS:
                self._heads[layer.name] = (position[id(layer.kernel)], position[id(layer.bias)])
            elif hasattr(layer, "kernel"):  # a torso Dense: ReLU
                self._torso.append(("dense", (position[id(layer.kernel)], position[id(layer.bias)]), None))
        self._size = len(position)
        self.update([np.asarray(v.numpy()) for v in model.weights])

    def update(self, values: Sequence[np.ndarray]) -> None:
        """values: the actor's variables in model.weights' order, as the learner returns them."""
        if len(values) != self._size:
            raise ValueError(f"expected {self._size} weight arrays, got {len(values)}")
        values = [np.asarray(v, dtype=np.float32) for v in values]
        self._steps = []
        for kind, positions, epsilon in self._torso:
            if kind == "renorm":
                self._steps.append((kind, renorm_affine(*(values[i] for i in positions), epsilon)))
            else:
                self._steps.append((kind, tuple(values[i] for i in positions)))
        self._head_weights = {name: (values[k], values[b]) for name, (k, b) in self._heads.items()}

    def __call__(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = numpy_input(obs)
        for kind, (a, b) in self._steps:
            x = x * a + b if kind == "renorm" else np.maximum(x @ a + b, 0.0)
        return tuple(x @ kernel + bias for kernel, bias in (self._head_weights[name] for name in self.HEADS))

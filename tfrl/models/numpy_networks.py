"""The NumPy mirrors of tfrl's Keras networks, for acting: a forward pass in NumPy, refreshed with the learner's
weights after every train call (tfrl.models.networks builds the models; its docstring says why acting runs here). A mirror
is made from a Keras model on the learner's side; it holds NumPy arrays only, and this module imports Keras only
when a mirror is made, so that a rollout actor receiving one never loads TensorFlow.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tfrl.lazy_import import LazyModule
from tfrl.models.policy_inputs import MASK_KEY

keras = LazyModule("keras")


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0)


_ACTIVATIONS = {"relu": _relu, "tanh": np.tanh}  # named functions: a mirror pickles without cloudpickle


def numpy_input(obs: np.ndarray) -> np.ndarray:
    """obs [N, ...] -> [N, features] float32, as the network's input layers make it (uint8 scaled to [0, 1]); a
    structured batch (Dict observations) -> its input fields so, side by side in their order (the mask left out)."""
    if obs.dtype.names is not None:
        return np.concatenate([numpy_input(obs[key]) for key in obs.dtype.names if key != MASK_KEY], axis=-1)
    x = obs.reshape(obs.shape[0], -1)
    return x.astype(np.float32) * np.float32(1.0 / 255.0) if x.dtype == np.uint8 else x


class NumpyMirror:
    """A Keras model's Dense layers (and trainable vectors, such as a Gaussian's log std) in NumPy, found from the
    model's layers and their configured activations, not from variable names.

    `update(values)` takes the model's trainable variables in their order, as a learner returns them; `dense`
    and `chain` run layers by name on [N, F] float32 inputs, exactly as Keras computes them on a CPU:
    activation(x @ kernel + bias).
    """

    def __init__(self, model: keras.Model):
        position = {id(variable): i for i, variable in enumerate(model.trainable_variables)}
        self._order = [layer.name for layer in model.layers]
        self._dense, self._vectors, self._cells = {}, {}, {}
        for layer in model.layers:
            if isinstance(layer, keras.layers.LSTMCell):  # (kernel, recurrent kernel, bias)
                self._cells[layer.name] = tuple(position[id(w)] for w in (layer.kernel, layer.recurrent_kernel,
                                                                           layer.bias))
            elif isinstance(layer, keras.layers.Dense):
                activation = layer.get_config()["activation"]
                self._dense[layer.name] = (position[id(layer.kernel)], position[id(layer.bias)],
                                           None if activation == "linear" else _ACTIVATIONS[activation])
            elif layer.trainable_weights:  # one trainable vector, e.g. AppendLogStd's log std
                (weight,) = layer.trainable_weights
                self._vectors[layer.name] = position[id(weight)]
        self._size = len(position)
        self.update([np.asarray(v.numpy()) for v in model.trainable_variables])

    def update(self, values: Sequence[np.ndarray]) -> None:
        if len(values) != self._size:
            raise ValueError(f"expected {self._size} weight arrays, got {len(values)}")
        values = [np.asarray(v, dtype=np.float32) for v in values]
        # (kernel, bias, activation) per layer, looked up once per update rather than per forward pass.
        self._layers = {name: (values[k], values[b], act) for name, (k, b, act) in self._dense.items()}
        self._weights = {name: values[i] for name, i in self._vectors.items()}
        self._lstm = {name: tuple(values[i] for i in positions) for name, positions in self._cells.items()}

    def names(self, prefix: str) -> list[str]:
        """The Dense layers named <prefix>_<i>, in the model's order (a torso's layers)."""
        return [name for name in self._order if name in self._dense and name.rsplit("_", 1)[0] == prefix]

    def has(self, name: str) -> bool:
        return name in self._dense or name in self._vectors

    def has_lstm(self, name: str) -> bool:
        return name in self._cells

    def lstm(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """An LSTMCell's (kernel, recurrent kernel, bias)."""
        return self._lstm[name]

    def weight(self, name: str) -> np.ndarray:
        return self._weights[name]

    def dense(self, name: str, x: np.ndarray) -> np.ndarray:
        kernel, bias, activation = self._layers[name]
        y = x @ kernel + bias
        return y if activation is None else activation(y)

    def chain(self, names: Sequence[str], x: np.ndarray) -> np.ndarray:
        for name in names:
            x = self.dense(name, x)
        return x


class NumpyQNetwork:
    """A `q_network`'s forward pass in NumPy: obs [N, ...] -> Q-values [N, A]."""

    def __init__(self, model: keras.Model):
        self._mirror = NumpyMirror(model)
        self._torso = self._mirror.names("torso")
        self._dueling = self._mirror.has("value_head")

    def update(self, values: Sequence[np.ndarray]) -> None:
        self._mirror.update(values)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        mirror = self._mirror
        x = mirror.chain(self._torso, numpy_input(obs))
        if self._dueling:
            value, advantage = mirror.dense("value_head", x), mirror.dense("advantage_head", x)
            return value + advantage - advantage.mean(axis=-1, keepdims=True)
        return mirror.dense("q_head", x)


class NumpyActorCritic:
    """An `actor_critic_network`'s forward pass in NumPy: obs [N, ...] -> (policy params [N, P], value [N])."""

    def __init__(self, model: keras.Model):
        self._mirror = mirror = NumpyMirror(model)
        self._shared, self._policy, self._value = (mirror.names(p) for p in ("torso", "policy_torso", "value_torso"))
        self._gaussian = mirror.has("log_std")

    def update(self, values: Sequence[np.ndarray]) -> None:
        self._mirror.update(values)

    def __call__(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mirror = self._mirror
        x = mirror.chain(self._shared, numpy_input(obs))
        policy = mirror.dense("policy_head", mirror.chain(self._policy, x))
        if self._gaussian:
            log_std = mirror.weight("log_std")  # [D]: the last D params (a hybrid head has logits before)
            policy = np.concatenate([policy, np.broadcast_to(log_std, (len(policy), len(log_std)))], axis=-1)
        return policy, mirror.dense("value_head", mirror.chain(self._value, x))[:, 0]

    def value(self, obs: np.ndarray) -> np.ndarray:
        """V(obs) [N] alone; skips the policy torso when it is separate."""
        x = self._mirror.chain(self._shared, numpy_input(obs))
        return self._mirror.dense("value_head", self._mirror.chain(self._value, x))[:, 0]


class NumpySquashedActor:
    """A `squashed_gaussian_actor`'s forward pass in NumPy: obs [N, ...] -> (mean [N, D], log std [N, D]),
    the log std as the network gives it (the policy clips it)."""

    def __init__(self, model: keras.Model):
        self._mirror = NumpyMirror(model)
        self._torso = self._mirror.names("torso")

    def update(self, values: Sequence[np.ndarray]) -> None:
        self._mirror.update(values)

    def __call__(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = self._mirror.chain(self._torso, numpy_input(obs))
        return self._mirror.dense("mean_head", x), self._mirror.dense("log_std_head", x)


class NumpyDeterministicActor:
    """A `deterministic_actor`'s forward pass in NumPy: obs [N, ...] -> action in [-1, 1]^D [N, D]."""

    def __init__(self, model: keras.Model):
        self._mirror = NumpyMirror(model)
        self._torso = self._mirror.names("torso")

    def update(self, values: Sequence[np.ndarray]) -> None:
        self._mirror.update(values)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        return self._mirror.dense("action_head", self._mirror.chain(self._torso, numpy_input(obs)))

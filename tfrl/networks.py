"""Keras 3 networks, and a NumPy mirror of them for acting.

Acting happens once per vector step; a TF call has a fixed overhead many times
larger than a NumPy forward pass of a small MLP (docs/benchmarks.md). So the
actor runs `NumpyMLP`, refreshed with the learner's weights after every train
call, and the Keras model stays the single definition that is trained and exported.
A convolutional torso is the exception: its forward pass costs more in NumPy than a
TF call, so its actor calls the live Keras model (`GraphForward`).

Torsos (the `torso` hyperparameter; "auto" picks a CNN for HWC uint8 images):
    mlp          flatten, then the Dense layers of hidden_sizes
    nature_cnn   Mnih et al. 2015: conv 32 8x8 stride 4, 64 4x4 stride 2, 64 3x3 stride 1, ReLU (84x84 Atari frames)
    minatar_cnn  Young & Tian 2019: conv 16 3x3 stride 1, ReLU (10x10 MinAtar boards, and other small images)
A CNN is followed by the Dense layers of hidden_sizes (Nature DQN: [512]). uint8 observations enter the network
as they are and are scaled to [0, 1] inside it, so the exported SavedModel takes uint8 images too.
"""

from __future__ import annotations

from typing import Sequence

import keras
import numpy as np
import tensorflow as tf

from tfrl import config as config_lib

_ACTIVATIONS = {
    "relu": lambda x: np.maximum(x, 0.0),
    "tanh": np.tanh,
}


LAYER_INITS = ("glorot", "torch")


def observation_input(obs_shape: Sequence[int], obs_dtype: str, torso: str, kernel_init=None):
    """(the Keras Input, the features it gives): uint8 scaled to [0, 1], then the CNN's convolutions and a
    flatten, or a flatten alone (MLP). kernel_init(fan_in): the convolutions' initializer kwargs."""
    obs = keras.Input(shape=tuple(obs_shape), name="observation", dtype=obs_dtype)
    x = keras.layers.Rescaling(1.0 / 255.0, name="scale")(obs) if obs_dtype == "uint8" else obs
    for i, (filters, size, stride) in enumerate(config_lib.CONVOLUTIONS.get(torso, ())):
        fan_in = size * size * x.shape[-1]
        x = keras.layers.Conv2D(filters, size, stride, activation="relu", name=f"conv_{i}",
                                **(kernel_init(fan_in) if kernel_init else {}))(x)
    if len(x.shape) > 2:
        x = keras.layers.Flatten(name="flatten")(x)
    return obs, x


def dense_initializers(layer_init: str, fan_in: int) -> dict:
    """Dense kwargs of a layer init scheme:
    glorot  Keras' default: kernel U(+-sqrt(6 / (fan_in + fan_out))), bias 0
    torch   PyTorch's nn.Linear default (SB3's DQN, whose Q-network keeps it): kernel and bias U(+-1/sqrt(fan_in))
    """
    if layer_init == "glorot":
        return {}
    bound = 1.0 / np.sqrt(fan_in)
    # VarianceScaling(1/3, fan_in, uniform) draws U(+-sqrt(3 * (1/3) / fan_in)) = U(+-1/sqrt(fan_in)).
    return {"kernel_initializer": keras.initializers.VarianceScaling(1.0 / 3.0, "fan_in", "uniform"),
            "bias_initializer": keras.initializers.RandomUniform(-bound, bound)}


def mlp_torso(inputs, hidden_sizes: Sequence[int], activation: str, name: str = "torso", layer_init: str = "glorot"):
    x = inputs
    for i, units in enumerate(hidden_sizes):
        x = keras.layers.Dense(units, activation=activation, name=f"{name}_{i}",
                               **dense_initializers(layer_init, x.shape[-1]))(x)
    return x


def q_network(obs_shape: Sequence[int], num_actions: int, hidden_sizes: Sequence[int],
              dueling: bool = False, name: str = "q_network", layer_init: str = "glorot",
              obs_dtype: str = "float32", torso: str = "mlp") -> keras.Model:
    """obs [B, *obs_shape] -> Q-values [B, num_actions], always float32 (also under a mixed precision policy).
    torso: a resolved one (resolved_torso)."""
    obs, x = observation_input(obs_shape, obs_dtype, torso, lambda fan_in: dense_initializers(layer_init, fan_in))
    x = mlp_torso(x, hidden_sizes, "relu", layer_init=layer_init)
    head = dense_initializers(layer_init, x.shape[-1])
    if dueling:
        # Wang et al. 2016, eq. 9: subtracting the mean advantage makes V and A identifiable.
        value = keras.layers.Dense(1, name="value_head", dtype="float32", **head)(x)  # [B, 1]
        advantage = keras.layers.Dense(num_actions, name="advantage_head", dtype="float32", **head)(x)  # [B, A]
        q = value + advantage - keras.ops.mean(advantage, axis=-1, keepdims=True)
    else:
        q = keras.layers.Dense(num_actions, name="q_head", dtype="float32", **head)(x)
    return keras.Model(obs, q, name=name)


def acts_in_numpy(model: keras.Model) -> bool:
    """Whether the NumPy mirrors can run `model`: Dense layers only (no convolutions)."""
    return not any(isinstance(layer, keras.layers.Conv2D) for layer in model.layers)


def numpy_input(obs: np.ndarray) -> np.ndarray:
    """obs [N, ...] -> [N, features] float32, as the network's input layers make it (uint8 scaled to [0, 1])."""
    x = obs.reshape(obs.shape[0], -1)
    return x.astype(np.float32) * np.float32(1.0 / 255.0) if x.dtype == np.uint8 else x


class GraphForward:
    """The forward pass of a live Keras model, one TF call per batch, as the NumPy mirrors' stand-in for models
    with convolutions. It reads the learner's variables: `update` has nothing to copy."""

    def __init__(self, model: keras.Model):
        spec = tf.TensorSpec([None, *model.inputs[0].shape[1:]], model.inputs[0].dtype)
        self._forward = tf.function(lambda obs: model(obs), input_signature=[spec]).get_concrete_function()

    def update(self, values: Sequence[np.ndarray]) -> None:
        del values

    def __call__(self, obs: np.ndarray):
        out = self._forward(tf.constant(obs))
        return tuple(o.numpy() for o in out) if isinstance(out, (tuple, list)) else out.numpy()

    def value(self, obs: np.ndarray) -> np.ndarray:
        """An actor-critic model's V(obs) [N]."""
        return self(obs)[1]


def acting_network(model: keras.Model, numpy_mirror):
    """numpy_mirror(model) (NumpyMLP, NumpyActorCritic) when the model has no convolutions, else GraphForward."""
    return numpy_mirror(model) if acts_in_numpy(model) else GraphForward(model)


def acting_variables(model: keras.Model) -> list:
    """What a train call returns for the actor: the trainable variables its NumPy mirror copies, none for a
    model the actor calls live (GraphForward)."""
    return list(model.trainable_variables) if acts_in_numpy(model) else []


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
        x = numpy_input(obs)
        for name in self._torso:
            x = self._activation(self._dense(x, name))
        if self._dueling:
            value, advantage = self._dense(x, "value_head"), self._dense(x, "advantage_head")
            return value + advantage - advantage.mean(axis=-1, keepdims=True)
        return self._dense(x, "q_head")


class AppendLogStd(keras.layers.Layer):
    """mean [B, D] -> [mean, log_std] [B, 2D]: a Gaussian policy's state-independent log std, one trainable
    variable (initialized to log_std_init: 0, a standard deviation of 1, as SB3)."""

    def __init__(self, size: int, log_std_init: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.size, self.log_std_init = size, log_std_init

    def build(self, input_shape):
        self.log_std = self.add_weight(shape=(self.size,), name="log_std",
                                       initializer=keras.initializers.Constant(self.log_std_init))

    def call(self, mean):
        return keras.ops.concatenate([mean, keras.ops.broadcast_to(self.log_std, keras.ops.shape(mean))], axis=-1)


def actor_critic_network(obs_shape: Sequence[int], num_policy_params: int, hidden_sizes: Sequence[int],
                         activation: str = "tanh", shared_torso: bool = False, gaussian: bool = False,
                         name: str = "actor_critic", obs_dtype: str = "float32", torso: str = "mlp") -> keras.Model:
    """obs [B, *obs_shape] -> (policy params [B, num_policy_params], value [B]), both float32 under every policy.

    The policy params are whatever the policy head reads (the logits [B, A] of a
    categorical head; with `gaussian`, the mean [B, D] and a state-independent log std,
    num_policy_params = 2D). With `shared_torso` one MLP ("torso_i") feeds both heads;
    otherwise the policy and the value have their own ("policy_torso_i",
    "value_torso_i"), as SB3's default `net_arch=dict(pi=[64, 64], vf=[64, 64])`.

    A CNN torso (torso, resolved) is always shared by both heads, as in SB3's CnnPolicy; the Dense layers
    after it follow shared_torso.

    Initialization as in OpenAI baselines / SB3 (`ortho_init=True`): orthogonal
    kernels with gain sqrt(2) in the torsos, 0.01 for the policy head (a near-uniform
    first policy) and 1 for the value head; zero biases.
    """
    obs, x = observation_input(obs_shape, obs_dtype, torso,
                               lambda fan_in: {"kernel_initializer": keras.initializers.Orthogonal(gain=np.sqrt(2.0))})

    def torso(inputs, prefix):
        h = inputs
        for i, units in enumerate(hidden_sizes):
            h = keras.layers.Dense(units, activation=activation, name=f"{prefix}_{i}",
                                   kernel_initializer=keras.initializers.Orthogonal(gain=np.sqrt(2.0)))(h)
        return h

    if shared_torso:
        policy_latent = value_latent = torso(x, "torso")
    else:
        policy_latent, value_latent = torso(x, "policy_torso"), torso(x, "value_torso")
    outputs = num_policy_params // 2 if gaussian else num_policy_params
    policy_params = keras.layers.Dense(outputs, name="policy_head", dtype="float32",
                                       kernel_initializer=keras.initializers.Orthogonal(gain=0.01))(policy_latent)
    if gaussian:
        policy_params = AppendLogStd(outputs, name="log_std", dtype="float32")(policy_params)
    value = keras.layers.Dense(1, name="value_head", dtype="float32",
                               kernel_initializer=keras.initializers.Orthogonal(gain=1.0))(value_latent)
    return keras.Model(obs, (policy_params, keras.ops.squeeze(value, axis=-1)), name=name)


class NumpyActorCritic:
    """Forward pass of an `actor_critic_network` in NumPy: obs [N, ...] -> (policy params [N, P], value [N]).

    Like `NumpyMLP`, it reads weights by variable path, so `update(values)` takes
    them in the model's `trainable_variables` order, as the learner returns them.
    """

    def __init__(self, model: keras.Model, activation: str = "tanh"):
        self._paths = [v.path.split("/", 1)[-1] if v.path.startswith(model.name + "/") else v.path
                       for v in model.trainable_variables]
        layer_names = {p.split("/")[0] for p in self._paths}

        def torso(prefix):
            names = [n for n in layer_names if n.startswith(prefix + "_")]
            return sorted(names, key=lambda n: int(n.rsplit("_", 1)[1]))

        self._shared = torso("torso")
        self._policy_torso = torso("policy_torso")
        self._value_torso = torso("value_torso")
        self._activation = _ACTIVATIONS[activation]
        self.update([np.asarray(v.numpy()) for v in model.trainable_variables])

    def update(self, values: Sequence[np.ndarray]) -> None:
        if len(values) != len(self._paths):
            raise ValueError(f"expected {len(self._paths)} weight arrays, got {len(values)}")
        w = {p: np.asarray(v, dtype=np.float32) for p, v in zip(self._paths, values)}

        def layers(names):  # [(kernel, bias)], looked up once per update rather than per forward pass
            return [(w[f"{n}/kernel"], w[f"{n}/bias"]) for n in names]

        self._shared_layers = layers(self._shared)
        self._policy_layers = layers(self._policy_torso)
        self._value_layers = layers(self._value_torso)
        self._policy_head = layers(["policy_head"])[0]
        self._value_head = layers(["value_head"])[0]
        self._log_std = w.get("log_std/log_std")  # a Gaussian policy's, None for a categorical one

    def _mlp(self, x, layers):
        for kernel, bias in layers:
            x = self._activation(x @ kernel + bias)
        return x

    def __call__(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = self._mlp(numpy_input(obs), self._shared_layers)
        policy_latent = self._mlp(x, self._policy_layers)
        value_latent = self._mlp(x, self._value_layers)
        (pk, pb), (vk, vb) = self._policy_head, self._value_head
        policy = policy_latent @ pk + pb
        if self._log_std is not None:
            policy = np.concatenate([policy, np.broadcast_to(self._log_std, policy.shape)], axis=-1)
        return policy, (value_latent @ vk + vb)[:, 0]

    def value(self, obs: np.ndarray) -> np.ndarray:
        """V(obs) [N] alone; skips the policy torso when it is separate."""
        x = self._mlp(numpy_input(obs), self._shared_layers)
        vk, vb = self._value_head
        return (self._mlp(x, self._value_layers) @ vk + vb)[:, 0]

"""The Keras 3 building blocks every agent's networks share (observation inputs, torsos, initializers), and
how an actor runs them. Each agent family builds its own networks from these (tfrl.agents.<family>.networks).

Acting happens once per vector step; a TF call has a fixed overhead many times
larger than a NumPy forward pass of a small MLP (docs/benchmarks.md). So the
actor runs a NumPy mirror (tfrl.models.numpy_networks, read from the model's layers), refreshed
with the learner's weights after every train call, and the Keras model stays the
single definition that is trained and exported.
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

import re
from typing import Sequence

import keras
import numpy as np
import tensorflow as tf

from tfrl import config as config_lib
from tfrl.envs.observations import ObsSpec
from tfrl.models.policy_inputs import MASK_KEY, NO_LEGAL_ACTION, Field

LAYER_INITS = ("glorot", "torch")


def observation_input(obs: Sequence[int] | ObsSpec, obs_dtype: str, torso: str, kernel_init=None):
    """(the Keras Input(s), the features they give). obs: the observations' shape, or their ObsSpec.

    One array: uint8 scaled to [0, 1], then the CNN's convolutions (torso, resolved by config.field_torsos) and a
    flatten, or a flatten alone (MLP). Dict observations: one Input per field the networks read (named by its
    key), each read that way (a CNN for image fields), their features concatenated in the fields' order.
    kernel_init(fan_in): the convolutions' initializer kwargs.
    """
    spec = obs if isinstance(obs, ObsSpec) else ObsSpec.flat(obs, obs_dtype)
    torsos = config_lib.field_torsos(torso, spec)
    if not spec.structured:
        field = spec.fields[0]
        return _field_features(field, torsos[field.key], kernel_init, prefix="")
    inputs, features = {}, []
    for field in spec.inputs:
        inputs[field.key], x = _field_features(field, torsos[field.key], kernel_init,
                                               prefix=f"{layer_name(field.key)}_")
        features.append(x)
    return inputs, keras.layers.Concatenate(name="features")(features) if len(features) > 1 else features[0]


def _field_features(field: Field, torso: str, kernel_init, prefix: str):
    obs = keras.Input(shape=field.shape, name=field.key, dtype=field.dtype)
    x = keras.layers.Rescaling(1.0 / 255.0, name=f"{prefix}scale")(obs) if field.dtype == "uint8" else obs
    for i, (filters, size, stride) in enumerate(config_lib.CONVOLUTIONS.get(torso, ())):
        fan_in = size * size * x.shape[-1]
        x = keras.layers.Conv2D(filters, size, stride, activation="relu", name=f"{prefix}conv_{i}",
                                **(kernel_init(fan_in) if kernel_init else {}))(x)
    if len(x.shape) > 2 or prefix:
        x = keras.layers.Flatten(name=f"{prefix}flatten")(x)
    return obs, x


def layer_name(key: str) -> str:
    """A field's key as part of a layer's name (Keras allows no "/" there)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", key)


def dense_initializers(layer_init: str, fan_in: int, gain: float = 1.0) -> dict:
    """Dense kwargs of a layer init scheme:
    glorot      Keras' default: kernel U(+-sqrt(6 / (fan_in + fan_out))), bias 0
    orthogonal  OpenAI baselines' and SB3's ortho_init: an orthogonal kernel scaled by `gain`, bias 0
    torch       PyTorch's nn.Linear default (SB3's DQN, whose Q-network keeps it, and SB3's actor-critics with
                ortho_init=False): kernel and bias U(+-1/sqrt(fan_in))
    """
    if layer_init == "glorot":
        return {}
    if layer_init == "orthogonal":
        return {"kernel_initializer": keras.initializers.Orthogonal(gain=gain)}
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


def acts_in_numpy(model: keras.Model) -> bool:
    """Whether the NumPy mirrors can run `model`: Dense layers only (no convolutions)."""
    return not any(isinstance(layer, keras.layers.Conv2D) for layer in model.layers)


def model_inputs(model: keras.Model, obs: np.ndarray):
    """What `model` takes for a batch in tfrl's form: the array, or {key: field} of a structured batch."""
    if isinstance(model.input, dict):
        return {key: obs[key] for key in model.input}
    return obs


def network_input(obs):
    """What a network reads of a batch of observations: the tensor, or a Dict observation's fields but the mask."""
    if isinstance(obs, dict):
        return {key: value for key, value in obs.items() if key != MASK_KEY}
    return obs


def legal_mask(obs):
    """bool [..., A]: a Dict observation's action mask (1 = legal), None for observations without one."""
    if isinstance(obs, dict) and MASK_KEY in obs:
        return tf.cast(obs[MASK_KEY], tf.bool)
    return None


def greedy_scores(obs, scores, part_sizes=()):
    """(scores [B, A] with the mask's illegal entries at float32's lowest, the export's extra outputs).

    The extra outputs: {NO_LEGAL_ACTION: bool [B]}, true where the mask allows no action (for a multi-part action,
    part_sizes: in some part). Such a row has no right answer: its "action" is whatever argmax gives (0), and the
    loaders and tfrl-serve refuse the request; TF Serving returns it with this flag. {} without a mask.
    """
    legal = legal_mask(obs)
    if legal is None:
        return scores, {}
    parts = tf.split(legal, list(part_sizes), axis=-1) if part_sizes else [legal]
    none_legal = tf.reduce_any(tf.stack([tf.logical_not(tf.reduce_any(part, axis=-1)) for part in parts], -1), -1)
    return tf.where(legal, scores, tf.float32.min), {NO_LEGAL_ACTION: none_legal}


def rows_at(obs, index):
    """obs[index] of a tensor, or of each field of a Dict observation."""
    return tf.nest.map_structure(lambda tensor: tensor[index], obs)


def merge_leading(obs):
    """[K, B, ...] -> [K * B, ...], of a tensor or of each field of a Dict observation."""
    return tf.nest.map_structure(lambda tensor: tf.reshape(tensor, [-1, *tensor.shape[2:]]), obs)


class GraphForward:
    """The forward pass of a live Keras model, one TF call per batch, as the NumPy mirrors' stand-in for models
    with convolutions. It reads the learner's variables: `update` has nothing to copy."""

    def __init__(self, model: keras.Model):
        self._model = model
        spec = tf.nest.map_structure(lambda x: tf.TensorSpec([None, *x.shape[1:]], x.dtype), model.input)
        self._forward = tf.function(lambda obs: model(obs), input_signature=[spec]).get_concrete_function()

    def update(self, values: Sequence[np.ndarray]) -> None:
        del values

    def __call__(self, obs: np.ndarray):
        out = self._forward(tf.nest.map_structure(tf.constant, model_inputs(self._model, obs)))
        return tuple(o.numpy() for o in out) if isinstance(out, (tuple, list)) else out.numpy()

    def value(self, obs: np.ndarray) -> np.ndarray:
        """An actor-critic model's V(obs) [N]."""
        return self(obs)[1]


def acting_network(model: keras.Model, numpy_mirror):
    """numpy_mirror(model) (NumpyQNetwork, NumpyActorCritic) when the model has no convolutions, else GraphForward."""
    return numpy_mirror(model) if acts_in_numpy(model) else GraphForward(model)


def acting_variables(model: keras.Model) -> list:
    """What a train call returns for the actor: the trainable variables its NumPy mirror copies, none for a
    model the actor calls live (GraphForward)."""
    return list(model.trainable_variables) if acts_in_numpy(model) else []

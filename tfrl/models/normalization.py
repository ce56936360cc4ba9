"""Running normalization of observations and rewards, after Stable-Baselines3's VecNormalize.

    observations  o' = clip((o - mean) / sqrt(var + 1e-8), -clip, clip), with the running mean and variance of
                  every observation the training envs produced (each counted once, before it is normalized).
                  Evaluation and export use the statistics frozen as they are.
    rewards       r' = clip(r / sqrt(var(G) + 1e-8), -clip, clip), where G is each env's running discounted
                  return G <- gamma G + r (reset at an episode's end): the scale of the returns, not of single
                  rewards, so the value targets come out near unit scale. Only training sees r'.

The statistics are updated in NumPy while the agent collects (no TF call per env step). The observation
statistics are also kept in TF variables (ObservationNormalization, a Keras layer) that the learner checkpoints
and the export runs in front of the policy, so a served policy takes raw observations. One object owns both:
the learner's ObservationNormalizer (`make`), which the agent updates while it collects and which copies the
NumPy statistics into the layer before each checkpoint and evaluation (sync()) and back after a restore (load()).
The NumPy parts (statistics, the snapshot a rollout actor counts with, the reward scaler) are tfrl.models.running_stats,
re-exported here.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import keras
import numpy as np

from tfrl.envs.observations import ObsSpec
from tfrl.models.running_stats import (EPSILON, INITIAL_COUNT, CountingNormalizer, FieldNormalizers,
                                       NoNormalization, RunningMeanStd, normalized)


class ObservationNormalization(keras.layers.Layer):
    """The frozen observation normalization in TF: float32 [B, *obs_shape] -> the normalized float32 batch.

    Its three non-trainable weights (mean, var: float64 [*obs_shape]; count: float64 []) are what checkpoints
    and exports hold.
    """

    def __init__(self, obs_shape: Sequence[int], clip: float, name: str = "obs_normalization", **kwargs):
        super().__init__(name=name, dtype="float32", **kwargs)
        self.clip = float(clip)
        self.mean = self.add_weight(shape=tuple(obs_shape), initializer="zeros", trainable=False, name="mean",
                                    dtype="float64")
        self.var = self.add_weight(shape=tuple(obs_shape), initializer="ones", trainable=False, name="var",
                                   dtype="float64")
        self.count = self.add_weight(shape=(), initializer=keras.initializers.Constant(INITIAL_COUNT),
                                     trainable=False, name="count", dtype="float64")
        self.built = True

    def call(self, obs):
        ops = keras.ops
        scale = ops.cast(ops.sqrt(self.var + EPSILON), "float32")
        normalized = (ops.cast(obs, "float32") - ops.cast(self.mean, "float32")) / scale
        return ops.clip(normalized, -self.clip, self.clip)


class DictObservationNormalization(keras.layers.Layer):
    """Dict observations' normalization in TF: {key: batch} -> the same with each float vector field normalized by
    its own ObservationNormalization (images and the action mask pass as they are)."""

    def __init__(self, fields: Mapping[str, Sequence[int]], clip: float, **kwargs):
        super().__init__(name="obs_normalization", dtype="float32", **kwargs)
        self.clip = float(clip)
        self.fields = {key: ObservationNormalization(shape, clip, name=f"obs_normalization_{_name(key)}")
                       for key, shape in fields.items()}
        self.built = True

    def call(self, obs):
        return {key: self.fields[key](value) if key in self.fields else value for key, value in obs.items()}


def _name(key: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in key)


class ObservationNormalizer:
    """The running observation statistics an agent updates and applies, mirrored into the ObservationNormalization
    layer it owns (`layer`: what the learner checkpoints and the export runs)."""

    def __init__(self, layer: ObservationNormalization):
        self.layer = layer
        self.stats = RunningMeanStd(tuple(layer.mean.shape))
        self.load()

    def observe(self, obs: np.ndarray) -> np.ndarray:
        """Adds the batch [N, *obs_shape] to the statistics, then returns it normalized (float32)."""
        self.stats.update(obs)
        return self(obs)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """The batch normalized with the statistics as they are (no update)."""
        return normalized(obs, self.stats, self.layer.clip)

    def snapshot(self) -> CountingNormalizer:
        """A NumPy copy of the statistics to send where the envs are (a rollout actor)."""
        return CountingNormalizer(self.stats.copy(), self.layer.clip)

    def absorb(self, counted: RunningMeanStd) -> None:
        """Takes in the observations a snapshot counted (CountingNormalizer.counted)."""
        self.stats.merge(counted.mean, counted.var, counted.count)

    def sync(self) -> None:
        """Copies the NumPy statistics into the layer's variables (before a checkpoint, an evaluation)."""
        self.layer.mean.assign(self.stats.mean)
        self.layer.var.assign(self.stats.var)
        self.layer.count.assign(self.stats.count)

    def load(self) -> None:
        """Takes the statistics from the layer's variables (after a restore)."""
        self.stats.mean = np.array(self.layer.mean.numpy(), np.float64)
        self.stats.var = np.array(self.layer.var.numpy(), np.float64)
        self.stats.count = float(self.layer.count.numpy())


class DictObservationNormalizer(FieldNormalizers):
    """ObservationNormalizer of Dict observations: one per float vector field, over structured batches."""

    def __init__(self, layer: DictObservationNormalization):
        self.layer = layer
        super().__init__({key: ObservationNormalizer(sub) for key, sub in layer.fields.items()})


def make(config, observations: ObsSpec | Sequence[int]):
    """A learner's normalizer: with config.normalize_observations, its layer and statistics; else NoNormalization."""
    layer = make_layer(config, observations)
    if layer is None:
        return NoNormalization()
    if isinstance(layer, DictObservationNormalization):
        return DictObservationNormalizer(layer)
    return ObservationNormalizer(layer)


def make_layer(config, observations: ObsSpec | Sequence[int]):
    """The layer when config.normalize_observations, else None (tfrl.agents refuses it for images): one
    ObservationNormalization for one array, a DictObservationNormalization of the float vector fields of Dict
    observations."""
    if not config.normalize_observations:
        return None
    spec = observations if isinstance(observations, ObsSpec) else ObsSpec.flat(observations)
    if not spec.structured:
        return ObservationNormalization(spec.fields[0].shape, config.observation_clip)
    vectors = {field.key: field.shape for field in spec.inputs if field.dtype == "float32"}
    return DictObservationNormalization(vectors, config.observation_clip)


CHECKPOINT_KEY = "obs_normalization"  # the layer's name among a learner's and a serving policy's checkpoint items


def checkpoint_items(layer: ObservationNormalization | None) -> dict:
    """{CHECKPOINT_KEY: layer}, or {} without normalization."""
    return {} if layer is None else {CHECKPOINT_KEY: layer}


def in_front(layer: ObservationNormalization | None, outputs):
    """`outputs` (observation, *others -> dict of tensors) taking raw observations through `layer` first, if any;
    the other inputs (a recurrent policy's state) pass as they are."""
    if layer is None:
        return outputs
    return lambda observation, *others: outputs(layer(observation), *others)

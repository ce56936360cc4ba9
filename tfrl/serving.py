"""The serving side: a SavedModel written by tfrl.export, as a NumPy policy. Needs no agent code.

A policy here maps observations [N, *obs_shape] (NumPy) to actions [N] through
the exported `serving_default` signature, exactly what TF Serving would run. A SavedModel whose variables
hold a NaN or Inf is refused at load: its every answer would be garbage.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf

from tfrl import export, numerics
from tfrl.errors import UsageError

Policy = Callable[[np.ndarray], np.ndarray]


Outputs = Callable[[np.ndarray], dict]  # obs [N, *obs_shape] -> {"action": [N], ...} as NumPy


@dataclasses.dataclass(frozen=True)
class ServedPolicy:
    policy: Policy  # obs [N, *obs_shape] -> actions [N]
    outputs: Outputs  # every output of the signature
    obs_shape: tuple[int, ...]  # of one observation, as the signature takes it
    obs_dtype: str  # of the observations, as the signature takes them: float32, or uint8 for images
    metadata: dict | None  # tfrl_metadata.json, None for a SavedModel made elsewhere
    saved_model: object  # the loaded object: a signature alone does not keep its variables alive


def numpy_outputs(outputs: Callable[..., Mapping[str, tf.Tensor]], input_name: str | None = None,
                  obs_dtype: tf.DType = tf.float32) -> Outputs:
    """obs -> outputs(obs) as NumPy; `input_name` for a signature, which takes keyword arguments."""

    def numpy_fn(obs: np.ndarray) -> dict:
        tensor = tf.constant(obs, obs_dtype)
        result = outputs(**{input_name: tensor}) if input_name else outputs(tensor)
        return {name: value.numpy() for name, value in result.items()}

    return numpy_fn


def numpy_policy(outputs: Callable[..., Mapping[str, tf.Tensor]], input_name: str | None = None,
                 obs_dtype: tf.DType = tf.float32) -> Policy:
    """obs -> outputs(obs)["action"] as NumPy; `input_name` for a signature, which takes keyword arguments."""
    numpy_fn = numpy_outputs(outputs, input_name, obs_dtype)
    return lambda obs: numpy_fn(obs)["action"]


def traced_outputs(policy: export.ServingPolicy, obs_shape: Sequence[int]) -> Outputs:
    """numpy_outputs of a ServingPolicy's outputs, traced once as a tf.function."""
    spec = tf.TensorSpec([None, *obs_shape], policy.obs_dtype)
    return numpy_outputs(tf.function(policy.outputs, input_signature=[spec]), obs_dtype=policy.obs_dtype)


def traced_policy(policy: export.ServingPolicy, obs_shape: Sequence[int]) -> Policy:
    """numpy_policy of a ServingPolicy's outputs, traced once as a tf.function."""
    traced = traced_outputs(policy, obs_shape)
    return lambda obs: traced(obs)["action"]


def non_finite_variable(loaded) -> str | None:
    """The name of a variable of a tf.saved_model.load result that holds NaN or Inf, None if all are finite.

    Walks every object the SavedModel tracks, so it covers SavedModels made elsewhere too (tfrl.export refuses to
    write such a one, but an older tfrl did, or the files were changed)."""
    variables = {id(t): t for t in tf.train.TrackableView(loaded).descendants() if isinstance(t, tf.Variable)}
    return numerics.first_non_finite((v.name.removesuffix(":0"), v.numpy()) for v in variables.values())


def load(saved_model_dir: pathlib.Path) -> ServedPolicy:
    """The greedy policy of an exported version directory (.../<model_name>/<version>)."""
    path = pathlib.Path(saved_model_dir)
    if not path.is_dir() or not tf.saved_model.contains_saved_model(str(path)):
        raise UsageError(f"{path} is not a SavedModel directory (expected .../<model_name>/<version>)")
    try:
        loaded = tf.saved_model.load(str(path))
    except Exception as e:  # noqa: BLE001 - a damaged saved_model.pb or variables file: protobuf, tf.errors, OSError
        reason = (getattr(e, "message", None) or str(e) or type(e).__name__).strip().splitlines()[0]
        raise UsageError(f"{path}: cannot load the SavedModel, is it truncated or damaged? ({reason})") from None
    bad = non_finite_variable(loaded)
    if bad is not None:
        raise UsageError(f"{path}: variable {bad!r} holds NaN or Inf; the policy would answer garbage "
                         "(export it again from a good checkpoint)")
    if export.SIGNATURE not in loaded.signatures:
        raise UsageError(f"{path} has no {export.SIGNATURE!r} signature")
    signature = loaded.signatures[export.SIGNATURE]
    if "action" not in signature.structured_outputs:
        raise UsageError(f"{path}: signature {export.SIGNATURE!r} has no 'action' output")
    input_spec = signature.structured_input_signature[1].get(export.INPUT_NAME)
    if input_spec is None:
        raise UsageError(f"{path}: signature {export.SIGNATURE!r} has no {export.INPUT_NAME!r} input")
    return ServedPolicy(policy=numpy_policy(signature, export.INPUT_NAME, input_spec.dtype),
                        outputs=numpy_outputs(signature, export.INPUT_NAME, input_spec.dtype),
                        obs_shape=tuple(input_spec.shape[1:]), obs_dtype=input_spec.dtype.name,
                        metadata=export.read_metadata(path), saved_model=loaded)

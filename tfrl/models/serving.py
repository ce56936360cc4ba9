"""The serving side: a SavedModel written by tfrl.models.export, as a NumPy policy. Needs no agent code.

A policy here maps a batch of observations (NumPy: [N, *obs_shape]; for Dict observations a structured array or
{key: array}) to actions through the exported `serving_default` signature, exactly what TF Serving would run. A SavedModel whose variables
hold a NaN or Inf is refused at load: its every answer would be garbage.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf

from tfrl.envs.observations import ObsSpec
from tfrl.errors import UsageError
from tfrl.models import export, policy_inputs
from tfrl.models.numerics import non_finite_variable
from tfrl.models.policy_inputs import Field
from tfrl.models.policy_memory import StatefulPolicy

Policy = Callable[[np.ndarray], np.ndarray]


Outputs = Callable[[np.ndarray], dict]  # obs [N, *obs_shape] -> {"action": [N], ...} as NumPy


@dataclasses.dataclass(frozen=True)
class SavedModelPolicy:
    policy: Policy  # a batch of observations -> actions [N]
    outputs: Outputs  # every output of the signature
    observations: ObsSpec  # what the signature takes (Dict observations: one input per field)
    metadata: dict | None  # tfrl_metadata.json, None for a SavedModel made elsewhere
    saved_model: object  # the loaded object: a signature alone does not keep its variables alive
    state_size: int = 0  # a policy with memory: outputs(obs, state) and a StatefulPolicy as `policy`

    @property
    def obs_shape(self) -> tuple[int, ...]:
        """One observation's shape (() for Dict observations: their fields have theirs)."""
        return self.observations.row_shape

    @property
    def obs_dtype(self) -> str:
        return self.observations.numpy_dtype.name if not self.observations.structured else "structured"


def feed(observations: ObsSpec, obs) -> tf.Tensor | dict[str, tf.Tensor]:
    """A batch (an array; for Dict observations a structured array or {key: array}) as the signature's tensors."""
    def tensor(value, dtype: str):
        return tf.constant(np.asarray(value).astype(dtype, copy=False))  # numbers to bool too (masks), which TF won't

    if not observations.structured:
        return tensor(obs, observations.fields[0].dtype)
    return {field.key: tensor(obs[field.key], field.dtype) for field in observations.fields}


def numpy_outputs(outputs: Callable[..., Mapping[str, tf.Tensor]], observations: ObsSpec,
                  signature: bool = False) -> Outputs:
    """obs (and, for a policy with memory, state [N, S]) -> outputs(obs[, state]) as NumPy. signature: `outputs` is
    a loaded SavedModel's signature, which takes keyword arguments named by the inputs (policy_inputs.input_name of a Dict
    observation's keys, policy_inputs.STATE_NAME)."""

    def numpy_fn(obs, *state) -> dict:
        tensors = feed(observations, obs)
        state = [tf.constant(value, tf.float32) for value in state]
        if signature:
            named = tensors if isinstance(tensors, dict) else {export.INPUT_NAME: tensors}
            named = {policy_inputs.input_name(key): value for key, value in named.items()}
            result = outputs(**named, **({policy_inputs.STATE_NAME: state[0]} if state else {}))
        else:
            result = outputs(tensors, *state)
        return {name: value.numpy() for name, value in result.items()}

    return numpy_fn


def acting(outputs: Outputs, state_size: int, action_container: str | None = None) -> Policy:
    """The actions of `outputs` as the env takes them (policy_inputs.env_actions): a plain function, or for a
    policy with memory a StatefulPolicy carrying "state"."""
    if not state_size:
        return lambda obs: policy_inputs.env_actions(outputs(obs), action_container)

    def step(obs, state):
        result = outputs(obs, state)
        return policy_inputs.env_actions(result, action_container), result[policy_inputs.STATE_NAME]

    return StatefulPolicy(step, state_size)


def traced_outputs(policy: export.ServingPolicy, observations: ObsSpec | Sequence[int]) -> Outputs:
    """numpy_outputs of a ServingPolicy's outputs, traced once as a tf.function. observations: their ObsSpec, or
    one array's shape."""
    if not isinstance(observations, ObsSpec):
        observations = ObsSpec.flat(observations, policy.obs_dtype.name)
    signature = export.signature_inputs(policy, observations)
    return numpy_outputs(tf.function(policy.outputs, input_signature=signature), observations)


def traced_policy(policy: export.ServingPolicy, observations: ObsSpec | Sequence[int]) -> Policy:
    """The actions of traced_outputs (a StatefulPolicy for a policy with memory)."""
    return acting(traced_outputs(policy, observations), policy.state_size, policy.action_container or None)


def load(saved_model_dir: pathlib.Path) -> SavedModelPolicy:
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
    metadata = export.read_metadata(path)
    inputs = dict(signature.structured_input_signature[1])
    state_size = _state_size(path, inputs, signature.structured_outputs, metadata)
    if state_size:
        del inputs[policy_inputs.STATE_NAME]
    observations = _signature_observations(path, inputs, metadata)
    outputs = numpy_outputs(signature, observations, signature=True)
    container = policy_inputs.action_container(metadata)
    return SavedModelPolicy(policy=acting(outputs, state_size, container), outputs=outputs, observations=observations,
                        metadata=metadata, saved_model=loaded, state_size=state_size)


def _state_size(path: pathlib.Path, inputs: Mapping[str, tf.TensorSpec], outputs: Mapping, metadata: dict | None) -> int:
    """The state size of a policy with memory (tfrl's metadata says so, or a float32 "state" input [None, S] that
    is also an output), 0 for one without."""
    memory = (metadata or {}).get("memory")
    spec = inputs.get(policy_inputs.STATE_NAME)
    if memory is None and (spec is None or policy_inputs.STATE_NAME not in outputs or spec.dtype != tf.float32
                           or spec.shape.rank != 2):
        return 0
    if spec is None or spec.shape.rank != 2 or spec.shape[1] is None:
        raise UsageError(f"{path}: a policy with memory whose signature takes no {policy_inputs.STATE_NAME!r} [None, S]")
    return int(spec.shape[1])


def _signature_observations(path: pathlib.Path, inputs: Mapping[str, tf.TensorSpec], metadata: dict | None) -> ObsSpec:
    """The observations a signature takes: one "observation" tensor, or one per field (Dict observations, named
    by policy_inputs.input_name of their keys; tfrl's metadata keeps the keys themselves)."""
    fields = ((metadata or {}).get("observation") or {}).get("fields")
    if fields:
        spec = ObsSpec.from_json(fields)
        if {policy_inputs.input_name(field.key) for field in spec.fields} == set(inputs):
            return spec
    if set(inputs) == {export.INPUT_NAME}:
        spec = inputs[export.INPUT_NAME]
        return ObsSpec.flat(tuple(spec.shape[1:]), spec.dtype.name)
    if not inputs or any(spec.shape.rank is None or spec.shape.rank < 1 for spec in inputs.values()):
        raise UsageError(f"{path}: signature {export.SIGNATURE!r} takes no batch of observations "
                         f"({export.INPUT_NAME!r}, or one tensor per field)")
    return ObsSpec(tuple(Field(name, tuple(spec.shape[1:]), spec.dtype.name) for name, spec in sorted(inputs.items())),
                   structured=True)

"""SavedModel export in TF Serving's layout: <base_path>/<model_name>/<version>/, greedy policy only.

    saved_models/dqn-CartPole-v1/
        1/  saved_model.pb  variables/  assets.extra/tfrl_metadata.json
        2/  ...

Versions are integers (TF Serving loads the highest by default); a new export
gets max(existing) + 1, starting at 1. The SavedModel is written to a hidden
temporary directory beside the versions (a non-numeric name, which TF Serving
ignores) and renamed into place, so a version directory is complete or absent. A policy whose variables
hold a NaN or Inf is refused (UsageError) before anything is written.

The signature `serving_default` takes one tensor "observation" [None, *obs_shape],
float32 (uint8 for image observations, which the network scales itself), or for
Dict observations one tensor per field named by its key (input_signature), the
action mask included; it returns the agent's outputs, e.g. {"action": int64 [B],
"q_values": float32 [B, A]} for DQN (an action mask makes the action a legal one). Exploration is never exported: an agent
exports its greedy policy. The SavedModel needs TensorFlow only, not tfrl. A policy with memory (lstm_units)
also takes "state" float32 [None, state_size] and returns the next "state": the client sends zeros at an
episode's first step and the returned state at every later one (the metadata's "memory" gives the size).

tfrl_metadata.json lives in the version's assets.extra/, where TF Serving keeps
extra files (e.g. warmup requests) and which it does not interpret: agent, env
id, observation shape/dtype, action space, the config, training env steps,
checkpoint number (null for a run's best policy, whose "best_policy" entry holds
the evaluation that selected it; tfrl.run.best_policy) and tfrl version.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import shutil
import uuid
from typing import Any, Callable, Mapping, Sequence

import keras
import tensorflow as tf

from tfrl.envs.observations import ObsSpec
from tfrl.errors import RunError, UsageError
from tfrl.models import numerics
from tfrl.models.policy_inputs import STATE_NAME, input_name

METADATA_FILE = "tfrl_metadata.json"
METADATA_DIR = "assets.extra"  # inside the version directory
SIGNATURE = "serving_default"
INPUT_NAME = "observation"


@dataclasses.dataclass(frozen=True)
class ServingPolicy:
    """What an agent exports: its Keras model and the greedy outputs computed from it.

    outputs: observation [B, *obs_shape] (obs_dtype) -> dict of named tensors, e.g.
      {"action": int64 [B], "q_values": [B, A]} or {"action", "logits", "value"}.
      It may use only the variables of `model` and `observation_normalization` (the ones tracked).
    checkpoint_items: the subset of the agent's training checkpoint trackables
      that holds `model`'s weights (e.g. {"online": q_network}), to load it from
      a training checkpoint.
    """

    model: keras.Model
    outputs: Callable[[tf.Tensor], Mapping[str, tf.Tensor]]
    checkpoint_items: Mapping[str, Any]
    observation_normalization: keras.layers.Layer | None = None  # tracked too: `outputs` runs it before `model`
    state_size: int = 0  # a policy with memory: outputs(observation, state [B, state_size]) also returns "state"
    action_container: str = ""  # a hybrid action's "Dict" or "Tuple": outputs returns each part as "action.<key>"

    @property
    def obs_dtype(self) -> tf.DType:
        """What the observation input takes, one array's: the model's (float32, or uint8 for images)."""
        return tf.as_dtype(self.model.inputs[0].dtype)


def version_numbers(model_dir: pathlib.Path) -> list[int]:
    """The integer version directories of <base_path>/<model_name>, ascending."""
    if not model_dir.is_dir():
        return []
    return sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isascii() and p.name.isdigit())


def input_signature(observations: ObsSpec | Sequence[int], obs_dtype: tf.DType = tf.float32):
    """The serving signature's input: one tensor "observation" [None, *obs_shape]; for Dict observations one
    tensor per field, named by its key ("." becomes "_": "arm.joints" is input "arm_joints"), the action mask's
    ("action_mask") included."""
    if not isinstance(observations, ObsSpec):
        return tf.TensorSpec([None, *observations], obs_dtype, name=INPUT_NAME)
    if not observations.structured:
        field = observations.fields[0]
        return tf.TensorSpec([None, *field.shape], field.dtype, name=INPUT_NAME)
    return {field.key: tf.TensorSpec([None, *field.shape], field.dtype, name=input_name(field.key))
            for field in observations.fields}


def signature_inputs(policy: ServingPolicy, observations: ObsSpec | Sequence[int]) -> list:
    """The serving signature's inputs, in the order `policy.outputs` takes them: the observation(s), and for a
    policy with memory its state "state" float32 [None, state_size] (zeros start an episode)."""
    inputs = [input_signature(observations, policy.obs_dtype)]
    if policy.state_size:
        inputs.append(tf.TensorSpec([None, policy.state_size], tf.float32, name=STATE_NAME))
    return inputs


def export_saved_model(policy: ServingPolicy, observations: ObsSpec | Sequence[int], base_path: pathlib.Path,
                       model_name: str, metadata: Mapping[str, Any],
                       finish: Callable[[pathlib.Path], Mapping[str, Any]] | None = None) -> pathlib.Path:
    """Writes the next version of <base_path>/<model_name> and returns its directory. finish(directory), if given,
    runs on the written SavedModel before the version is in place (tfrl.models.portable adds its files there); what it
    returns joins the metadata, and an error it raises leaves no version behind."""
    if not model_name or model_name in (".", "..") or "/" in model_name or os.sep in model_name:
        raise UsageError(f"model name must be a plain directory name, got {model_name!r}")
    model_dir = pathlib.Path(base_path) / model_name
    _check_finite_variables(policy, model_dir)
    try:
        model_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create the model directory {model_dir}: {e.strerror}") from None
    archive = keras.export.ExportArchive()
    archive.track(policy.model)
    if policy.observation_normalization is not None:
        archive.track(policy.observation_normalization)
    archive.add_endpoint(
        name=SIGNATURE,  # named so, write_out does not add a second alias of it
        fn=policy.outputs,
        input_signature=signature_inputs(policy, observations),
    )
    tmp_dir = model_dir / f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        try:
            archive.write_out(str(tmp_dir), verbose=False)
            metadata = {**metadata, **(finish(tmp_dir) if finish is not None else {})}
            (tmp_dir / METADATA_DIR).mkdir(exist_ok=True)
            (tmp_dir / METADATA_DIR / METADATA_FILE).write_text(json.dumps(dict(metadata), indent=2) + "\n")
        except (OSError, tf.errors.OpError) as e:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else getattr(e, "message", None) or str(e)
            raise RunError(f"cannot write the SavedModel under {model_dir} ({reason}); "
                           "no version directory was added") from None
        while True:
            version_dir = model_dir / str(max(version_numbers(model_dir), default=0) + 1)
            try:
                # rename(2) fails on an existing non-empty directory: another exporter took that
                # number between our listing and the rename; take the next one.
                os.rename(tmp_dir, version_dir)
                return version_dir
            except OSError:
                if not version_dir.is_dir():
                    raise
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp_dir)


def _check_finite_variables(policy: ServingPolicy, model_dir: pathlib.Path) -> None:
    """UsageError if a variable the SavedModel would hold is NaN or Inf: such a policy answers garbage (e.g. one
    action for every observation), and the input it came from (a checkpoint) is as unusable as a damaged one."""
    layers = [policy.model, policy.observation_normalization]
    bad = numerics.first_non_finite((v.path, v.numpy()) for layer in layers if layer is not None
                                   for v in layer.variables)
    if bad is not None:
        raise UsageError(f"refusing to export {model_dir}: variable {bad!r} holds NaN or Inf (the policy would answer "
                         "garbage); no version directory was added")


def read_metadata(saved_model_dir: pathlib.Path) -> dict | None:
    """The tfrl_metadata.json of an exported version directory, or None if it has none."""
    path = pathlib.Path(saved_model_dir) / METADATA_DIR / METADATA_FILE
    return json.loads(path.read_text()) if path.exists() else None

"""A LiteRT or ONNX policy file as a NumPy policy, with no TensorFlow, Keras or gymnasium in the process.

    policy = tfrl.load_policy("saved_models/cartpole/1/policy.tflite")   # or .../policy.onnx
    action = policy(observation)          # one observation -> one action; a batch -> a batch
    policy.outputs(batch)                 # every output: "action", and "q_values", "logits"/"value" or "mean"

The file holds the export's `serving_default`: the same named inputs (one "observation", or one per Dict key with
"." written "_", the action mask included) and outputs. Beside a SavedModel, the version's
assets.extra/tfrl_metadata.json names the Dict keys; a file copied alone is read from its own inputs.
Each model runs on `threads` CPU threads (1 by default: a small MLP answers fastest on one).

A policy with memory (lstm_units) takes "state" float32 [N, S] and returns the next one, as the SavedModel does
(in the ONNX file the output is "next_state": an ONNX graph's values have one name each); the loaded policy keeps
one state per row, as tfrl.load_policy's does (policy.reset(done), policy.step(obs, state): the same methods).
"""

from __future__ import annotations

import importlib
import json
import pathlib
import warnings
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tfrl.errors import UsageError
from tfrl.models import env_space, policy_inputs
from tfrl.models.policy_memory import PolicyMemory, RememberingPolicy

FORMATS = {".tflite": "litert", ".onnx": "onnx"}
EXTRAS = {"litert": ("ai_edge_litert", "tfrl[litert]"), "onnx": ("onnxruntime", "tfrl[onnx]")}
SIGNATURE = "serving_default"  # tfrl.models.export.SIGNATURE, without importing TensorFlow
FLAT_INPUT = policy_inputs.FLAT_KEY  # tfrl.models.export.INPUT_NAME
STATE = policy_inputs.STATE_NAME
ONNX_STATE_OUTPUT = "next_state"  # the ONNX file's name of output "state" (its input has that name)
_ONNX_TYPES = {f"tensor({onnx})": numpy for onnx, numpy in (
    ("float", "float32"), ("double", "float64"), ("float16", "float16"), ("bool", "bool"), ("uint8", "uint8"),
    ("uint16", "uint16"), ("uint32", "uint32"), ("uint64", "uint64"), ("int8", "int8"), ("int16", "int16"),
    ("int32", "int32"), ("int64", "int64"))}


def is_portable(path: str | pathlib.Path) -> bool:
    return pathlib.Path(path).suffix in FORMATS


class PortablePolicy(RememberingPolicy):
    """A greedy policy in a LiteRT or ONNX file: policy(obs) -> actions, for one observation or a batch; with
    memory, the state kept per row (tfrl.models.policy_memory.RememberingPolicy)."""

    def __init__(self, path: pathlib.Path, run: Callable[[Mapping[str, np.ndarray]], dict],
                 inputs: dict[str, policy_inputs.Field], metadata: dict | None, allow_non_finite: bool = False,
                 state_size: int = 0):
        self.path, self.format, self.metadata = path, FORMATS[path.suffix], metadata
        self.allow_non_finite = allow_non_finite  # NaN, Inf and numbers beyond float32 in observations: refused
        self.source = str(path)
        self._run = run
        self._inputs = inputs  # input name -> its field (key: the Dict key, or "observation"); not the state
        self.structured = _structured(inputs, metadata)
        self._own_space = env_space.parse(((metadata or {}).get("observation") or {}).get("env_space"), self.source)
        self.memory = PolicyMemory(state_size)

    @property
    def fields(self) -> tuple[policy_inputs.Field, ...]:
        return tuple(self._inputs.values())

    def _answer(self, batch, state: np.ndarray | None) -> dict[str, np.ndarray]:
        return self._run({**self._feed(batch), **({STATE: state} if state is not None else {})})

    def _as_batch(self, obs) -> tuple[Any, bool]:
        """(the observations as a batch the file takes, the env's own converted (tfrl.models.env_space); whether one
        observation was given)."""
        obs = env_space.to_fields(self._own_space, obs, self.source)
        return policy_inputs.as_batch(self.fields, self.structured, obs, self.source, self.allow_non_finite)

    def _feed(self, batch) -> dict[str, np.ndarray]:
        if not self.structured:
            return {next(iter(self._inputs)): batch}
        return {name: batch[field.key] for name, field in self._inputs.items()}

    def __repr__(self) -> str:
        memory = f", state_size={self.state_size}" if self.state_size else ""
        return f"PortablePolicy({self.source}, {self.format}, inputs={ {f.key: f.shape for f in self.fields} }{memory})"


def load(path: str | pathlib.Path, threads: int = 1, allow_non_finite: bool = False) -> PortablePolicy:
    """The policy in a .tflite or .onnx file written by `tfrl export --format=litert|onnx`; allow_non_finite as
    tfrl.load_policy's."""
    path = pathlib.Path(path)
    if path.suffix not in FORMATS:
        raise UsageError(f"{path}: not a LiteRT (.tflite) or ONNX (.onnx) file")
    if not path.is_file():
        raise UsageError(f"{path} is not a file" if path.exists() else f"{path} does not exist")
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise UsageError(f"threads must be an integer >= 1, got {threads!r}")
    module = _runtime(FORMATS[path.suffix], path)
    opener = _open_litert if FORMATS[path.suffix] == "litert" else _open_onnx
    try:
        run, specs, outputs = opener(module, path, threads)
    except Exception as e:  # noqa: BLE001 - a truncated or foreign file: each runtime raises its own kind
        reason = (str(e) or type(e).__name__).strip().splitlines()[0]
        raise UsageError(f"{path}: cannot load it as {FORMATS[path.suffix]}, is it truncated or damaged? "
                         f"({reason})") from None
    state_size = _state_size(path, specs, outputs)
    specs = {name: spec for name, spec in specs.items() if not (state_size and name == STATE)}
    metadata = _agreeing_metadata(path, specs, _metadata(path))
    return PortablePolicy(path, run, _fields(specs, metadata), metadata, allow_non_finite, state_size)


def _state_size(path: pathlib.Path, specs: Mapping[str, tuple], outputs: Sequence[str]) -> int:
    """S of a policy with memory (input "state" float32 [N, S], also an output), 0 for one without."""
    if STATE not in specs or STATE not in outputs:
        return 0
    shape, dtype = specs[STATE]
    if dtype != "float32" or len(shape) != 1 or shape[0] < 1:
        raise UsageError(f"{path}: input {STATE!r} is {dtype} {[None, *shape]}, where a policy with memory takes "
                         f"float32 [None, S]")
    return int(shape[0])


def _runtime(fmt: str, path: pathlib.Path):
    module, extra = EXTRAS[fmt]
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(f"{path}: running a {fmt} policy needs {module.replace('_', '-')}, which is not "
                         f"installed: pip install '{extra}'") from None


def _open_litert(module, path: pathlib.Path, threads: int):
    interpreter = importlib.import_module(f"{module.__name__}.interpreter").Interpreter(
        model_path=str(path), num_threads=threads)
    if SIGNATURE not in interpreter.get_signature_list():
        raise ValueError(f"no {SIGNATURE!r} signature")
    runner = interpreter.get_signature_runner(SIGNATURE)
    specs = {name: (tuple(int(d) for d in detail["shape"][1:]), np.dtype(detail["dtype"]).name)
             for name, detail in runner.get_input_details().items()}
    return (lambda feed: dict(runner(**feed))), specs, tuple(runner.get_output_details())


def _open_onnx(module, path: pathlib.Path, threads: int):
    options = module.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.log_severity_level = 3  # errors only: its warnings go to stderr, not to the caller
    session = module.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    keys = [STATE if name == ONNX_STATE_OUTPUT else name for name in names]
    unknown = [f"{item.name} ({item.type})" for item in session.get_inputs() if item.type not in _ONNX_TYPES]
    if unknown:
        raise ValueError(f"inputs of types tfrl does not feed: {', '.join(unknown)}")
    specs = {item.name: (tuple(int(d) for d in item.shape[1:]), _ONNX_TYPES[item.type])
             for item in session.get_inputs()}
    return (lambda feed: dict(zip(keys, session.run(names, feed)))), specs, tuple(keys)


def _metadata(path: pathlib.Path) -> dict | None:
    """tfrl_metadata.json of the version the file sits in (tfrl.models.export's assets.extra), if it is there."""
    candidate = path.parent / "assets.extra" / "tfrl_metadata.json"
    try:
        return json.loads(candidate.read_text()) if candidate.is_file() else None
    except (OSError, ValueError):
        return None


def _agreeing_metadata(path: pathlib.Path, specs: Mapping[str, tuple], metadata: dict | None) -> dict | None:
    """The version's metadata if its observation fields are the file's inputs (names and shapes); else a warning,
    and None: the file's own signature is what runs (a file copied beside another version's metadata, say)."""
    fields = _metadata_fields(metadata)
    if not fields:
        return metadata
    described = {field["key"].replace(".", "_"): tuple(field.get("shape") or ()) for field in fields}
    own = {name: shape for name, (shape, _) in specs.items()}
    if described == own:
        return metadata
    warnings.warn(f"{path}: the tfrl_metadata.json beside it describes the inputs {described}, the file has "
                  f"{own}: the file's own inputs are used, and the metadata is ignored", stacklevel=3)
    return None


def _fields(specs: Mapping[str, tuple], metadata: dict | None) -> dict[str, policy_inputs.Field]:
    """Input name -> field; the Dict keys from the metadata where it names them ("arm.joints" is input
    "arm_joints"), else the input names."""
    keys = {field["key"].replace(".", "_"): field["key"] for field in _metadata_fields(metadata)}
    return {name: policy_inputs.Field(keys.get(name, name), shape, dtype)
            for name, (shape, dtype) in sorted(specs.items())}


def _metadata_fields(metadata: dict | None) -> list[dict]:
    fields = ((metadata or {}).get("observation") or {}).get("fields")
    return [field for field in fields or [] if isinstance(field, dict) and isinstance(field.get("key"), str)]


def _structured(inputs: Mapping[str, Any], metadata: dict | None) -> bool:
    return bool(_metadata_fields(metadata)) or set(inputs) != {FLAT_INPUT}

"""One signature of a loaded SavedModel in TF Serving's JSON terms: checked inputs in, JSON-ready outputs out.

A predict request (tensorflow.org/tfx/serving/api_rest) carries its tensors in one
of two formats, never both:

    row:      {"instances": [<instance>, ...]}   -> {"predictions": ...}
              one input: each instance is that input's value for one row;
              several inputs: each instance is {"<input name>": value, ...}.
    columnar: {"inputs": <tensor> | {"<input name>": <tensor>, ...}}  -> {"outputs": ...}

A signature with one output answers with that output's value alone (its name is
omitted); with several, row answers are a list of {"<output name>": value} per
row and columnar answers one {"<output name>": tensor} object.

Every input is checked against the signature before any model call: its name,
its JSON type against the dtype (no strings or booleans for numbers, no
fractions for integers, integers within the dtype's range), its shape against the
signature's (ragged lists rejected) and, unless allowed, no NaN or Infinity.
Strings may be given as {"b64": "<base64>"}; outputs whose name ends in "_bytes",
or that are not UTF-8, come back that way.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import pathlib
from typing import Any, Callable, Iterator, Mapping

import numpy as np
import tensorflow as tf
from google.protobuf import json_format, text_format
from tensorflow.core.protobuf import saved_model_pb2

from tfrl.model_server.errors import invalid_argument

DEFAULT_SIGNATURE = "serving_default"
# tfrl's exports (tfrl.models.policy_inputs' names; the server imports no tfrl code outside this package): a masked
# policy's mask input (1 = legal, 0 = illegal) and its flag output for a row whose mask allows no action.
MASK_INPUT = "action_mask"
NO_LEGAL_ACTION = "no_legal_action"
# JSON value kinds numpy infers (np.asarray of parsed JSON) that each dtype family accepts.
_ACCEPTED_KINDS = {"float": "fiu", "int": "iu", "bool": "b"}
_KIND_NAMES = {"f": "non-integer numbers", "i": "integers", "u": "integers", "b": "booleans", "U": "strings",
               "O": "nulls, objects or mixed types"}


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """An input or output of a signature."""

    name: str
    dtype: tf.DType
    shape: tuple[int | None, ...] | None  # None: unknown rank
    family: str | None  # "float", "int", "bool", "string", or None for what JSON cannot carry
    numpy_dtype: np.dtype | None
    value_range: tuple[float, float] | None  # (lowest, highest) of a float or integer dtype

    @classmethod
    def of(cls, name: str, spec: tf.TensorSpec) -> "TensorInfo":
        rank = spec.shape.rank
        family = _family(spec.dtype)
        return cls(name, spec.dtype, None if rank is None else tuple(spec.shape.as_list()), family,
                   np.dtype(spec.dtype.as_numpy_dtype) if family else None,
                   (spec.dtype.min, spec.dtype.max) if family in ("float", "int") else None)

    @property
    def has_batch_dim(self) -> bool:
        """Rows can be stacked along dimension 0: its size is left open."""
        return bool(self.shape) and self.shape[0] is None

    def shape_text(self) -> str:
        return "unknown rank" if self.shape is None else str([-1 if d is None else d for d in self.shape])


@dataclasses.dataclass(frozen=True)
class Request:
    """A checked predict request."""

    inputs: dict[str, np.ndarray]
    row_format: bool  # "instances" (answered with "predictions") or "inputs" (answered with "outputs")
    rows: int | None  # dimension 0 shared by every input, if this request may be batched with others


class Signature:
    """A signature of a loaded SavedModel: checks requests, runs the function, shapes the answer."""

    def __init__(self, name: str, function: Callable[..., Mapping[str, tf.Tensor]]):
        self.name = name
        self._function = function
        _, input_specs = function.structured_input_signature
        self.inputs = {k: TensorInfo.of(k, spec) for k, spec in input_specs.items()}
        self.outputs = {k: TensorInfo.of(k, spec) for k, spec in function.structured_outputs.items()}
        # Merging requests needs rows stacked along dimension 0 of every input and split back from every output.
        self.batchable = bool(self.inputs) and all(t.has_batch_dim for t in (*self.inputs.values(),
                                                                              *self.outputs.values()))

    # -- requests ------------------------------------------------------------------------------------------------
    def parse_request(self, request: Mapping[str, Any], allow_non_finite: bool = False,
                      may_hold_booleans: bool = True, max_rows: int | None = None) -> Request:
        """Checks a parsed JSON request body; raises ServingError(INVALID_ARGUMENT) with a one-line reason.

        may_hold_booleans=False (the body has no `true`/`false`) skips the element-wise search for booleans
        among numbers, which numpy would silently turn into 0 and 1. max_rows: the most rows (instances, or the
        inputs' first dimension) a request may carry.
        """
        rows = _row_count(request)
        if max_rows is not None and rows is not None and rows > max_rows:
            raise invalid_argument(f"the request carries {rows} rows, more than --max_rows_per_request="
                                   f"{max_rows}: split it into smaller requests")
        has_instances, has_inputs = "instances" in request, "inputs" in request
        if has_instances and has_inputs:
            raise invalid_argument("a request has either 'instances' (row format) or 'inputs' (columnar format), "
                                   "not both")
        if not has_instances and not has_inputs:
            raise invalid_argument("missing 'instances' (row format) or 'inputs' (columnar format)")
        convert = lambda value, info, where: _to_array(value, info, where, allow_non_finite, may_hold_booleans)
        if has_instances:
            parsed = self._parse_rows(request["instances"], convert)
        else:
            parsed = self._parse_columns(request["inputs"], convert)
        if MASK_INPUT in parsed.inputs:
            _check_mask(parsed.inputs[MASK_INPUT])
        return parsed

    def check_answer(self, outputs: Mapping[str, np.ndarray]) -> None:
        """ServingError(INVALID_ARGUMENT) if the outputs flag a row whose action mask allows no action: that
        request has no right answer."""
        flags = outputs.get(NO_LEGAL_ACTION)
        if flags is not None and flags.size and flags.any():
            rows = np.flatnonzero(flags.reshape(-1))
            raise invalid_argument(f"input '{MASK_INPUT}': the mask of row {int(rows[0])} allows no action (in "
                                   "some part of the action): there is no right answer"
                                   + (f" ({len(rows)} such rows)" if len(rows) > 1 else ""))

    def _parse_rows(self, instances: Any, convert) -> Request:
        if not isinstance(instances, list):
            raise invalid_argument("'instances' must be a list of instances, one per row")
        if not instances:
            raise invalid_argument("'instances' is empty: give at least one instance")
        if not self.inputs:
            raise invalid_argument(f"signature '{self.name}' takes no inputs: send {{\"inputs\": {{}}}}")
        if len(self.inputs) == 1 and not _is_named(instances[0]):
            (name, info), = self.inputs.items()
            arrays = {name: convert(instances, info, "'instances'")}
        else:
            names = set(self.inputs)
            for i, instance in enumerate(instances):
                if not isinstance(instance, dict):
                    raise invalid_argument(f"instance {i} must be an object keyed by input name "
                                           f"({_names(self.inputs)}): the signature has several inputs")
                if instance.keys() != names:
                    raise invalid_argument(f"instance {i}: {_key_mismatch(instance, self.inputs)}")
            arrays = {name: convert([instance[name] for instance in instances], info, f"input '{name}'")
                      for name, info in self.inputs.items()}
        for name, array in arrays.items():
            _check_shape(array, self.inputs[name])
        return Request(arrays, row_format=True, rows=len(instances) if self.batchable else None)

    def _parse_columns(self, value: Any, convert) -> Request:
        if isinstance(value, dict) and (len(self.inputs) != 1 or _is_named(value)):
            if value.keys() != self.inputs.keys():
                raise invalid_argument(f"'inputs': {_key_mismatch(value, self.inputs)}")
            arrays = {name: convert(value[name], info, f"input '{name}'") for name, info in self.inputs.items()}
        elif len(self.inputs) == 1:
            (name, info), = self.inputs.items()
            arrays = {name: convert(value, info, "'inputs'")}
        else:
            raise invalid_argument(f"'inputs' must be an object keyed by input name ({_names(self.inputs)}): "
                                   f"the signature has {len(self.inputs)} inputs")
        for name, array in arrays.items():
            _check_shape(array, self.inputs[name])
        sizes = {array.shape[0] for array in arrays.values() if array.ndim}
        if self.batchable and len(sizes) > 1:  # the model would fail with a graph dump
            counts = ", ".join(f"'{name}': {array.shape[0]}" for name, array in sorted(arrays.items()) if array.ndim)
            raise invalid_argument(f"'inputs': the inputs have different numbers of rows ({counts}); every input "
                                   "of a request has one row per observation")
        rows = sizes.pop() if self.batchable and len(sizes) == 1 else None
        return Request(arrays, row_format=False, rows=rows)

    # -- the model call (in a model thread) -------------------------------------------------------------------------
    def __call__(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = self._function(**{name: tf.constant(array, self.inputs[name].dtype)
                                    for name, array in inputs.items()})
        return {name: tensor.numpy() for name, tensor in outputs.items()}

    def warm_up(self) -> None:
        """One call on a row of zeros, so the first request does not pay for initializing the function.

        Skipped for signatures whose inputs cannot be made up (strings, open inner dimensions)."""
        inputs = {}
        for name, info in self.inputs.items():
            if info.shape is None or info.dtype == tf.string or None in info.shape[1:]:
                return
            inputs[name] = np.zeros([1 if d is None else d for d in info.shape], info.dtype.as_numpy_dtype)
        self(inputs)

    # -- answers -------------------------------------------------------------------------------------------------
    def response_json(self, outputs: Mapping[str, np.ndarray], row_format: bool, chunk_rows: int) -> Iterator[str]:
        """response() as JSON text, in pieces of at most chunk_rows rows for row-format answers (their
        serialization is the costly part of a large request)."""
        if not row_format or any(array.ndim == 0 for array in outputs.values()):
            yield json.dumps(self.response(outputs, row_format))
            return
        self.response({name: array[:0] for name, array in outputs.items()}, row_format)  # checks the row dims
        rows = len(next(iter(outputs.values())))
        yield '{"predictions": ['
        for start in range(0, rows, chunk_rows):
            chunk = {name: array[start:start + chunk_rows] for name, array in outputs.items()}
            text = json.dumps(self.response(chunk, row_format)["predictions"])[1:-1]
            yield text if start == 0 or not text else "," + text
        yield "]}"

    def response(self, outputs: Mapping[str, np.ndarray], row_format: bool) -> dict:
        values = {name: _to_json(name, array) for name, array in outputs.items()}
        if row_format:
            if len(values) == 1:
                return {"predictions": next(iter(values.values()))}
            sizes = {name: (array.shape[0] if array.ndim else None) for name, array in outputs.items()}
            if None in sizes.values() or len(set(sizes.values())) != 1:
                raise invalid_argument(f"the outputs have no common dimension 0 ({sizes}) to answer in row format: "
                                       "use the columnar format ('inputs')")
            return {"predictions": [dict(zip(values, row)) for row in zip(*values.values())]}
        if len(values) == 1:
            return {"outputs": next(iter(values.values()))}
        return {"outputs": values}


def _row_count(request: Mapping[str, Any]) -> int | None:
    """Rows a request carries: its instances, or the longest first dimension of its columnar inputs."""
    if isinstance(request.get("instances"), list):
        return len(request["instances"])
    inputs = request.get("inputs")
    values = inputs.values() if isinstance(inputs, dict) else [inputs]
    lengths = [len(value) for value in values if isinstance(value, list)]
    return max(lengths) if lengths else None


def load_signatures(loaded) -> dict[str, Signature]:
    """The callable signatures of a tf.saved_model.load result, by name."""
    return {name: Signature(name, function) for name, function in loaded.signatures.items()}


def signature_defs_json(saved_model_dir: pathlib.Path) -> dict:
    """The SavedModel's SignatureDef map as TF Serving's metadata API prints it (proto JSON, field names kept)."""
    directory = pathlib.Path(saved_model_dir)
    saved_model = saved_model_pb2.SavedModel()
    if (directory / "saved_model.pb").exists():
        saved_model.ParseFromString((directory / "saved_model.pb").read_bytes())
    else:
        text_format.Parse((directory / "saved_model.pbtxt").read_text(), saved_model)
    signature_defs = {}
    for meta_graph in saved_model.meta_graphs:
        if "serve" in meta_graph.meta_info_def.tags or len(saved_model.meta_graphs) == 1:
            signature_defs = {name: _message_to_dict(sig) for name, sig in meta_graph.signature_def.items()}
            break
    return {"signature_def": signature_defs}


def _message_to_dict(message) -> dict:
    # Default-valued fields too ("unknown_rank": false, "name": ""), as TF Serving prints them. The option was
    # renamed in protobuf 5.26.
    try:
        return json_format.MessageToDict(message, preserving_proto_field_name=True,
                                         always_print_fields_with_no_presence=True)
    except TypeError:
        return json_format.MessageToDict(message, preserving_proto_field_name=True,
                                         including_default_value_fields=True)


# -- conversions ---------------------------------------------------------------------------------------------------
def _is_named(value: Any) -> bool:
    """An object keyed by input name (not a {"b64": ...} string)."""
    return isinstance(value, dict) and value.keys() != {"b64"}


def _names(infos: Mapping[str, TensorInfo]) -> str:
    return ", ".join(f"'{name}'" for name in infos)


def _key_mismatch(given: Mapping, infos: Mapping[str, TensorInfo]) -> str:
    missing = [name for name in infos if name not in given]
    unknown = [str(name) for name in given if name not in infos]
    parts = ([f"missing input(s) {', '.join(missing)}"] if missing else []) + (
        [f"unknown input(s) {', '.join(unknown)}"] if unknown else [])
    return f"{'; '.join(parts)} (the signature's inputs: {_names(infos)})"


def _family(dtype: tf.DType) -> str | None:
    if dtype == tf.bool:
        return "bool"
    if dtype == tf.string:
        return "string"
    if dtype.is_floating:
        return "float"
    if dtype.is_integer:
        return "int"
    return None  # complex, resource, variant, quantized: nothing JSON carries


def _to_array(value: Any, info: TensorInfo, where: str, allow_non_finite: bool,
              may_hold_booleans: bool) -> np.ndarray:
    family, numpy_dtype = info.family, info.numpy_dtype
    if family is None:
        raise invalid_argument(f"input '{info.name}' has dtype {info.dtype.name}, which JSON cannot carry")
    if family == "string":
        return _string_array(value, where)
    try:
        array = np.asarray(value)
    except (ValueError, TypeError, RecursionError):
        raise invalid_argument(f"{where}: ragged nested lists (every row of an input must have the same shape)"
                               ) from None
    if array.size and array.dtype.kind not in _ACCEPTED_KINDS[family]:
        raise invalid_argument(f"{where} is not of expected type {info.dtype.name}: got "
                               f"{_KIND_NAMES.get(array.dtype.kind, array.dtype.name)}")
    if family != "bool" and may_hold_booleans and array.dtype.kind != "O" and _holds_boolean(value):
        raise invalid_argument(f"{where} is not of expected type {info.dtype.name}: got booleans among numbers")
    if family == "int" and array.size:
        lowest, highest = info.value_range
        if array.min() < lowest or array.max() > highest:
            raise invalid_argument(f"{where}: a value is outside {info.dtype.name}'s range [{lowest}, {highest}]")
    # Checked before the cast: a float64 beyond float32's range would become inf (with a numpy warning).
    # One reduction on the happy path: max |x| is NaN if any x is NaN, and NaN <= anything is False.
    if family == "float" and array.size and not allow_non_finite and not np.abs(array).max() <= info.value_range[1]:
        finite = np.isfinite(array) & (np.abs(array) <= info.value_range[1])
        if not finite.all():  # (it is not: the check above failed)
            index = [int(i) for i in np.argwhere(~finite)[0]]
            raise invalid_argument(f"{where}: NaN or Infinity (or a number beyond {info.dtype.name}'s range) at "
                                   f"index {index}; the server was started without --allow_non_finite_inputs")
    if family == "float" and allow_non_finite and array.dtype.itemsize > numpy_dtype.itemsize:
        with np.errstate(over="ignore"):  # out of range -> inf, as asked for
            return array.astype(numpy_dtype)
    return array.astype(numpy_dtype, copy=False)


def _check_mask(mask: np.ndarray) -> None:
    """A mask holds 0 and 1 only (a 2 would count as legal, a fraction be cut), and allows some action in a row."""
    if mask.size and not np.all((mask == 0) | (mask == 1)):
        raise invalid_argument(f"input '{MASK_INPUT}' must hold only 0 and 1 (1 = legal), got "
                               f"{np.unique(mask[(mask != 0) & (mask != 1)])[:3].tolist()}")
    if mask.ndim >= 2 and mask.size:
        empty = np.flatnonzero(~mask.reshape(len(mask), -1).astype(bool).any(axis=-1))
        if len(empty):
            raise invalid_argument(f"input '{MASK_INPUT}': the mask of row {int(empty[0])} allows no action: "
                                   "there is no right answer")


def _holds_boolean(value: Any) -> bool:
    if isinstance(value, list):
        return any(_holds_boolean(v) for v in value)
    return isinstance(value, bool)


def _string_array(value: Any, where: str) -> np.ndarray:
    def to_bytes(item):
        if isinstance(item, list):
            return [to_bytes(v) for v in item]
        if isinstance(item, str):
            return item.encode()
        if isinstance(item, dict) and item.keys() == {"b64"} and isinstance(item["b64"], str):
            try:
                return base64.b64decode(item["b64"], validate=True)
            except binascii.Error:
                raise invalid_argument(f"{where}: invalid base64 in a {{\"b64\": ...}} value") from None
        raise invalid_argument(f"{where} is not of expected type string: got {type(item).__name__} values")

    try:
        array = np.array(to_bytes(value), dtype=object)  # object, not "S": "S" drops trailing zero bytes
    except (ValueError, RecursionError):
        array = None
    if array is None or not all(isinstance(item, bytes) for item in array.flat):
        raise invalid_argument(f"{where}: ragged nested lists (every row of an input must have the same shape)")
    return array


def _check_shape(array: np.ndarray, info: TensorInfo) -> None:
    if info.shape is None:
        return
    if array.ndim != len(info.shape) or any(d is not None and d != n for d, n in zip(info.shape, array.shape)):
        raise invalid_argument(f"input '{info.name}' has shape {list(array.shape)} but the signature takes "
                               f"{info.shape_text()} (-1: any size)")


def _to_json(name: str, array: np.ndarray) -> Any:
    if array.dtype == object or array.dtype.kind == "S":  # DT_STRING
        binary = name.endswith("_bytes")
        return _map_nested(array.tolist(), lambda b: _bytes_to_json(b, binary))
    if array.dtype.kind == "f" and array.dtype.itemsize < 4:  # float16, bfloat16: tolist gives no Python floats
        array = array.astype(np.float32)
    # float32 values are printed as the float64 they equal (0.1f -> 0.10000000149011612): the same float32
    # when parsed back. NaN and Infinity are written as such, as TF Serving does.
    return array.tolist()


def _bytes_to_json(value: bytes, binary: bool) -> Any:
    if not binary:
        try:
            return value.decode()
        except UnicodeDecodeError:
            pass
    return {"b64": base64.b64encode(value).decode()}


def _map_nested(value: Any, function: Callable[[Any], Any]) -> Any:
    if isinstance(value, list):
        return [_map_nested(v, function) for v in value]
    return function(value)

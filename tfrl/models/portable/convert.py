"""LiteRT and ONNX files from an exported SavedModel's `serving_default`, checked against it before they count.

The files go into the version directory beside the SavedModel (TF Serving ignores them), while it is still the
export's hidden temporary directory: a version holds every asked-for format, each past its parity check, or
is not written at all. LiteRT: TensorFlow's converter, built-in ops only (the ai-edge-litert runtime has no
TensorFlow ops), float32 weights or, with `quantize`, float16 weights or dynamic-range int8 weights. ONNX:
tf2onnx, opset 17. Observation normalization and image scaling are inside the graph, as in the SavedModel;
so is a policy's memory (its state an input and an output, checked along whole episodes).
"""

from __future__ import annotations

import logging
import pathlib
from typing import Callable, Sequence

import tensorflow as tf

from tfrl import envs
from tfrl.errors import UsageError
from tfrl.models import export, serving
from tfrl.models.portable import parity, runtime
from tfrl.models.portable.formats import FILES

ONNX_OPSET = 17


def finisher(formats: Sequence[str], quantize: str, env: envs.EnvSpec, allow_mismatch: bool = False,
             num_observations: int = 1000, seed: int = 0) -> Callable[[pathlib.Path], dict]:
    """What tfrl.models.export runs in the new version's temporary directory: writes each format's file, checks it
    against the SavedModel there on `num_observations` observations of `env`, and returns the metadata entry
    {"portable": {format: {"file", "quantize", "parity"}}}."""

    def finish(version_dir: pathlib.Path) -> dict:
        reference = serving.load(version_dir)
        recording = parity.recorded_episodes(reference, env, num_observations, seed)
        entries = {}
        for name in formats:
            path = version_dir / FILES[name]
            path.write_bytes(convert(version_dir, name, quantize if name == "litert" else "none"))
            report = parity.compare(reference, runtime.load(path), recording, name,
                                    quantize if name == "litert" else "none")
            if not report["passed"] and not allow_mismatch:
                raise UsageError(f"--format={name}: the converted policy differs from the SavedModel "
                                 f"({report['summary']}); nothing was written (--allow_mismatch keeps it)")
            entries[name] = {"file": FILES[name], "quantize": quantize if name == "litert" else "none",
                             "parity": report, **_memory_entry(name, reference.state_size)}
        return {"portable": entries}

    return finish


def _memory_entry(name: str, state_size: int) -> dict:
    """{"memory": its state's input and output names in the file} for a policy with memory."""
    if not state_size:
        return {}
    output = runtime.ONNX_STATE_OUTPUT if name == "onnx" else runtime.STATE
    return {"memory": {"state_size": state_size, "input": runtime.STATE, "output": output, "start": "zeros"}}


def convert(saved_model_dir: pathlib.Path, name: str, quantize: str = "none") -> bytes:
    """The model file of format `name` for the SavedModel's serving_default; UsageError naming the format if its
    converter cannot express the policy."""
    try:
        return _to_litert(saved_model_dir, quantize) if name == "litert" else _to_onnx(saved_model_dir)
    except ImportError:
        raise UsageError(f"--format={name} needs tf2onnx to convert: pip install 'tfrl[onnx]'") from None
    except Exception as e:  # noqa: BLE001 - converters raise their own kinds (ConverterError, ValueError, ...)
        reason = next((line.strip() for line in str(e).splitlines() if "error" in line.lower()),
                      (str(e) or type(e).__name__).strip().splitlines()[0])
        raise UsageError(f"--format={name}: the {'LiteRT' if name == 'litert' else 'ONNX'} converter cannot "
                         f"express this policy ({reason[:300]})") from None


def _to_litert(saved_model_dir: pathlib.Path, quantize: str) -> bytes:
    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved_model_dir), signature_keys=[export.SIGNATURE])
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantize != "none":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]  # alone: dynamic-range int8 weights
    if quantize == "float16":
        converter.target_spec.supported_types = [tf.float16]
    return converter.convert()


def _to_onnx(saved_model_dir: pathlib.Path) -> bytes:
    import tf2onnx  # noqa: PLC0415 - the onnx extra, only for this format

    logging.getLogger("tf2onnx").setLevel(logging.ERROR)
    loaded = tf.saved_model.load(str(saved_model_dir))  # kept: the signature needs its variables alive
    signature = loaded.signatures[export.SIGNATURE]
    specs = signature.structured_input_signature[1]
    names = sorted(specs)

    @tf.function(input_signature=[specs[name] for name in names])
    def serve(*tensors):
        outputs = dict(signature(**dict(zip(names, tensors))))
        if runtime.STATE in outputs:  # an ONNX value has one name: input "state" cannot be an output too
            outputs[runtime.ONNX_STATE_OUTPUT] = outputs.pop(runtime.STATE)
        return outputs

    model, _ = tf2onnx.convert.from_function(serve, input_signature=[specs[name] for name in names],
                                             opset=ONNX_OPSET)
    return model.SerializeToString()

"""The formats `tfrl export --format` writes, and the check of a request for them (no TensorFlow: the command
checks its flags before it loads TensorFlow)."""

from __future__ import annotations

from typing import Sequence

from tfrl.errors import UsageError

FILES = {"litert": "policy.tflite", "onnx": "policy.onnx"}
FORMATS = ("saved_model", *FILES)
QUANTIZATIONS = ("none", "float16", "int8")


def check_request(formats: Sequence[str], quantize: str) -> tuple[str, ...]:
    """The formats besides the SavedModel, after UsageError for unknown ones or a quantization without LiteRT."""
    unknown = [name for name in formats if name not in FORMATS]
    if unknown:
        raise UsageError(f"--format: unknown format {unknown[0]!r}; choose from {', '.join(FORMATS)}")
    if quantize not in QUANTIZATIONS:
        raise UsageError(f"--litert_quantize: unknown quantization {quantize!r}; choose one of "
                         f"{', '.join(QUANTIZATIONS)}")
    if quantize != "none" and "litert" not in formats:
        raise UsageError(f"--litert_quantize={quantize} applies to --format=litert, which was not asked for")
    return tuple(dict.fromkeys(name for name in formats if name in FILES))

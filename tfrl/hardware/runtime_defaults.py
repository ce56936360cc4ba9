"""The runtime options a run gets where the user left them unset: XLA and the precision policy, from the preset
(or the resumed run) and the device the train step runs on, with the reason for each (config.json's
runtime_choices, the banner)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from tfrl.hardware import cpu_features, runtime as runtime_lib


def resolved(options: runtime_lib.RuntimeOptions, defaults: Mapping[str, Any]) -> runtime_lib.RuntimeOptions:
    """`options` with what the user left unset resolved as `resolve` does."""
    return resolve(options, defaults)[0]


def resolve(options: runtime_lib.RuntimeOptions, defaults: Mapping[str, Any],
                    source: str = "the preset") -> tuple[runtime_lib.RuntimeOptions, dict[str, str]]:
    """(`options` with each option the user left unset (None) resolved, {option: why it has its value}).

    defaults: the preset's runtime (source "preset <name>") or the resumed run's options (source "the resumed
    run"). XLA: the user's --xla/--noxla, else the defaults', else on where the train step runs on a CUDA GPU (many
    small kernels without it: docs/hardware.md) and off on a CPU. Precision: the user's, else
    the defaults'; a preset's cpu_bfloat16 means mixed_bfloat16 when the train step runs on a CPU with bfloat16
    instructions (tfrl.hardware.cpu_features), float32 elsewhere.
    """
    choices = {}
    if options.xla is not None:
        xla, choices["xla"] = options.xla, "--xla" if options.xla else "--noxla"
    elif "xla" in defaults:
        xla, choices["xla"] = bool(defaults["xla"]), source
    elif runtime_lib.trains_on_cpu(options):
        xla, choices["xla"] = False, "the default where the train step runs on a CPU; --xla turns it on"
    elif not runtime_lib.build_flavour().startswith("CUDA"):  # ROCm and plugins: XLA there is not measured
        xla, choices["xla"] = False, f"the default on a {runtime_lib.build_flavour()} GPU; --xla turns it on"
    else:
        xla, choices["xla"] = True, "the default where the train step runs on a CUDA GPU; --noxla turns it off"
    precision = options.mixed_precision or defaults.get("mixed_precision")
    if options.mixed_precision:
        choices["mixed_precision"] = "--mixed_precision"
    elif precision:
        choices["mixed_precision"] = source
    else:
        # The CPU's flags first: a file read, where asking for GPUs imports TensorFlow.
        cpu_bf16 = cpu_features.bf16_flags() if defaults.get("cpu_bfloat16", False) else ()
        bfloat16 = bool(cpu_bf16) and runtime_lib.trains_on_cpu(options)
        precision = "mixed_bfloat16" if bfloat16 else "float32"
        choices["mixed_precision"] = (f"{source} on a CPU with {' and '.join(cpu_bf16)}; "
                                      "--mixed_precision=float32 turns it off" if bfloat16 else "the default")
    return dataclasses.replace(options, xla=xla, mixed_precision=precision), choices

"""Precision: what a Keras dtype policy asks of the optimizers, and the precision advice for a CNN on a CPU.

The policy itself is set once per process by tfrl.hardware.runtime.apply (--mixed_precision).
"""

from __future__ import annotations

from tfrl.lazy_import import LazyModule

keras = LazyModule("keras")

POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")


def loss_scaling_needed(policy_name: str) -> bool:
    """float16 gradients underflow without loss scaling; bfloat16 has float32's range."""
    return policy_name == "mixed_float16"


def optimizer_for_policy(optimizer, policy_name: str):
    """`optimizer`, wrapped in Keras' LossScaleOptimizer when `policy_name` needs loss scaling.

    The wrapper's apply() unscales the gradients, skips a step whose gradients are not finite and adapts the scale;
    its scale_loss() is what the train steps multiply the loss by (the plain optimizer's returns the loss as is).
    """
    if loss_scaling_needed(policy_name):
        return keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def built_optimizer(optimizer, variables, policy_name: str):
    """`optimizer` for the precision policy (optimizer_for_policy), built on `variables`.

    Call it inside the runtime's strategy scope: slots built at the first step would live outside it.
    """
    optimizer = optimizer_for_policy(optimizer, policy_name)
    optimizer.build(variables)
    return optimizer


def cnn_precision_advice(runtime, cpu_bf16: tuple[str, ...]) -> list[str]:
    """What to change, for a CNN trained on a CPU, if the options are not the fastest measured ones
    (docs/benchmarks.md, "The CNN train step: precision and XLA"): XLA off, and mixed_bfloat16 where the CPU
    has bfloat16 instructions (cpu_bf16: tfrl.hardware.cpu_features.bf16_flags())."""
    if "CPU" not in runtime.device_name:
        return []
    advice = []
    if runtime.options.xla:
        advice.append("--xla with a CNN on a CPU: XLA's CPU convolutions make the train step many times slower; "
                      "use --noxla (docs/benchmarks.md)")
    if runtime.options.mixed_precision in (None, "float32") and cpu_bf16:
        advice.append("this CPU has bfloat16 instructions: --mixed_precision=mixed_bfloat16 trains a CNN faster "
                      "than float32, with the same loss to 4 digits (docs/benchmarks.md)")
    return advice

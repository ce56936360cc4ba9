"""Numeric guard: a NaN or Inf in the loss, the gradients or the network's outputs stops training.

Data is checked where it is kept, so that a NaN never reaches a checkpoint: the replay buffers refuse
non-finite transitions as they are added (an env that returns NaN observations before learning starts would
otherwise fill the replay, and every checkpoint after it, long before a gradient step shows it), and
tfrl.run.checkpoints refuses to save non-finite arrays and variables; both raise NonFiniteError. A checkpoint
holding them (an older tfrl wrote such) is restored as a damaged one: the previous one is used.

Each train step computes, inside its tf.function, one int32 of flags per
gradient step (`non_finite_flags`): one reduction per tensor and a few scalar
ops, returned with the step's other outputs, so no extra TF call. The
learner raises NonFiniteError when a call returns a flag; the loop adds the env
step and re-raises without saving, so the newest checkpoint on disk stays the
last one written with finite numbers. Launchers exit with code 3.

Under float16 loss scaling the gradients are not checked: an overflowing scaled
gradient is expected there. A step with a non-finite loss or output is skipped by
the LossScaleOptimizer (its gradients are non-finite too), which halves its scale:
training stops only once that scale has fallen below 1, when lowering it further
clearly does not help (e.g. a NaN reward in the replay, or float16 activations
that overflow whatever the scale).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from tfrl.errors import RunError
from tfrl.lazy_import import LazyModule

# The train steps' checks use TensorFlow; the NumPy ones (replay, checkpoints, rollout actors) must not load it.
keras = LazyModule("keras")
tf = LazyModule("tensorflow")

LOSS, GRADIENTS, OUTPUTS = 1, 2, 4  # flag bits


def non_finite_flags(loss: tf.Tensor, grads: Sequence[tf.Tensor] | None, outputs: Sequence[tf.Tensor]) -> tf.Tensor:
    """int32 scalar: LOSS | GRADIENTS | OUTPUTS for each of them that holds a NaN or Inf; 0 if all are finite.

    grads: the gradients, or None to skip them. A sum is non-finite iff a term is NaN or Inf (or the sum
    overflows float32, at ~3e38: as much a divergence), so each group costs one reduction per tensor and one
    is_finite, not an is_finite pass over every element.
    """
    checks = [tf.math.is_finite(loss)]
    bits = [LOSS]
    if grads is not None:
        checks.append(tf.math.is_finite(tf.add_n([tf.reduce_sum(tf.cast(g, tf.float32)) for g in grads])))
        bits.append(GRADIENTS)
    checks.append(tf.math.is_finite(tf.add_n([tf.reduce_sum(tf.cast(o, tf.float32)) for o in outputs])))
    bits.append(OUTPUTS)
    return tf.reduce_sum(tf.cast(tf.logical_not(tf.stack(checks)), tf.int32) * tf.constant(bits, tf.int32))


def keep_first_flags(flags, flagged_step, step_flags, step):
    """In a loop of gradient steps: (flags, step) of the first step whose flags are set; (0, 0) while none is."""
    first = tf.logical_and(tf.equal(flags, 0), step_flags > 0)
    return tf.where(tf.equal(flags, 0), step_flags, flags), tf.where(first, step, flagged_step)


def gradients_to_check(grads, optimizer):
    """The gradients the guard checks: none under loss scaling, where an overflowing scaled gradient is expected
    (the LossScaleOptimizer skips that step and lowers its scale)."""
    return None if isinstance(optimizer, keras.optimizers.LossScaleOptimizer) else grads


def unscaled_gradient_norm(grads: Sequence[tf.Tensor], optimizer) -> tf.Tensor:
    """The global norm of `grads` divided by the loss scale (1 without one): the norm before clipping.

    Written with the same ops as Keras' global_clipnorm, so that grappler can compute it once for both.
    """
    norm = keras.ops.sqrt(keras.ops.sum(keras.ops.stack([keras.ops.sum(keras.ops.square(g)) for g in grads])))
    return norm / optimizer.scale_loss(tf.constant(1.0))  # scale_loss(1) is the loss scale, or 1


def flag_names(flags: int, outputs_name: str) -> list[str]:
    """5 -> ["loss", outputs_name]."""
    names = [(LOSS, "loss"), (GRADIENTS, "gradients"), (OUTPUTS, outputs_name)]
    return [name for bit, name in names if flags & bit]


def skipped_by_loss_scaling(optimizer) -> bool:
    """True if `optimizer` scales the loss and can still absorb a non-finite step by skipping it (scale >= 1)."""
    scale = getattr(optimizer, "dynamic_scale", None)  # keras.optimizers.LossScaleOptimizer only
    return scale is not None and float(scale.numpy()) >= 1.0


class NonFiniteError(RunError):
    """A NaN or Inf stopped the run: in training (a gradient step's tensors), or in data on its way into the replay
    or a checkpoint; the message names the tensors, the env step and the last good checkpoint."""

    exit_code = 3

    def __init__(self, tensors: Sequence[str], gradient_step: int | None = None, env_step: int | None = None,
                 last_checkpoint: tuple[int, int] | None = None, where: str | None = None):
        """gradient_step: the first one (1-based) with a non-finite tensor; where: what held the tensors when it was
        not a gradient step (e.g. "entering the replay"); last_checkpoint: (env step, number)."""
        self.tensors, self.gradient_step, self.where = list(tensors), gradient_step, where
        self.env_step, self.last_checkpoint = env_step, last_checkpoint
        at_step = "" if env_step is None else f" at env step {env_step}"
        if where is None:
            where = f"at gradient step {gradient_step}" if env_step is None else \
                f"at env step {env_step} (gradient step {gradient_step})"
            what = f"training diverged: non-finite {', '.join(self.tensors)} {where}"
        else:
            what = f"non-finite {', '.join(self.tensors)} {where}{at_step}"
        if last_checkpoint is None:
            kept = "no checkpoint had been written"
        else:
            kept = f"checkpoint {last_checkpoint[1]} (env step {last_checkpoint[0]}) is the newest"
        super().__init__(f"{what}; stopped without saving: {kept}")

    @classmethod
    def entering_replay(cls, fields: Sequence[str]) -> NonFiniteError:
        """Transitions refused by a replay buffer (their fields named), before they poison the checkpoints."""
        return cls(fields, where="entering the replay")

    @classmethod
    def in_checkpoint_state(cls, names: Sequence[str]) -> NonFiniteError:
        """A checkpoint refused by tfrl.run.checkpoints because these arrays or variables hold NaN or Inf."""
        return cls(names, where="in the state to checkpoint")

    def at(self, env_step: int, last_checkpoint: tuple[int, int] | None) -> NonFiniteError:
        """The same error, naming the env step of the train call and the newest checkpoint."""
        return NonFiniteError(self.tensors, self.gradient_step, env_step, last_checkpoint, self.where)


def is_float(dtype) -> bool:
    """True for the dtypes that can hold NaN or Inf: NumPy's floats and complex, and ml_dtypes' (bfloat16, ...)."""
    dtype = np.dtype(dtype)
    return dtype.kind in "fc" or "float" in dtype.name


def can_hold_nonfinite(dtype) -> bool:
    """Whether arrays of `dtype` can hold NaN or Inf: a float dtype, or a structured one with a float field."""
    dtype = np.dtype(dtype)
    if dtype.names:
        return any(can_hold_nonfinite(dtype[name]) for name in dtype.names)
    if dtype.subdtype is not None:  # a field of several values, ("<f4", (3,)): its kind is void
        return can_hold_nonfinite(dtype.subdtype[0])
    return is_float(dtype)


def all_finite(values: np.ndarray) -> bool:
    """Whether an array holds no NaN or Inf: every field of a structured array (Dict observations); arrays that
    cannot hold them (integers, uint8 images) are not looked at."""
    if values.dtype.names:
        return all(all_finite(values[name]) for name in values.dtype.names)
    return not is_float(values.dtype) or bool(np.isfinite(values).all())


def first_non_finite(named_values: Iterable[tuple[str, Any]]) -> str | None:
    """The name of the first float value holding a NaN or Inf, None if there is none; one np.isfinite pass each."""
    for name, value in named_values:
        if not all_finite(np.asarray(value)):
            return name
    return None


def non_finite_variable(loaded) -> str | None:
    """The name of a variable of a tf.saved_model.load result that holds NaN or Inf, None if all are finite.

    Walks every object the SavedModel tracks, so it covers SavedModels made elsewhere too (tfrl.models.export
    refuses to write such a one, but an older tfrl did, or the files were changed). The policy loader
    (tfrl.models.serving) and the model server both refuse such a model."""
    variables = {id(t): t for t in tf.train.TrackableView(loaded).descendants() if isinstance(t, tf.Variable)}
    for variable in variables.values():
        if variable.dtype.is_floating and not np.isfinite(variable.numpy()).all():
            return variable.name.removesuffix(":0")
    return None

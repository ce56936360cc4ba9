"""What every learner's train step shares, written once.

    Placement      where the step runs: on one device (the whole step compiled with XLA under --xla), or under
                   a tf.distribute strategy (each replica's gradients compiled, their mean over all replicas
                   applied outside, tfrl.hardware.distribute). `batch_gradients(fn)` is the one switch between the two.
    RowLayout      the one tensor in: the fields of a batch side by side in one float32 array (pack in NumPy,
                   unpack in the graph); uint8 images beside it, one tensor each.
    OutputLayout   the one tensor out: metrics, the numeric guard's flags and the acting network's weights in
                   one flat float32 vector (pack in the graph, unpack in NumPy).

Every tensor that crosses the tf.function boundary costs Python-side binding on each call, and a learner is
called many times per run; packing keeps that to one tensor each way (plus scalar step parameters).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf

from tfrl.agents.core import LearnerUpdate
from tfrl.hardware import distribute
from tfrl.hardware.runtime import Runtime
from tfrl.models import networks, numerics


class Placement:
    """One device or a strategy, as `runtime` says."""

    def __init__(self, runtime: Runtime):
        self.runtime = runtime
        self.strategy = runtime.strategy
        self.local_replicas = runtime.local_replicas
        self._device = runtime.device_name
        self._xla = runtime.options.xla

    def scope(self):
        """Build networks and optimizer (before the first step) in here: slots built later would live outside it."""
        return self.runtime.scope()

    def compile(self, step: Callable[..., tf.Tensor], input_signature: Sequence[tf.TensorSpec]) -> tf.types.experimental.PolymorphicFunction:
        """step as a tf.function: on one device, placed there and compiled with XLA when asked; under a strategy,
        not compiled as a whole (XLA cannot compile a step that updates mirrored variables: batch_gradients
        compiles each replica's part instead)."""
        if self.strategy is not None:
            return tf.function(step, input_signature=input_signature)
        if not self._xla:
            def on_device(*args):
                with tf.device(self._device):
                    return step(*args)

            return tf.function(on_device, input_signature=input_signature)
        # A compiled function runs as one op wherever its call is placed, and XLA cannot reach variables on
        # another device (tensorflow.org/xla/known_issues): an uncompiled outer function places the call on the
        # variables' device, which otherwise defaults to the first GPU, e.g. under --device=cpu.
        compiled = tf.function(step, input_signature=input_signature, jit_compile=True)

        def call_on_device(*args):
            with tf.device(self._device):
                return compiled(*args)

        return tf.function(call_on_device, input_signature=input_signature)

    def batch_gradients(self, gradients_fn: Callable[..., Any]) -> Callable[..., Any]:
        """gradients_fn(*batch) -> (gradients, terms) on one device; under a strategy, the mean over all replicas
        of all workers of gradients_fn on each replica's shard of each batch tensor (rows along axis 0)."""
        if self.strategy is None:
            return gradients_fn
        replica_fn = tf.function(gradients_fn, jit_compile=self._xla)
        return lambda *batch: distribute.replica_mean(self.strategy, self.local_replicas, replica_fn, *batch)

    def check_batch_split(self, batch_name: str, batch_size: int) -> None:
        """Each gradient step splits the worker's batch evenly over its replicas."""
        if self.strategy is not None:
            distribute.check_batch_split(batch_name, batch_size, self.local_replicas)


def concrete_call(function: tf.types.experimental.PolymorphicFunction) -> Callable[..., Any]:
    """Calls function's one traced graph directly, the arguments converted here: calling the concrete function
    skips tf.function's per-call binding of the arguments to the signature."""
    concrete = function.get_concrete_function()
    return lambda *args: concrete(*(tf.constant(arg) for arg in args))


class RowLayout:
    """Named fields side by side in the last axis of one float32 array [..., width], and uint8 fields (images)
    as tensors of their own: packed as float32 they would take four times the bytes, and a cast in NumPy.

    fields: name -> (shape of one row's value, dtype to unpack to). Integer fields (actions) are exact in
    float32 below 2**24. A field of a NumPy structured dtype (Dict observations, tfrl.envs.observations) is its
    sub-fields, each placed by its own dtype (after the field's shape: a window of structured rows), and unpacks to
    {key: tensor}. The tensors cross in the order
    (rows, *uint8 fields in fields' order).
    """

    def __init__(self, fields: Mapping[str, tuple[Sequence[int], Any]]):
        flat = {}
        for name, (shape, dtype) in fields.items():
            structured = np.dtype(dtype).names if not isinstance(dtype, tf.DType) else None
            if structured:  # (name, key) stands for field `key` of the structured `name`
                flat.update({(name, key): ((*shape, *np.dtype(dtype)[key].shape), np.dtype(dtype)[key].base)
                             for key in structured})
            else:
                flat[name] = (shape, dtype)
        flat = {name: (tuple(shape), tf.as_dtype(dtype)) for name, (shape, dtype) in flat.items()}
        self._fields = {name: field for name, field in flat.items() if field[1] != tf.uint8}
        self._separate = {name: field for name, field in flat.items() if field[1] == tf.uint8}
        self._sizes = [int(np.prod(shape)) for shape, _ in self._fields.values()]
        self.width = sum(self._sizes)

    def signature(self, batch_dims: int) -> list[tf.TensorSpec]:
        """The tensors' specs, with batch_dims leading dimensions of any size."""
        lead = [None] * batch_dims
        return [tf.TensorSpec([*lead, self.width], tf.float32, name="rows")] + [
            tf.TensorSpec([*lead, *shape], dtype, name=_spec_name(name))
            for name, (shape, dtype) in self._separate.items()]

    def pack(self, arrays: Mapping[str, np.ndarray], batch_dims: int) -> tuple[np.ndarray, ...]:
        """{name: [*lead, *shape]} -> (float32 [*lead, width], *uint8 fields); lead = the first batch_dims dims."""
        def value(name):
            return arrays[name[0]][name[1]] if isinstance(name, tuple) else arrays[name]

        lead = np.shape(value(next(iter(self._fields))))[:batch_dims]
        rows = np.concatenate([np.reshape(value(name), (*lead, -1)) for name in self._fields],
                              axis=-1, dtype=np.float32)
        return (rows, *(np.asarray(value(name), np.uint8) for name in self._separate))

    def unpack(self, tensors: Sequence[tf.Tensor]) -> dict[str, tf.Tensor]:
        """In the graph: the packed tensors -> {name: [..., *shape] of the field's dtype}."""
        rows = tensors[0]
        lead = tf.shape(rows)[:-1]
        out, start = {}, 0
        for (name, (shape, dtype)), size in zip(self._fields.items(), self._sizes):
            value = tf.reshape(rows[..., start:start + size], tf.concat([lead, list(shape)], axis=0))
            _put(out, name, value if dtype == tf.float32 else tf.cast(value, dtype))
            start += size
        for name, tensor in zip(self._separate, tensors[1:]):
            _put(out, name, tensor)
        return out

    @property
    def num_tensors(self) -> int:
        return 1 + len(self._separate)


def _put(out: dict, name, value) -> None:
    """out[name] = value, or out[structured][key] = value for a structured field's (structured, key)."""
    if isinstance(name, tuple):
        out.setdefault(name[0], {})[name[1]] = value
    else:
        out[name] = value


def _spec_name(name) -> str:
    """A TensorSpec's name for a field: "obs_image" for key "image" of "obs"."""
    return "_".join(name).replace(".", "_") if isinstance(name, tuple) else name


class OutputLayout:
    """[metrics..., numerics flags, index of the flagged gradient step, *flattened weights, *row errors] in one
    float32 vector.

    The flags (tfrl.models.numerics) are those of the first gradient step of the call with a NaN or Inf, 0 if none.
    Row errors (optional): one value per trained row, e.g. DQN's |TD errors| [K, B] for prioritized replay.
    """

    def __init__(self, metric_names: Sequence[str], variables: Sequence[tf.Variable]):
        self.metric_names = tuple(metric_names)
        self._shapes = [tuple(v.shape) for v in variables]
        self._offsets = np.cumsum([len(self.metric_names) + 2] + [int(np.prod(s)) for s in self._shapes])

    def pack(self, metrics: Mapping[str, tf.Tensor], flags: tf.Tensor, flagged_step: tf.Tensor,
             variables: Sequence[tf.Variable], row_errors: tf.Tensor | None = None) -> tf.Tensor:
        """In the graph. Small integers (flags, step index) are exact in float32."""
        head = [tf.cast(metrics[name], tf.float32) for name in self.metric_names]
        head += [tf.cast(flags, tf.float32), tf.cast(flagged_step, tf.float32)]
        tail = [] if row_errors is None else [tf.reshape(row_errors, [-1])]
        return tf.concat([tf.stack(head), *[tf.reshape(v, [-1]) for v in variables], *tail], axis=0)

    def unpack(self, flat: np.ndarray) -> tuple[dict[str, float], int, int, list[np.ndarray], np.ndarray]:
        """(metrics, flags, index of the flagged step, weights, row errors (empty if none were packed))."""
        n = len(self.metric_names)
        metrics = {name: float(value) for name, value in zip(self.metric_names, flat[:n])}
        weights = [flat[start:end].reshape(shape)
                   for start, end, shape in zip(self._offsets[:-1], self._offsets[1:], self._shapes)]
        return metrics, int(flat[n]), int(flat[n + 1]), weights, flat[self._offsets[-1]:]


def finished_update(output: OutputLayout, flat: np.ndarray, optimizer, outputs_name: str,
                    gradient_step_of: Callable[[int], int]) -> LearnerUpdate:
    """The LearnerUpdate of one train call's output, or NonFiniteError naming the first bad gradient step.

    gradient_step_of(k): the run's gradient step number (from 1) of the call's k-th step (from 0). A non-finite
    step that float16 loss scaling skipped (and answered by lowering its scale) is no error.
    """
    metrics, flags, flagged_step, weights, row_errors = output.unpack(flat)
    if flags and not numerics.skipped_by_loss_scaling(optimizer):
        raise numerics.NonFiniteError(numerics.flag_names(flags, outputs_name), gradient_step_of(flagged_step))
    return LearnerUpdate(metrics=metrics, weights=weights, row_errors=row_errors if len(row_errors) else None)


def delayed_means(metrics: dict, num_steps: int, delayed: Sequence[str]) -> None:
    """A learner with a delayed actor (TD3, CrossQ) reports "actor_updates", the share of the call's num_steps that
    updated the actor, and its `delayed` metrics as sums over all steps divided by num_steps: this turns them into
    means over the steps that updated the actor (and drops them and the share where none did), in place."""
    actor_updates = metrics.pop("actor_updates") * num_steps
    for name in delayed:
        if actor_updates:
            metrics[name] *= num_steps / actor_updates
        else:
            metrics.pop(name)


def apply_gradients(optimizer, grads, variables, loss, outputs_sum, grads_to_check=None):
    """One optimizer step -> its numerics flags (tfrl.models.numerics) of the loss, the gradients and outputs_sum, one
    scalar that any NaN or Inf in the network's outputs makes non-finite.

    grads_to_check: what stands for the gradients in the check (default: all of them; the global norm is one
    scalar that any non-finite gradient makes non-finite). Not checked under loss scaling, where an overflowing
    scaled gradient is expected.
    """
    checked = numerics.gradients_to_check(grads if grads_to_check is None else grads_to_check, optimizer)
    flags = numerics.non_finite_flags(loss, checked, [outputs_sum])
    optimizer.apply(grads, variables)
    return flags


def mean_of_steps(batch: Mapping[str, tf.Tensor], gradient_step: Callable, num_metrics: int):
    """Inside a train step of K = len(batch's rows) gradient steps: gradient_step({field: the k-th batch [B, ...]})
    -> (metrics [num_metrics], numerics flags) for k = 0..K-1, in order -> (the metrics' means, the first
    flagged step's flags, that step k)."""
    num_steps = tf.shape(tf.nest.flatten(batch)[0])[0]
    sums = tf.zeros([num_metrics])
    flags, flagged_k = tf.constant(0), tf.constant(0)
    for k in tf.range(num_steps):
        step_metrics, step_flags = gradient_step({name: networks.rows_at(value, k) for name, value in batch.items()})
        sums += step_metrics
        flags, flagged_k = numerics.keep_first_flags(flags, flagged_k, step_flags, k)
    return sums / tf.cast(tf.maximum(num_steps, 1), tf.float32), flags, flagged_k

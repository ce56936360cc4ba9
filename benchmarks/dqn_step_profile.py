"""Benchmark: where a DQN train call's time goes, against the arithmetic of its gradient steps.

    python benchmarks/dqn_step_profile.py            # dqn-lunarlander's shapes: 256x256, dueling, double, batch 128
    python benchmarks/dqn_step_profile.py --xla

1. Calls: the wall time of train calls with K = 1, 2, 4, 8, 16 gradient steps, and the least-squares line
   through them: a fixed cost per call plus a cost per gradient step.
2. The arithmetic: one gradient step's matrix products (the online network forward on s and on s' for the
   double-DQN action, the backward pass, the target network's share) and Adam's update, each timed alone in
   NumPy (its BLAS), summed: what the step would cost with no framework around it.
3. The trace: tf.profiler over --trace_calls calls with K=8, read from its XPlane file: the TF ops the host ran
   per gradient step, how many, and their summed time by op type. The step's wall time less the ops' time is
   what TF's executor costs around them.

Run it alone: anything else on the machine skews the numbers.
"""

from __future__ import annotations

import collections
import pathlib
import statistics
import tempfile
import time

import numpy as np
import tensorflow as tf
from absl import app, flags

from tfrl.agents.dqn.config import DQNConfig
from tfrl.agents.dqn.learning import DQNLearner, ReplayBatch
from tfrl.commands import runtime_flags
from tfrl.envs import EnvInfo
from tfrl.hardware import runtime as runtime_lib

flags.DEFINE_integer("batch_size", 128, "Transitions per gradient step.")
flags.DEFINE_integer("calls", 200, "Timed calls per K.")
flags.DEFINE_integer("trace_calls", 20, "Calls traced by the profiler.")
FLAGS = flags.FLAGS
LUNAR = EnvInfo("LunarLander-v3", (8,), 4)
_NOT_OPS = {"Process", "Run"}  # "ExecutorState::Process" and the function's run: spans around the ops
HIDDEN = (256, 256)


def _batch(k: int, rng) -> dict:
    b = FLAGS.batch_size
    return {"obs": rng.normal(size=(k, b, 8)).astype(np.float32), "action": rng.integers(0, 4, (k, b)).astype(np.int32),
            "reward": rng.normal(size=(k, b)).astype(np.float32), "discount": np.full((k, b), 0.99, np.float32),
            "next_obs": rng.normal(size=(k, b, 8)).astype(np.float32)}


def _ms_per_call(learner, k: int) -> float:
    batch = ReplayBatch(_batch(k, np.random.default_rng(k)), False)
    for _ in range(20):
        learner.update(batch)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(FLAGS.calls):
            learner.update(batch)
        times.append((time.perf_counter() - start) / FLAGS.calls * 1e3)
    return statistics.median(times)


def _numpy_floor_ms(k: int = 8) -> float:
    """One gradient step's products and Adam's update in NumPy, ms (the target net's pass shared over k steps)."""
    rng, b = np.random.default_rng(0), FLAGS.batch_size
    sizes = [8, *HIDDEN, 5]  # dueling: value (1) + advantages (4)
    weights = [rng.normal(size=(m, n)).astype(np.float32) for m, n in zip(sizes[:-1], sizes[1:])]
    x = rng.normal(size=(b, 8)).astype(np.float32)
    params = sum(w.size + w.shape[1] for w in weights)
    slots = [np.zeros(params, np.float32) for _ in range(3)]

    def forward(inputs):
        activations = [inputs]
        for w in weights:
            activations.append(np.maximum(activations[-1] @ w, 0.0))
        return activations

    def step():
        forward(x)  # online on s' (double DQN's argmax)
        acts = forward(x)  # online on s, kept for the backward pass
        if step.count % k == 0:
            forward(np.repeat(x, k, axis=0))  # the target network on the call's k batches of s'
        step.count += 1
        grad = acts[-1]
        for w, a in zip(reversed(weights), reversed(acts[:-1])):
            _ = a.T @ grad  # dL/dW
            grad = grad @ w.T  # dL/da
        m, v, p = slots  # Adam: m, v and the parameters, elementwise
        m *= 0.9
        v *= 0.999
        p -= 1e-3 * m / (np.sqrt(v) + 1e-7)

    step.count = 0
    for _ in range(50):
        step()
    start = time.perf_counter()
    for _ in range(1000):
        step()
    return (time.perf_counter() - start)


def _trace(learner, k: int = 8) -> tuple[collections.Counter, collections.Counter, int]:
    """(summed µs by op name, count by op name, traced gradient steps) from a tf.profiler trace of train calls."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: PLC0415 - TF's own copy of the XPlane proto

    batch = ReplayBatch(_batch(k, np.random.default_rng(1)), False)
    for _ in range(10):
        learner.update(batch)
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        for _ in range(FLAGS.trace_calls):
            learner.update(batch)
        tf.profiler.experimental.stop()
        space = xplane_pb2.XSpace()
        space.ParseFromString(next(pathlib.Path(logdir).rglob("*.xplane.pb")).read_bytes())
    time_us, count = collections.Counter(), collections.Counter()
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                name = names.get(event.metadata_id, "?").strip()
                op_type = name.rsplit(":", 1)[-1]
                if ":" not in name or op_type in _NOT_OPS or "inference" in name:
                    continue  # the executor's own spans (they contain the ops), not an op: counted as the rest
                time_us[op_type] += event.duration_ps / 1e6
                count[op_type] += 1
    return time_us, count, FLAGS.trace_calls * k


def main(argv):
    del argv
    runtime = runtime_lib.apply(runtime_flags.options_from_flags())
    config = DQNConfig(hidden_sizes=HIDDEN, batch_size=FLAGS.batch_size, dueling=True, double_dqn=True)
    learner = DQNLearner(config, LUNAR, runtime)
    steps = [1, 2, 4, 8, 16]
    per_call = [_ms_per_call(learner, k) for k in steps]
    slope, intercept = np.polyfit(steps, per_call, 1)
    print(f"xla={runtime.options.xla} precision={runtime.options.mixed_precision} batch={FLAGS.batch_size}")
    print("| K | ms per call | ms per gradient step |")
    print("|---|---|---|")
    for k, ms in zip(steps, per_call):
        print(f"| {k} | {ms:.3f} | {ms / k:.3f} |")
    print(f"fit: {intercept:.3f} ms per call + {slope:.3f} ms per gradient step")
    floor = _numpy_floor_ms()
    print(f"arithmetic alone (NumPy, one gradient step's products and Adam): {floor:.3f} ms; "
          f"the in-graph step is {slope / floor:.2f}x that")
    time_us, count, traced_steps = _trace(learner)
    ops_per_step = sum(count.values()) / traced_steps
    op_ms_per_step = sum(time_us.values()) / 1e3 / traced_steps
    print(f"trace: {ops_per_step:.1f} TF ops per gradient step, {op_ms_per_step:.3f} ms of op time per step; "
          f"per op beyond its own time: {(slope - op_ms_per_step) / ops_per_step * 1e3:.1f} µs")
    print("| op type | per gradient step | µs per step |")
    print("|---|---|---|")
    for op_type, us in time_us.most_common(15):
        print(f"| {op_type} | {count[op_type] / traced_steps:.2f} | {us / traced_steps:.1f} |")


if __name__ == "__main__":
    runtime_flags.define_flags()
    app.run(main)

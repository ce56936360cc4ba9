"""Benchmark: one [128, 256] @ [256, 256] float32 matmul, the largest op of a DQN step, in a tf.function loop.

    python benchmarks/matmul_floor.py

Prints µs per matmul and GFLOP/s, for TF and for NumPy, to show what the hardware gives at this size.
"""

import time

import tensorflow as tf

ITERATIONS = 1000
FLOPS = 2 * 128 * 256 * 256

a = tf.random.normal((128, 256))
b = tf.Variable(tf.random.normal((256, 256)))


@tf.function
def chain(x):
    for _ in tf.range(ITERATIONS):
        x = tf.matmul(x, b) * 0.01  # the scale keeps values finite
    return x


chain(a)  # trace
start = time.perf_counter()
chain(a).numpy()
seconds = (time.perf_counter() - start) / ITERATIONS
print(f"tf matmul 128x256x256: {seconds * 1e6:.1f} us, {FLOPS / seconds / 1e9:.1f} GFLOP/s")

an, bn = a.numpy(), b.numpy()
start = time.perf_counter()
for _ in range(ITERATIONS):
    an @ bn
seconds = (time.perf_counter() - start) / ITERATIONS
print(f"numpy matmul 128x256x256: {seconds * 1e6:.1f} us, {FLOPS / seconds / 1e9:.1f} GFLOP/s")

"""Benchmark: the cost of prioritized replay per sampled batch, against uniform replay.

    python benchmarks/prioritized_replay.py --capacity=100000 --batch_size=128 --num_batches=4

Fills a buffer of LunarLander-shaped transitions (obs 8), then times, per train call of num_batches batches:
sampling (uniform; prioritized: strata, tree descent, weights) and, for prioritized replay, the priority update
of the sampled rows. Median of --repeats blocks of --calls calls. Run it alone.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
from absl import app, flags

from tfrl.replay import UniformReplay
from tfrl.replay.prioritized import PrioritizedReplay

flags.DEFINE_integer("capacity", 100_000, "Transitions in the buffer (it is filled).")
flags.DEFINE_integer("batch_size", 128, "B.")
flags.DEFINE_integer("num_batches", 4, "K: batches per train call.")
flags.DEFINE_integer("calls", 500, "Timed calls per block.")
flags.DEFINE_integer("repeats", 5, "Blocks; the median is reported.")
FLAGS = flags.FLAGS


def _fill(replay, rng):
    n = replay.capacity
    obs = rng.normal(size=(n, 8)).astype(np.float32)
    replay.add(obs, rng.integers(0, 4, n).astype(np.int32), rng.normal(size=n).astype(np.float32),
               np.full(n, 0.99, np.float32), obs)


def _median_us(call) -> float:
    for _ in range(20):
        call()
    blocks = []
    for _ in range(FLAGS.repeats):
        start = time.perf_counter()
        for _ in range(FLAGS.calls):
            call()
        blocks.append((time.perf_counter() - start) / FLAGS.calls * 1e6)
    return statistics.median(blocks)


def main(argv):
    del argv
    rng = np.random.default_rng(0)
    uniform = UniformReplay(FLAGS.capacity, (8,), seed=0)
    prioritized = PrioritizedReplay(FLAGS.capacity, (8,), seed=0, alpha=0.6, epsilon=1e-6)
    for replay in (uniform, prioritized):
        _fill(replay, rng)
    prioritized.update_priorities(np.arange(FLAGS.capacity), rng.exponential(size=FLAGS.capacity))
    k, b = FLAGS.num_batches, FLAGS.batch_size
    errors = rng.exponential(size=(k, b))
    uniform_us = _median_us(lambda: uniform.sample(b, k))
    sample_us = _median_us(lambda: prioritized.sample(b, k, beta=0.7))
    batch = prioritized.sample(b, k, beta=0.7)
    update_us = _median_us(lambda: prioritized.update_priorities(batch["index"], errors))
    print(f"capacity={FLAGS.capacity} K={k} B={b}: uniform sample {uniform_us:.0f} us per call; prioritized sample "
          f"{sample_us:.0f} us + priority update {update_us:.0f} us per call "
          f"({(sample_us + update_us) / k:.0f} us per sampled batch of {b})")


if __name__ == "__main__":
    app.run(main)

"""Benchmark: time of one DQN gradient step inside the train tf.function (the in-graph floor).

    python benchmarks/dqn_train_step.py --gradient_steps=4 --batch_size=128 --calls=300
    python benchmarks/dqn_train_step.py --mixed_precision=mixed_bfloat16 --xla

Builds a DQNLearner for LunarLander's shapes (obs 8, 4 actions), feeds random batches, and reports
wall and process-CPU milliseconds per call and per gradient step (median of --repeats runs). Run it
alone: anything else on the machine skews the numbers. benchmarks/compare.py imports
`random_batch`, `off_policy_train_call` and `time_calls` for its floor row.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import numpy as np
from absl import app, flags

from tfrl.agents.dqn.config import DQNConfig
from tfrl.agents.dqn.learning import DQNLearner, ReplayBatch
from tfrl.commands import runtime_flags
from tfrl.envs import EnvInfo
from tfrl.hardware import runtime as runtime_lib

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Only when run as a script, so that importing this module defines no flags."""
    flags.DEFINE_integer("gradient_steps", 4, "K: gradient steps per train call.")
    flags.DEFINE_integer("batch_size", 128, "Transitions per gradient step.")
    flags.DEFINE_list("hidden_sizes", ["256", "256"], "Q-network hidden layer sizes.")
    flags.DEFINE_bool("double_dqn", False, "Double DQN target (one more forward pass per step).")
    flags.DEFINE_integer("calls", 300, "Timed train calls per repeat.")
    flags.DEFINE_integer("repeats", 3, "Repeats; the median is reported.")
    runtime_flags.define_flags()


def random_batch(gradient_steps: int, batch_size: int, obs_shape: tuple[int, ...], num_actions: int,
                 gamma: float, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A replay.sample()-shaped batch of random transitions, arrays [K, B, ...]."""
    k, b = gradient_steps, batch_size
    return {
        "obs": rng.normal(size=(k, b, *obs_shape)).astype(np.float32),
        "action": rng.integers(0, num_actions, size=(k, b)).astype(np.int32),
        "reward": rng.normal(size=(k, b)).astype(np.float32),
        "discount": np.full((k, b), gamma, np.float32),
        "next_obs": rng.normal(size=(k, b, *obs_shape)).astype(np.float32),
    }


def random_sac_batch(gradient_steps: int, batch_size: int, obs_shape: tuple[int, ...], action_size: int,
                     gamma: float, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """SAC's random_batch: actions uniform in [-1, 1] and the standard-normal noise of its two action samples."""
    k, b, d = gradient_steps, batch_size, action_size
    normal = lambda *shape: rng.normal(size=shape).astype(np.float32)  # noqa: E731
    return {"obs": normal(k, b, *obs_shape), "next_obs": normal(k, b, *obs_shape),
            "action": rng.uniform(-1, 1, (k, b, d)).astype(np.float32), "reward": normal(k, b),
            "discount": np.full((k, b), gamma, np.float32), "noise_next": normal(k, b, d), "noise": normal(k, b, d)}


def off_policy_train_call(agent: str, config, info: EnvInfo, runtime: runtime_lib.Runtime,
                          rng: np.random.Generator) -> Callable[[], object]:
    """One train call of SAC's, TQC's or TD3's learner for `config` and `info`, on random transitions
    (random_sac_batch), K = config.gradient_steps_per_train gradient steps per call."""
    from tfrl import agents

    transitions = random_sac_batch(config.gradient_steps_per_train, config.batch_size, info.obs_shape,
                                   info.action_size, config.gamma, rng)
    if agent == "td3":
        del transitions["noise"]  # TD3's actor is deterministic: only the target smoothing's noise comes in
    learner = agents.get(agent).learner_cls(config, info, runtime)
    return lambda: learner.update(transitions)


def time_calls(call: Callable[[], object], calls: int, repeats: int, warmup: int = 20) -> tuple[float, float]:
    """(wall s, process CPU s) per call of `call`, each the median over `repeats` runs of `calls` calls."""
    for _ in range(warmup):  # trace and warm up
        call()
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(calls):
            call()
        walls.append((time.perf_counter() - wall) / calls)
        cpus.append((time.process_time() - cpu) / calls)
    return statistics.median(walls), statistics.median(cpus)


def main(argv):
    del argv
    runtime = runtime_lib.apply(runtime_flags.options_from_flags())
    config = DQNConfig(hidden_sizes=tuple(int(h) for h in FLAGS.hidden_sizes), batch_size=FLAGS.batch_size,
                       double_dqn=FLAGS.double_dqn)
    learner = DQNLearner(config, EnvInfo("LunarLander-v3", (8,), 4), runtime)
    k = FLAGS.gradient_steps
    batch = random_batch(k, FLAGS.batch_size, (8,), 4, config.gamma, np.random.default_rng(0))
    wall, cpu = time_calls(lambda: learner.update(ReplayBatch(batch, False)), FLAGS.calls, FLAGS.repeats)
    print(f"precision={FLAGS.mixed_precision} xla={FLAGS.xla} K={k} B={FLAGS.batch_size} hidden={FLAGS.hidden_sizes} "
          f"double={FLAGS.double_dqn}: {wall * 1e3:.3f} ms/call wall, {wall / k * 1e3:.3f} ms/gradient step wall, "
          f"{cpu / k * 1e3:.3f} ms/gradient step CPU")


if __name__ == "__main__":
    define_flags()
    app.run(main)

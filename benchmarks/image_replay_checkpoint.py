"""Benchmark: the frame-stack replay of an Atari run, its memory and the time to checkpoint and restore it.

    python benchmarks/image_replay_checkpoint.py                       # 100k transitions of Pong (the presets')
    python benchmarks/image_replay_checkpoint.py --transitions=20000 --env=ALE/Breakout-v5

Fills a DQN's replay (tfrl.replay.frames over uniform replay, n-step 1) with --transitions transitions of random
play on 8 training envs, then saves it in a checkpoint as a run does (tfrl.run.checkpoints: np.savez_compressed, beside
a TF checkpoint of one variable) and restores it into a fresh replay. Prints the replay's bytes in memory, the
.npz size on disk, the save and restore wall times, and checks that the restored replay samples the same batch.
"""

from __future__ import annotations

import pathlib
import platform
import tempfile
import time

import numpy as np
import tensorflow as tf
from absl import app, flags

from tfrl import envs
from tfrl.agents.dqn.agent import _make_replay
from tfrl.agents.dqn.config import DQNConfig
from tfrl.replay import NStepBuilder
from tfrl.run import checkpoints

flags.DEFINE_string("env", "ALE/Pong-v5", "An Atari id.")
flags.DEFINE_integer("transitions", 100_000, "Replay capacity, filled once.")
flags.DEFINE_integer("num_envs", 8, "Training envs stepped with random actions.")
FLAGS = flags.FLAGS


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _filled_replay(config: DQNConfig):
    env = envs.make_vector_env(FLAGS.env, FLAGS.num_envs, seed=0, training=True)
    info = envs.env_info(env, FLAGS.env)
    replay, nstep = _make_replay(config, info, seed=0), NStepBuilder(1, config.gamma, FLAGS.num_envs)
    stepper = envs.VectorStepper(env, on_episode=lambda *episode: None)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    while replay.transitions.size < config.replay_capacity:
        step = stepper.step(rng.integers(0, info.num_actions, FLAGS.num_envs))
        obs_refs, next_refs = replay.observe(step)
        replay.add(*nstep.step(obs_refs, step.action, step.reward, step.terminated, step.truncated, next_refs))
    env.close()
    print(f"filled {replay.size} transitions in {time.perf_counter() - start:.1f} s")
    return replay, info


def _bytes(replay) -> int:
    refs = replay.transitions
    return sum(a.nbytes for a in (replay.frames.frames, replay.frames.prev, refs.obs, refs.next_obs, refs.action,
                                  refs.reward, refs.discount))


def main(argv):
    del argv
    config = DQNConfig(replay_capacity=FLAGS.transitions, num_envs=FLAGS.num_envs)
    replay, info = _filled_replay(config)
    print(f"machine: {_cpu_model()}; env {FLAGS.env}, frames {info.obs_shape}")
    print(f"replay in memory: {_bytes(replay) / 1e6:.1f} MB, {_bytes(replay) / replay.size:.0f} bytes per transition "
          f"(whole stacks, twice per transition: {2 * np.prod(info.obs_shape)} bytes)")
    with tempfile.TemporaryDirectory() as run_dir:
        checkpointer = checkpoints.Checkpointer(run_dir, {"step": tf.Variable(0)})
        arrays, state = replay.checkpoint_state()
        start = time.perf_counter()
        number = checkpointer.save(1, {"replay": state}, arrays)
        saved = time.perf_counter() - start
        npz = sum(path.stat().st_size for path in pathlib.Path(run_dir).rglob("*.npz"))
        start = time.perf_counter()
        restored_arrays = checkpointer.restore(number).arrays
        fresh = _make_replay(config, info, seed=0)
        fresh.restore_checkpoint_state(restored_arrays, state)
        restored = time.perf_counter() - start
    same = np.array_equal(fresh.sample(32, 4)["obs"], replay.sample(32, 4)["obs"])
    print("| transitions | in memory | .npz on disk | save | restore | same samples after restore |")
    print("|---|---|---|---|---|---|")
    print(f"| {replay.size} | {_bytes(replay) / 1e6:.0f} MB | {npz / 1e6:.0f} MB | {saved:.1f} s | {restored:.1f} s "
          f"| {same} |")


if __name__ == "__main__":
    app.run(main)

"""Benchmark: EnvPool's LunarLander against gymnasium's, as tfrl makes them (tfrl.envs.make_vector_env).

    python benchmarks/envpool_lunarlander.py --episodes=1000

1. Dynamics: --episodes episodes of a uniformly random policy on 16 envs in each implementation; mean, std and
   mean length of the returns. The two are separate implementations (C++ and Python over the same Box2D), so
   equal seeds give different episodes: only their distributions can be compared.
2. Speed: env steps/s of 16 envs stepped with random actions, alternating gymnasium's sync vector env and
   EnvPool, --blocks blocks of 2000 vector steps each.
"""

from __future__ import annotations

import time

import numpy as np
from absl import app, flags

from tfrl import envs

flags.DEFINE_integer("episodes", 1000, "Random-policy episodes per implementation.")
flags.DEFINE_integer("blocks", 3, "Timed blocks per implementation, alternated.")
FLAGS = flags.FLAGS
MODES = ("sync", "envpool")


def random_returns(mode: str) -> tuple[np.ndarray, np.ndarray]:
    env = envs.make_vector_env("LunarLander-v3", 16, seed=0, vector_mode=mode, training=True)
    rng = np.random.default_rng(0)
    episodes = []
    while len(episodes) < FLAGS.episodes:
        _, _, terminated, truncated, infos = env.step(rng.integers(0, 4, 16))
        episodes += envs.finished_episodes(terminated | truncated, infos)
    env.close()
    returns, lengths = np.array(episodes[:FLAGS.episodes]).T
    return returns, lengths


def steps_per_second(mode: str) -> float:
    env = envs.make_vector_env("LunarLander-v3", 16, seed=0, vector_mode=mode, training=True)
    actions = np.random.default_rng(0).integers(0, 4, (2000, 16))
    start = time.perf_counter()
    for action in actions:
        env.step(action)
    elapsed = time.perf_counter() - start
    env.close()
    return actions.size / elapsed


def main(argv):
    del argv
    print("| implementation | random-policy return, mean ± std (episodes) | mean length |")
    print("|---|---|---|")
    for mode in MODES:
        returns, lengths = random_returns(mode)
        print(f"| {mode} | {returns.mean():.1f} ± {returns.std():.1f} ({len(returns)}) | {lengths.mean():.1f} |",
              flush=True)
    speeds = {mode: [] for mode in MODES}
    for _ in range(FLAGS.blocks):
        for mode in MODES:
            speeds[mode].append(steps_per_second(mode))
    print("| implementation | env steps/s, 16 envs, per block |")
    print("|---|---|")
    for mode in MODES:
        print(f"| {mode} | {' / '.join(f'{s:.0f}' for s in speeds[mode])} |")


if __name__ == "__main__":
    app.run(main)

"""Benchmark: an env of EnvPool against gymnasium's, as tfrl makes them (tfrl.envs.make_vector_env).

    python benchmarks/envpool_against_gymnasium.py --episodes=1000                       # LunarLander-v3
    python benchmarks/envpool_against_gymnasium.py --env=HalfCheetah-v5 --episodes=48    # MuJoCo (extra mujoco)

1. Dynamics: --episodes episodes of a uniformly random policy on 16 envs in each implementation; mean, std and
   mean length of the returns. The two are separate implementations (C++ and Python over the same Box2D or
   MuJoCo), so equal seeds give different episodes: only their distributions can be compared.
2. Speed: env steps/s of 16 envs stepped with random actions, alternating gymnasium's sync vector env and
   EnvPool, --blocks blocks of 2000 vector steps each.
3. EnvPool's threads: its pool of 16 envs stepped directly with each of --pool_threads threads (EnvPool's own
   default is a thread per env; tfrl makes one per core at most), alternated, --blocks blocks each.
"""

from __future__ import annotations

import time

import numpy as np
from absl import app, flags

from tfrl import envs

flags.DEFINE_string("env", "LunarLander-v3", "A gymnasium id that EnvPool implements too.")
flags.DEFINE_integer("episodes", 1000, "Random-policy episodes per implementation.")
flags.DEFINE_integer("blocks", 3, "Timed blocks per implementation, alternated.")
flags.DEFINE_list("pool_threads", ["1", "2", "16"], "EnvPool thread counts timed in part 3.")
FLAGS = flags.FLAGS
MODES = ("sync", "envpool")


def random_actions(space, count: int, rng: np.random.Generator) -> np.ndarray:
    """[count, 16, ...] uniformly random actions of a Discrete or Box action space."""
    if hasattr(space, "n"):
        return rng.integers(0, space.n, (count, 16)).astype(np.int32)
    return rng.uniform(space.low, space.high, (count, 16, *space.shape)).astype(np.float32)


def random_returns(mode: str) -> tuple[np.ndarray, np.ndarray]:
    env = envs.make_vector_env(FLAGS.env, 16, seed=0, vector_mode=mode, training=True)
    rng = np.random.default_rng(0)
    episodes = []
    while len(episodes) < FLAGS.episodes:
        _, _, terminated, truncated, infos = env.step(random_actions(env.single_action_space, 1, rng)[0])
        episodes += envs.finished_episodes(terminated | truncated, infos)
    env.close()
    returns, lengths = np.array(episodes[:FLAGS.episodes]).T
    return returns, lengths


def random_steps_per_second(env) -> float:
    """Env steps/s of 16 envs over 2000 vector steps with random actions; closes env."""
    actions = random_actions(env.single_action_space, 2000, np.random.default_rng(0))
    start = time.perf_counter()
    for action in actions:
        env.step(action)
    elapsed = time.perf_counter() - start
    env.close()
    return 2000 * 16 / elapsed


def steps_per_second(mode: str) -> float:
    return random_steps_per_second(envs.make_vector_env(FLAGS.env, 16, seed=0, vector_mode=mode, training=True))


def pool_steps_per_second(threads: int) -> float:
    import envpool  # noqa: PLC0415 - the envpool extra

    pool = envpool.make_gymnasium(FLAGS.env, num_envs=16, seed=0, num_threads=threads)
    pool.reset()
    return random_steps_per_second(pool)


def print_speeds(label: str, timers: dict) -> None:
    """Times each of `timers` (name: a function returning env steps/s) in --blocks alternated blocks."""
    speeds = {name: [] for name in timers}
    for _ in range(FLAGS.blocks):
        for name, timer in timers.items():
            speeds[name].append(timer())
    print(f"| {label} | env steps/s, 16 envs, per block |")
    print("|---|---|")
    for name, values in speeds.items():
        print(f"| {name} | {' / '.join(f'{s:.0f}' for s in values)} |")


def main(argv):
    del argv
    print("| implementation | random-policy return, mean ± std (episodes) | mean length |")
    print("|---|---|---|")
    for mode in MODES:
        returns, lengths = random_returns(mode)
        print(f"| {mode} | {returns.mean():.1f} ± {returns.std():.1f} ({len(returns)}) | {lengths.mean():.1f} |",
              flush=True)
    print_speeds("implementation", {mode: lambda mode=mode: steps_per_second(mode) for mode in MODES})
    print_speeds("EnvPool threads", {int(t): lambda t=int(t): pool_steps_per_second(t) for t in FLAGS.pool_threads})


if __name__ == "__main__":
    app.run(main)

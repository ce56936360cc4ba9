"""Benchmark: the greedy return of every checkpoint of a run, on the periodic and on the final evaluation's episodes.

    python scripts/train.py --agent=a2c --env=LunarLander-v2 --seed=1 --run_dir=runs/a2c-ll-s1 \
        --keep_checkpoints=0 --hp=checkpoint_interval=50000
    python benchmarks/checkpoint_curve.py --run_dir=runs/a2c-ll-s1 --episodes=100

Per checkpoint, `--episodes` greedy episodes twice: on the env seeds of the run's periodic evaluations (run seed
+ tfrl.run.evaluation.PERIODIC_SEED_OFFSET, what keep_best_policy selects on) and on those of its final evaluation
(+ FINAL_SEED_OFFSET, which the selection never sees). How far the two disagree is how much a selection on the
first is worth; the best of the second is the best any selection among the checkpoints could export
(docs/notes/2026-12-03-a2c-keep-best-policy.md). Keep every checkpoint while training
(--keep_checkpoints=0): only the listed ones are evaluated.

Rows go to stdout as JSON lines (and appended to --out), then a markdown table.
"""

from __future__ import annotations

import json
import pathlib

from absl import flags

from tfrl import cli
from tfrl.errors import UsageError

flags.DEFINE_string("run_dir", None, "The training run whose checkpoints are evaluated.")
flags.DEFINE_integer("episodes", 100, "Greedy episodes per checkpoint and seed set.", lower_bound=1)
flags.DEFINE_string("out", None, "JSON-lines file to append the rows to.")
FLAGS = flags.FLAGS


def checkpoint_curve(run_dir: pathlib.Path, episodes: int) -> list[dict]:
    """One row per listed checkpoint, oldest first: env step, periodic-seed and final-seed mean and std."""
    from tfrl.models import serving  # TensorFlow: after the flags are parsed
    from tfrl.run import checkpoints, evaluation, runs

    run_config = runs.read_config(run_dir)
    numbers = sorted(checkpoints.Checkpointer(run_dir, {}).numbers())
    if not numbers:
        raise UsageError(f"--run_dir: {run_dir} has no checkpoint")
    rows = []
    for number in numbers:
        loaded = runs.load_policy(run_dir, number)
        policy = serving.traced_policy(loaded.policy, loaded.env.obs_shape)
        row = {"checkpoint": number, "env_step": loaded.env_step, "episodes": episodes}
        for name, offset in (("periodic", evaluation.PERIODIC_SEED_OFFSET), ("final", evaluation.FINAL_SEED_OFFSET)):
            returns = evaluation.evaluate(policy, run_config.env_id, episodes, seed=run_config.seed + offset)
            row[f"{name}_return_mean"], row[f"{name}_return_std"] = float(returns.mean()), float(returns.std())
        rows.append(row)
    return rows


def main(argv):
    cli.no_extra_args(argv)
    if not FLAGS.run_dir or not pathlib.Path(FLAGS.run_dir).is_dir():
        raise UsageError(f"--run_dir must be a run directory, got {FLAGS.run_dir!r}")
    rows = checkpoint_curve(pathlib.Path(FLAGS.run_dir), FLAGS.episodes)
    for row in rows:
        print(json.dumps(row), flush=True)
        if FLAGS.out:
            with open(FLAGS.out, "a") as f:
                f.write(json.dumps({"run_dir": FLAGS.run_dir, **row}) + "\n")
    print(f"\n| checkpoint | env steps | periodic episodes ({FLAGS.episodes}) | final episodes ({FLAGS.episodes}) |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['checkpoint']} | {r['env_step']} "
              f"| {r['periodic_return_mean']:.1f} ± {r['periodic_return_std']:.1f} "
              f"| {r['final_return_mean']:.1f} ± {r['final_return_std']:.1f} |")


if __name__ == "__main__":
    cli.run(main)  # bad input: one line, exit code 2

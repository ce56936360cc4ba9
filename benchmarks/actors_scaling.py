"""Benchmark: env steps per second of PPO on LunarLander with its envs in this process or in N Ray actors
(tfrl.rollout_actors, --actors), on the plain env and on one that sleeps 2 ms per step (benchmarks/slow_envs.py).

    python benchmarks/actors_scaling.py --actors=0,1,2,4 --envs=lunarlander,slow --rollouts=8

Each configuration is one tfrl.train run of the ppo-lunarlander preset with rollouts of --rollout_length steps of
its 16 envs, a log record per rollout and no evaluation; the rate is the mean of the log records' env_steps_per_s
after the first --warmup ones (which hold Ray's and the actors' start), collection and training together, as a
user's run sees it. actors=0 is the in-process vector env ("sync", one process; "async", a process per env, also
timed with --async_baseline). Configurations alternate in --repeats rounds. Prints a markdown table and appends
each run to --out (JSON lines).
"""

from __future__ import annotations

import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np
from absl import app, flags

BENCHMARKS = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS.parent))  # tfrl from this checkout
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCHMARKS), os.environ.get("PYTHONPATH")]))
sys.path.insert(0, str(BENCHMARKS))

import tfrl  # noqa: E402
import slow_envs  # noqa: E402

flags.DEFINE_list("actors", ["0", "1", "2", "4"], "Actor counts (0: the envs in this process).")
flags.DEFINE_list("envs", ["lunarlander", "slow"], "lunarlander, slow (2 ms sleep per step).")
flags.DEFINE_integer("rollouts", 8, "Rollouts per run.")
flags.DEFINE_integer("warmup", 2, "Leading log records left out of the rate.")
flags.DEFINE_integer("rollout_length", 128, "Vector steps per rollout (the preset's 16 envs each).")
flags.DEFINE_integer("repeats", 1, "Rounds over all configurations, alternated.")
flags.DEFINE_boolean("async_baseline", True, "Also time actors=0 with gymnasium's async vector env.")
flags.DEFINE_string("out", str(BENCHMARKS / "results" / "actors_scaling.jsonl"), "JSON lines, appended.")
FLAGS = flags.FLAGS

ENVS = {"lunarlander": "LunarLander-v3", "slow": slow_envs.slow_lunarlander}


def one_run(env_name: str, actors: int, vector_mode: str) -> dict:
    steps = 16 * FLAGS.rollout_length
    hp = {"total_env_steps": steps * FLAGS.rollouts, "rollout_length": FLAGS.rollout_length, "log_interval": steps,
          "eval_interval": 0, "checkpoint_interval": 0, "final_eval_episodes": 1}
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        tfrl.train("ppo", ENVS[env_name], preset="ppo-lunarlander", hp=hp, run_dir=pathlib.Path(tmp) / "run",
                   actors=actors, vector_mode=vector_mode, export=False, verbose=0, progress_bar=False)
        wall = time.perf_counter() - start
        records = [json.loads(line) for line in (pathlib.Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"][FLAGS.warmup:]
    rates = [r["env_steps_per_s"] for r in train]
    actor_rates = [r["actor_env_steps_per_s_mean"] for r in train if "actor_env_steps_per_s_mean" in r]
    return {"env": env_name, "actors": actors, "vector_mode": vector_mode, "env_steps_per_s": float(np.mean(rates)),
            "env_steps_per_s_min": float(np.min(rates)), "env_steps_per_s_max": float(np.max(rates)),
            "actor_env_steps_per_s": float(np.mean(actor_rates)) if actor_rates else None,
            "records": len(rates), "wall_s": round(wall, 1)}


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except (OSError, StopIteration):
        return platform.processor()


def main(argv):
    del argv
    configs = [(env, int(n), "sync") for env in FLAGS.envs for n in FLAGS.actors]
    if FLAGS.async_baseline:
        configs += [(env, 0, "async") for env in FLAGS.envs]
    machine = {"cpu": cpu_model(), "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M")}
    results = []
    for repeat in range(FLAGS.repeats):
        for env, actors, mode in configs:
            result = {**one_run(env, actors, mode), "repeat": repeat, **machine}
            print(json.dumps(result), flush=True)
            results.append(result)
            with open(FLAGS.out, "a") as out:
                out.write(json.dumps(result) + "\n")
    print(f"\n{machine['cpu']}, {machine['cpus']} CPUs, {machine['date']}\n")
    print("| env | envs stepped in | env steps/s (mean of runs) | per actor, stepping alone |")
    print("|---|---|---|---|")
    for env, actors, mode in configs:
        runs = [r for r in results if (r["env"], r["actors"], r["vector_mode"]) == (env, actors, mode)]
        where = f"{actors} actor{'s' if actors > 1 else ''}" if actors else f"this process ({mode})"
        per_actor = [r["actor_env_steps_per_s"] for r in runs if r["actor_env_steps_per_s"]]
        rates = " / ".join(f"{r['env_steps_per_s']:.0f}" for r in runs)
        actor_rates = " / ".join(f"{x:.0f}" for x in per_actor) or "-"
        print(f"| {env} | {where} | {rates} | {actor_rates} |")


if __name__ == "__main__":
    app.run(main)

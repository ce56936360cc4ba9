"""Benchmark: what a Dict observation costs. CartPole-v1 against DictCartPole-v0, the same env whose observation
is {"a": x and x_dot, "b": theta and theta_dot}, keys that concatenate (in the Dict's sorted order) to
CartPole's own vector, so the networks compute the same function of the same numbers.

    python benchmarks/dict_overhead.py --agents=dqn,ppo --pairs=3

Per agent, --pairs pairs of runs, flat then Dict, one process at a time (alternated, so that drift hits both),
each the agent's CartPole preset cut to --env_steps with evaluations and checkpoints off, TensorFlow on one
thread. Per run: env
steps/s over the training part (the mean of metrics.jsonl's "train" records' rates after the first, which holds
the tracing; run_presets.py divides the steps by the seconds instead) and the process wall time.
Output: one JSON line per run (appended to --out) and a markdown table: the median over pairs of each side and
the median of the per-pair ratios Dict / flat.
"""

from __future__ import annotations

import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
FLAT_ID, DICT_ID = "CartPole-v1", "dict_overhead:DictCartPole-v0"


class DictCartPole(CartPoleEnv):
    """CartPole with its observation split into two keys, concatenating back to the same vector: a Dict env
    written as such (no wrapper of its own), registered with CartPole-v1's time limit."""

    def __init__(self):
        super().__init__()
        low, high = self.observation_space.low, self.observation_space.high
        self.observation_space = gym.spaces.Dict({"a": gym.spaces.Box(low[:2], high[:2], dtype=np.float32),
                                                  "b": gym.spaces.Box(low[2:], high[2:], dtype=np.float32)})

    def reset(self, *, seed=None, options=None):
        observation, info = super().reset(seed=seed, options=options)
        return {"a": observation[:2], "b": observation[2:]}, info

    def step(self, action):
        observation, *rest = super().step(action)
        return {"a": observation[:2], "b": observation[2:]}, *rest


gym.register(id="DictCartPole-v0", entry_point=DictCartPole, max_episode_steps=500)


def train(agent: str, env_id: str, env_steps: int, seed: int, run_dir: pathlib.Path) -> dict:
    command = [sys.executable, str(REPO_ROOT / "scripts" / "train.py"), f"--agent={agent}", f"--env={env_id}",
               f"--preset={agent}-cartpole", f"--seed={seed}", f"--run_dir={run_dir}", "--export_base_path=",
               f"--hp=total_env_steps={env_steps}", "--hp=eval_interval=0", "--hp=checkpoint_interval=0",
               f"--hp=log_interval={env_steps // 10}", "--hp=final_eval_episodes=5", "--hp=keep_best_policy=false",
               "--intra_op_threads=1", "--inter_op_threads=1"]  # one core each: less sensitive to other jobs
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "benchmarks"))
    start = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if completed.returncode:
        raise SystemExit(f"{agent} {env_id} failed:\n{completed.stderr[-3000:]}")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    speeds = [r["env_steps_per_s"] for r in records if r["kind"] == "train"][1:]  # the first includes tracing
    return {"agent": agent, "env": env_id, "seed": seed, "env_steps": env_steps, "process_wall_s": round(wall, 1),
            "env_steps_per_s": round(statistics.mean(speeds), 1)}


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", default="dqn,ppo")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--env_steps", type=int, default=50_000)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    lines = ["| agent | flat env steps/s | Dict env steps/s | Dict / flat per pair (median [min, max]) |",
             "|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for agent in args.agents.split(","):
            rows = {FLAT_ID: [], DICT_ID: []}
            for pair in range(args.pairs):
                for env_id in (FLAT_ID, DICT_ID):
                    side = "dict" if env_id == DICT_ID else "flat"
                    row = train(agent, env_id, args.env_steps, pair, pathlib.Path(tmp) / f"{agent}-{pair}-{side}")
                    row["load_1min"] = round(os.getloadavg()[0], 2)
                    rows[env_id].append(row)
                    print(json.dumps(row), flush=True)
                    if args.out:
                        with open(args.out, "a") as f:
                            f.write(json.dumps(row) + "\n")
            flat, structured = ([r["env_steps_per_s"] for r in rows[k]] for k in (FLAT_ID, DICT_ID))
            ratios = [d / f for f, d in zip(flat, structured)]
            lines.append(f"| {agent} | {statistics.median(flat):.0f} | {statistics.median(structured):.0f} | "
                         f"{statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}] |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""Benchmark: train a preset on several seeds, one after another, and print a markdown table.

    python benchmarks/run_presets.py --agent=dqn --env=LunarLander-v2 --preset=dqn-lunarlander --seeds=0,1,2

Each seed is a separate `scripts/train.py` process (never two at once: they would share the CPU).
Per seed: the final greedy evaluation (mean return over the preset's final_eval_episodes), the
process wall time, and env steps/s over the training part (from metrics.jsonl, evaluations excluded).
With keep_best_policy (tfrl.run.best_policy) also the best policy's final evaluation, on the same episodes,
and the env step it comes from: that is the policy train.py exports. Each evaluation as
[env step, seconds of the run loop, mean return], for time-to-return curves.
For envs that put their episode's optimal return in reset's info (tfrl's example envs: tfrl/envs/example_envs.py),
also --optimal_episodes greedy episodes of the exported policy, played here one env at a time on seeds 30000,
30001, ..., beside the optimal return of those same episodes.
--export_episodes=N also plays N episodes with the exported SavedModel (tfrl.load_policy, which carries a recurrent
policy's state through the SavedModel's signature) on the final evaluation's env seeds.
Results are appended as JSON lines to --out, and the table goes to stdout for docs/benchmarks.md.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tempfile
import time

from absl import app, flags

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "benchmarks"))  # benchmarks/stats.py, also when run through runpy
import stats  # noqa: E402

flags.DEFINE_string("agent", "dqn", "Agent name.")
flags.DEFINE_string("env", "LunarLander-v2", "Environment id.")
flags.DEFINE_string("preset", "auto", "Preset name (see tfrl/presets/).")
flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds, run one after another.")
flags.DEFINE_multi_string("extra", [], "Extra flags passed to train.py, e.g. --extra=--inter_op_threads=2.")
flags.DEFINE_string("out", None, "JSON-lines file to append results to.")
flags.DEFINE_string("runs_dir", None, "Keep the runs here (<runs_dir>/seed<N>), e.g. for tfrl plot; default: a "
                    "temporary directory, deleted.")
flags.DEFINE_integer("optimal_episodes", 100, "Episodes of the exported policy against the optimal return, for "
                     "envs whose reset info holds 'optimal_return' (0: none).")
flags.DEFINE_integer("export_episodes", 0, "Episodes of the exported SavedModel, on the final evaluation's seeds "
                     "(0: none).")
FLAGS = flags.FLAGS


def run_seed(seed: int, run_dir: pathlib.Path) -> dict:
    cmd = [sys.executable, str(REPO_ROOT / "scripts" / "train.py"), f"--agent={FLAGS.agent}", f"--env={FLAGS.env}",
           f"--preset={FLAGS.preset}", f"--seed={seed}", f"--run_dir={run_dir}", *FLAGS.extra]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"seed {seed} failed with exit code {proc.returncode}")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    final = [r for r in records if r["kind"] == "final_eval"][-1]
    best = [r for r in records if r["kind"] == "best_eval"]
    evals = [r for r in records if r["kind"] in ("eval", "final_eval")]
    train_records = [r for r in records if r["kind"] == "train"]
    return {
        "agent": FLAGS.agent, "env": FLAGS.env, "preset": FLAGS.preset, "seed": seed,
        "return_mean": final["return_mean"], "return_std": final["return_std"], "episodes": final["episodes"],
        "env_steps": final["env_step"], "process_wall_s": round(wall, 1),
        "train_loop_s": final["wall_time_s"],
        "env_steps_per_s": stats.training_rate(train_records),
        "num_evals": len(evals),
        "evals": [[r["env_step"], r["wall_time_s"], round(r["return_mean"], 1)] for r in evals],
        "command": " ".join(cmd[1:]).replace(str(REPO_ROOT) + "/", ""),
        **({"best_return_mean": best[-1]["return_mean"], "best_return_std": best[-1]["return_std"],
            "best_env_step": best[-1]["best_env_step"]} if best else {}),
    }


def against_optimal(saved_model: str, env_id: str, env_kwargs: dict, episodes: int) -> dict:
    """The exported greedy policy's mean return and the optimal one over the same episodes, when the env
    reports its episodes' optimal return at reset; {} otherwise."""
    import numpy as np

    import tfrl
    from tfrl import envs
    from tfrl.models.policy_memory import reset_episodes

    env = envs.as_spec(env_id, env_kwargs).make()  # observations as the export takes them; tfrl's id aliases
    if "optimal_return" not in env.reset(seed=0)[1] or not episodes:
        return {}
    policy, returns, optimal = tfrl.load_policy(saved_model), [], []
    for episode in range(episodes):
        obs, info = env.reset(seed=30_000 + episode)
        reset_episodes(policy)  # a policy with memory starts each episode from a zero state
        optimal.append(info["optimal_return"])
        returns.append(0.0)
        done = False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy(obs))
            returns[-1] += reward
            done = terminated or truncated
    return {"episodes_vs_optimal": episodes, "return_vs_optimal": round(float(np.mean(returns)), 4),
            "optimal_return": round(float(np.mean(optimal)), 4)}


def export_return(saved_model: str, env_id: str, env_kwargs: dict, seed: int, episodes: int) -> dict:
    """The exported SavedModel's mean return over `episodes` on the final evaluation's env seeds; {} for 0."""
    if not episodes:
        return {}
    import tfrl
    from tfrl import envs
    from tfrl.run import evaluation

    returns = evaluation.evaluate(tfrl.load_policy(saved_model), envs.as_spec(env_id, env_kwargs), episodes,
                                  seed=seed + evaluation.FINAL_SEED_OFFSET)
    return {"export_episodes": episodes, "export_return_mean": round(float(returns.mean()), 2),
            "export_return_std": round(float(returns.std()), 2)}


def env_kwargs_of(run_dir: pathlib.Path) -> dict:
    return json.loads((run_dir / "config.json").read_text()).get("env_kwargs") or {}


def main(argv):
    del argv
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if FLAGS.runs_dir:
            tmp = FLAGS.runs_dir
            pathlib.Path(tmp).mkdir(parents=True, exist_ok=True)
        for seed in map(int, FLAGS.seeds):
            run_dir = pathlib.Path(tmp) / f"seed{seed}"
            row = run_seed(seed, run_dir)
            saved_model = json.loads((run_dir / "result.json").read_text())["saved_model"]
            row.update(against_optimal(saved_model, FLAGS.env, env_kwargs_of(run_dir), FLAGS.optimal_episodes))
            row.update(export_return(saved_model, FLAGS.env, env_kwargs_of(run_dir), seed, FLAGS.export_episodes))
            rows.append(row)
            print(json.dumps(row), flush=True)
            if FLAGS.out:
                with open(FLAGS.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
    print_table(rows)


def print_table(rows: list[dict]) -> None:
    with_best = any("best_return_mean" in r for r in rows)
    with_optimal = any("optimal_return" in r for r in rows)
    best_header = " best policy's return (from env step) |" if with_best else ""
    optimal_header = " export's return / optimal (episodes) |" if with_optimal else ""
    print(f"\n| seed | greedy return (episodes) |{best_header}{optimal_header} env steps | wall time (s) | "
          "env steps/s (training) |")
    print("|---|---|---|---|---|" + ("---|" if with_best else "") + ("---|" if with_optimal else ""))
    for r in rows:
        best_cell = (f" {r['best_return_mean']:.1f} ± {r['best_return_std']:.1f} ({r['best_env_step']}) |"
                     if "best_return_mean" in r else " - |" if with_best else "")
        optimal_cell = (f" {r['return_vs_optimal']:.3f} / {r['optimal_return']:.3f} ({r['episodes_vs_optimal']}) |"
                        if "optimal_return" in r else " - |" if with_optimal else "")
        print(f"| {r['seed']} | {r['return_mean']:.3f} ± {r['return_std']:.3f} ({r['episodes']}) |{best_cell}"
              f"{optimal_cell} {r['env_steps']} | {r['process_wall_s']} | {r['env_steps_per_s']} |")


if __name__ == "__main__":
    app.run(main)

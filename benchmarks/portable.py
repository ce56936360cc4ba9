"""LiteRT and ONNX policies against their SavedModel: parity, greedy returns, latency, size and start-up time.

    python benchmarks/portable.py                      # trains the five presets once (seed 0), then measures
    python benchmarks/portable.py --tasks=dqn-cartpole --runs_dir=runs/portable

For each task (a preset's run, trained with `tfrl train` unless its run dir already holds a finished run) the
run is exported three times (LiteRT float32 + ONNX, LiteRT float16, LiteRT int8), each with its parity check (kept
when it fails: its result is part of the table) on
1,000 recorded observations, and every policy plays 100 greedy episodes on the same env seeds. Latency: the
median time of one call, one observation and a batch of 64, everything on one thread (TF's intra- and inter-op
threads 1, LiteRT num_threads 1, ONNX Runtime intra-op 1); the NumPy mirror is the one DQN acts with. Start-up:
a fresh process's wall time from start to its first action (`import tfrl`, load, one call). Results: one JSON line
per task in --out and markdown tables on stdout.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import time

import numpy as np

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
TASKS = {  # name: (agent, env id)
    "dqn-cartpole": ("dqn", "CartPole-v1"),
    "ppo-lunarlander": ("ppo", "LunarLander-v3"),
    "sac-pendulum": ("sac", "Pendulum-v1"),
    "dqn-catch": ("dqn", "tfrl/Catch-v0"),
    "ppo-lstm-cartpolenovel": ("ppo", "tfrl/CartPoleNoVel-v1"),  # memory: the state carried by every format
}
VARIANTS = {"litert": ("litert", "none"), "litert-float16": ("litert", "float16"), "litert-int8": ("litert", "int8"),
            "onnx": ("onnx", "none")}
EVAL_SEED = 10_000
START_UP = """
import sys, time, numpy as np
start = float(sys.argv[2])
import tfrl
policy = tfrl.load_policy(sys.argv[1])
policy(np.load(sys.argv[3])[0])
print(time.time() - start)
"""


def train(task: str, runs_dir: pathlib.Path) -> pathlib.Path:
    agent, env_id = TASKS[task]
    run_dir = runs_dir / task
    if not (run_dir / "result.json").exists():
        subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "train.py"), f"--agent={agent}",
                        f"--env={env_id}", f"--preset={task}", "--seed=0", f"--run_dir={run_dir}",
                        "--export_base_path="], check=True)
    return run_dir


def export_variants(run_dir: pathlib.Path, out: pathlib.Path) -> dict[str, pathlib.Path]:
    """{variant: its file}, and "saved_model": the first export's version directory."""
    from tfrl.run import runs
    from tfrl.models.portable import convert

    files, versions = {}, {}
    for formats, quantize in ((("litert", "onnx"), "none"), (("litert",), "float16"), (("litert",), "int8")):
        version = runs.export_run(run_dir, out, "policy",
                                  finisher=lambda env, f=formats, q=quantize: convert.finisher(f, q, env, allow_mismatch=True))
        for name in formats:
            variant = name if quantize == "none" else f"{name}-{quantize}"
            files[variant], versions[variant] = version / convert.FILES[name], version
    files["saved_model"] = versions["onnx"]
    return files


def median_call_us(policy, batch, repeats: int) -> float:
    """A policy with memory steps its kept state, one per row of `batch`."""
    from tfrl.models.policy_memory import reset_episodes

    reset_episodes(policy)
    policy(batch)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        policy(batch)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def start_up_s(path: pathlib.Path, batch_file: pathlib.Path) -> float:
    """Median of 3 fresh processes: start to first action."""
    runs_ = [float(subprocess.run([sys.executable, "-c", START_UP, str(path), repr(time.time()), str(batch_file)],
                                  capture_output=True, text=True, check=True, cwd=REPO_ROOT).stdout.split()[-1])
             for _ in range(3)]
    return statistics.median(runs_)


def measure(task: str, run_dir: pathlib.Path, out: pathlib.Path) -> dict:
    import tfrl
    from tfrl import envs
    from tfrl.models import export, networks, serving
    from tfrl.run import evaluation, runs
    from tfrl.models.portable import parity

    files = export_variants(run_dir, out / task)
    reference = serving.load(files["saved_model"])
    record = runs.read_config(run_dir)
    env = envs.as_spec(record.env_id, record.env_kwargs)
    batch = parity.recorded_observations(reference, env, 64, seed=EVAL_SEED)
    np.save(out / f"{task}-batch.npy", batch)
    policies = {"saved_model": reference.policy, **{v: tfrl.load_policy(files[v]) for v in VARIANTS}}
    model = runs.load_policy(run_dir).policy.model
    if record.agent == "dqn" and networks.acts_in_numpy(model):  # an MLP: the mirror DQN acts with
        mirror = networks.NumpyQNetwork(model)
        policies["numpy_mirror"] = lambda obs: np.argmax(mirror(obs), axis=-1)
    result = {"task": task, "agent": record.agent, "env_id": record.env_id, "variants": {}}
    for name, policy in policies.items():
        returns = evaluation.evaluate(policy, env, 100, seed=EVAL_SEED)
        entry = {"return_mean": float(np.mean(returns)), "return_std": float(np.std(returns)),
                 "us_one": median_call_us(policy, batch[:1], 2000), "us_64": median_call_us(policy, batch, 500)}
        if name in VARIANTS:
            portable = export.read_metadata(files[name].parent)["portable"][VARIANTS[name][0]]
            entry.update(parity=portable["parity"], bytes=files[name].stat().st_size,
                         start_s=start_up_s(files[name], out / f"{task}-batch.npy"))
        elif name == "saved_model":
            entry.update(bytes=sum(p.stat().st_size for p in files[name].rglob("*") if p.is_file()),
                         start_s=start_up_s(files[name], out / f"{task}-batch.npy"))
        result["variants"][name] = entry
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--runs_dir", default="runs/portable")
    parser.add_argument("--out", default=str(REPO_ROOT / "benchmarks" / "results" / "portable.jsonl"))
    args = parser.parse_args()
    runs_dir = pathlib.Path(args.runs_dir)
    run_dirs = {task: train(task, runs_dir) for task in args.tasks.split(",")}
    import tensorflow as tf  # after the training subprocesses; one thread for the measurements

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    for task, run_dir in run_dirs.items():
        result = measure(task, run_dir, runs_dir / "exports")
        result["cpu"] = _cpu_model()
        with open(args.out, "a") as f:
            f.write(json.dumps(result) + "\n")
        print(json.dumps(result), flush=True)


def _cpu_model() -> str:
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    main()

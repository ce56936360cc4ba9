"""Learning curves from runs' metrics.jsonl: greedy evaluation return vs env steps, as a PNG.

    tfrl plot --runs=runs/dqn-LunarLander-v3-s0-*,runs/dqn-LunarLander-v3-s1-* --out=curve.png

Runs whose config.json differs only in the seed (same agent, env id, env keyword arguments and
hyperparameters) are one curve: the mean over seeds, shaded from min to max, drawn at the env steps every seed has evaluated
(a run still in progress shortens its group's curve). A run without config.json
is a curve of its own. The points are the "eval" records, and the "final_eval"
record (more episodes) where no "eval" exists at that step. Orphan records of
crashed-and-resumed runs are dropped (tfrl.run.metrics.read_metrics).
Needs matplotlib: pip install 'tfrl[plot]'.
"""

from __future__ import annotations

import glob
import json
import math
import pathlib

import numpy as np
from absl import flags

from tfrl import cli, errors
from tfrl.errors import UsageError

flags.DEFINE_list("runs", None, "Run directories (or glob patterns), comma separated.")
flags.DEFINE_string("out", "curve.png", "Output PNG file.")
flags.DEFINE_string("title", None, "Plot title; default: the env id(s).")

FLAGS = flags.FLAGS


def eval_curve(records: list[dict]) -> dict[int, float]:
    """env step -> greedy evaluation return_mean, from one run's metrics records (records without a finite
    return_mean, e.g. edited by hand, are left out)."""
    curve: dict[int, float] = {}
    final: dict[int, float] = {}
    for record in records:
        value = record.get("return_mean")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        if record.get("kind") == "eval":
            curve[record["env_step"]] = float(value)
        elif record.get("kind") == "final_eval":
            final[record["env_step"]] = float(value)
    return {**final, **curve}  # an "eval" at the same step wins


def group_key(run_dir: pathlib.Path) -> tuple[str, str, str]:
    """(key, label, env id): runs with equal keys differ only in the seed."""
    path = run_dir / "config.json"
    if not path.exists():
        return f"dir:{run_dir.resolve()}", run_dir.name, ""
    try:
        config = json.loads(path.read_text())
        identity = {k: config[k] for k in ("agent", "env_id", "hparams")}
        env_kwargs = dict(config.get("env_kwargs") or {})  # another env: another curve
    except (ValueError, KeyError, TypeError) as e:
        raise UsageError(f"{path}: cannot read the run's config ({type(e).__name__}: {e})") from None
    label = str(config.get("preset") or config["agent"])
    if env_kwargs:
        label += " " + " ".join(f"{key}={value}" for key, value in sorted(env_kwargs.items()))
    identity["env_kwargs"] = env_kwargs
    return json.dumps(identity, sort_keys=True), label, str(config["env_id"])


def expand_runs(patterns: list[str]) -> list[pathlib.Path]:
    run_dirs: list[pathlib.Path] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches:
            raise UsageError(f"--runs: {pattern!r} matches no directory")
        for match in matches:
            run_dir = pathlib.Path(match)
            if not (run_dir / "metrics.jsonl").is_file():
                raise UsageError(f"--runs: {run_dir} has no metrics.jsonl")
            if run_dir not in run_dirs:
                run_dirs.append(run_dir)
    return run_dirs


def main(argv):
    cli.no_extra_args(argv)
    if not FLAGS.runs:
        raise UsageError("--runs is required: --runs=dir1,dir2,... (glob patterns allowed)")
    out = pathlib.Path(FLAGS.out)
    if out.suffix.lower() != ".png":
        raise UsageError(f"--out: {out} must end in .png")
    if not out.parent.is_dir():
        raise UsageError(f"--out: directory {out.parent} does not exist")
    errors.check_output_dir("out", out.parent)
    run_dirs = expand_runs(FLAGS.runs)
    matplotlib = errors.require_extra("matplotlib", "plot", "tfrl plot")
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    from tfrl.run.metrics import read_metrics  # imports TensorFlow (seconds): after the checks above

    groups: dict[str, dict] = {}
    for run_dir in run_dirs:
        key, label, env_id = group_key(run_dir)
        group = groups.setdefault(key, {"label": label, "env_id": env_id, "curves": []})
        curve = eval_curve(read_metrics(run_dir / "metrics.jsonl"))
        if not curve:
            raise UsageError(f"{run_dir}/metrics.jsonl has no eval or final_eval record yet")
        group["curves"].append(curve)

    labels = [g["label"] for g in groups.values()]
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, group in enumerate(groups.values()):
        curves = group["curves"]
        steps = sorted(set.intersection(*(set(c) for c in curves)))
        if not steps:
            raise UsageError(f"the {len(curves)} runs of {group['label']!r} share no evaluation env step")
        returns = np.array([[c[s] for s in steps] for c in curves])  # [seeds, steps]
        label = group["label"] if labels.count(group["label"]) == 1 else f"{group['label']} #{i + 1}"
        if len(curves) > 1:
            label += f" ({len(curves)} seeds, mean, min..max)"
            ax.fill_between(steps, returns.min(axis=0), returns.max(axis=0), alpha=0.25)
        ax.plot(steps, returns.mean(axis=0), marker="o" if len(steps) < 30 else None, label=label)
    env_ids = sorted({g["env_id"] for g in groups.values() if g["env_id"]})
    ax.set_title(FLAGS.title or ", ".join(env_ids) or "learning curve")
    ax.set_xlabel("env steps")
    ax.set_ylabel("greedy evaluation return")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    print(f"wrote {out} ({len(groups)} curve(s) from {sum(len(g['curves']) for g in groups.values())} run(s))")


def run() -> None:
    cli.run(main)


if __name__ == "__main__":
    run()

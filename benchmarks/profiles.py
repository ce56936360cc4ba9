"""Performance profiles across the side-by-side suites: for each library, the fraction of runs whose final greedy
return, normalized per env, is above each threshold tau, averaged over the suites (rliable's score distributions).

    python benchmarks/profiles.py                       # tfrl, SB3 and SBX over the suites all three ran
    python benchmarks/profiles.py --libs=tfrl,SB3       # more suites: those SB3 ran beside tfrl
    python benchmarks/profiles.py --docs=              # print the section, write nothing

Reads benchmarks/results/compare-*.jsonl. A suite counts when its runs of one setting (not --quick; several
compare.py runs of the same settings join, as compare.py --reuse joins them) hold at least --min_seeds seeds on
which every library ran side by side; the newest such table is used. Normalized score = (return - random) /
(reference - random): `random` is the mean greedy-protocol return of uniformly random actions on the
evaluation's 100 episodes (env seed 20000, as compare.py's final evaluation), measured here; `reference` is REFERENCE_RETURNS' value for the env. The interval at each tau is the stratified
bootstrap's (runs resampled within each suite). Writes the table between its markers
to docs/benchmarks/profiles-LIBS.md (one file per set of libraries) and the figure to docs/images/performance-profiles-LIBS.png.
"""

from __future__ import annotations

import collections
import json
import pathlib
import sys
from typing import Sequence

import numpy as np
from absl import flags

BENCHMARKS_DIR = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS_DIR))
import results_io  # noqa: E402  (benchmarks/ is not a package)
import stats  # noqa: E402
from tfrl import cli  # noqa: E402
from tfrl.errors import UsageError  # noqa: E402

# The return that scores 1.0 on each env. MuJoCo: rl-baselines3-zoo's published 1M-step returns, the best of its
# SAC and PPO rows (the suites here are cut far shorter, so their scores stay well below 1). Elsewhere the
# gymnasium solve threshold (LunarLander 200, BipedalWalker 300), the maximum (CartPole 500, MaskedPick 20), or,
# for Pendulum, which has none, -150: about the best greedy mean any library reached in these tables.
REFERENCE_RETURNS = {
    "CartPole-v1": 500.0, "tfrl/CartPoleNoVel-v1": 500.0, "LunarLander-v3": 200.0,
    "LunarLanderContinuous-v3": 200.0, "BipedalWalker-v3": 300.0, "Pendulum-v1": -150.0,
    "tfrl/PendulumNoVel-v1": -150.0, "tfrl/MaskedPick-v0": 20.0,
    "HalfCheetah-v5": 9535.0, "Hopper-v5": 2410.0, "Walker2d-v5": 3863.0,
}
TABLE_THRESHOLDS = (0.25, 0.5, 0.75, 0.9, 1.0)
THRESHOLDS = np.unique(np.round(np.concatenate([np.linspace(0.0, 1.2, 61), TABLE_THRESHOLDS]), 3))  # the plot's
EVAL_SEED = 20_000  # compare.py's runs evaluate with seed + 20000; seed 0's episodes stand for random play
FLAGS = flags.FLAGS


def _settings(record: dict) -> str:
    """What makes runs one table: the suite, threads and resolved hyperparameters where the record holds them (as
    compare.py --reuse matches runs), else the compare.py run itself (its started stamp)."""
    if "hparams" in record:
        return json.dumps([record["suite"], record["threads"], record["hparams"]], sort_keys=True)
    return json.dumps(["run", record["started"]])


def newest_complete_run(records: Sequence[dict], libs: Sequence[str], min_seeds: int) -> list[dict] | None:
    """The records of the newest side-by-side table with >= min_seeds seeds: runs of the same settings (_settings),
    per seed the newest compare.py run (started stamp) holding every library in `libs`, so that each library has
    the same seeds; None when no settings have that many. Records keep their order."""
    groups = collections.defaultdict(list)
    for record in records:
        if not record.get("quick") and record.get("started") and record["library"] in libs:
            groups[_settings(record)].append(record)
    for runs in sorted(groups.values(), key=lambda runs: max(r["started"] for r in runs), reverse=True):
        chosen = {id(r) for seed_runs in results_io.newest_side_by_side(runs, libs).values() for r in seed_runs}
        if len(chosen) >= min_seeds * len(libs):
            return [r for r in runs if id(r) in chosen]
    return None


def random_return(env_id: str, episodes: int = 100) -> float:
    """Mean return of uniformly random actions over the evaluation's episodes (tfrl.run.evaluation, env seed 20000)."""
    from tfrl import envs
    from tfrl.run import evaluation

    probe = envs.make_vector_env(env_id, 1, seed=EVAL_SEED)
    space = probe.single_action_space  # as tfrl's adapters present it
    probe.close()
    space.seed(0)

    def uniform(obs) -> np.ndarray:
        rows = len(next(iter(obs.values())) if isinstance(obs, dict) else obs)
        return np.stack([space.sample() for _ in range(rows)])

    return float(np.mean(evaluation.evaluate(uniform, env_id, episodes, seed=EVAL_SEED)))


def normalized_scores(runs: Sequence[dict], libs: Sequence[str], random: float, reference: float) -> dict:
    """{library: normalized final returns of its runs, by seed}."""
    span = reference - random
    return {lib: [(r["return_mean"] - random) / span for r in sorted(runs, key=lambda r: r["seed"])
                  if r["library"] == lib] for lib in libs}


def collect(results_dir: pathlib.Path, libs: Sequence[str], min_seeds: int) -> list[dict]:
    """One entry per counted suite: its name, env, stamp, seeds, random and reference returns, scores by library."""
    suites = []
    for path in sorted(results_dir.glob("compare-*.jsonl")):
        runs = newest_complete_run(results_io.read_results_file(path), libs, min_seeds)
        if runs is None:
            continue
        env_id = runs[0]["env_id"]
        if env_id not in REFERENCE_RETURNS:
            raise UsageError(f"{path.name}: no reference return for {env_id}; add it to REFERENCE_RETURNS")
        random = random_return(env_id)
        suites.append({"suite": runs[0]["suite"], "env_id": env_id,
                       "started": ", ".join(sorted({r["started"] for r in runs})),
                       "seeds": sorted({r["seed"] for r in runs}), "random": random,
                       "reference": REFERENCE_RETURNS[env_id],
                       "scores": normalized_scores(runs, libs, random, REFERENCE_RETURNS[env_id])})
    return suites


def profiles(suites: Sequence[dict], libs: Sequence[str]) -> dict:
    """{library: (profile, [(low, high)]) over THRESHOLDS}."""
    out = {}
    for lib in libs:
        tasks = [suite["scores"][lib] for suite in suites]
        out[lib] = (stats.performance_profile(tasks, THRESHOLDS), stats.profile_ci(tasks, THRESHOLDS))
    return out


def image_name(libs: Sequence[str]) -> str:
    return f"performance-profiles-{'-'.join(libs).lower()}.png"


def markdown(suites: Sequence[dict], libs: Sequence[str], curves: dict, command: str) -> str:
    """The section: the command, the suites counted, and the profile at TABLE_THRESHOLDS."""
    lines = [f"### Performance profiles across the suites: {', '.join(libs)}", "", f"```\n{command}\n```", "",
             f"Each suite's newest side-by-side runs of one setting (joined over sittings as compare.py --reuse joins them), {len(libs)} libraries on the same seeds (the suite blocks "
             "below give the machine and settings of each). Normalized score = (final greedy return - random) / "
             "(reference - random); a point of the profile is the fraction of runs above tau, each suite weighing "
             "the same; in brackets the 95 % stratified bootstrap interval.", "",
             "| suite | run (UTC) | seeds | random | reference |", "|---|---|---|---|---|"]
    lines += [f"| {s['suite']} | {s['started']} | {len(s['seeds'])} | {s['random']:.1f} | {s['reference']:g} |"
              for s in suites]
    lines += ["", "| fraction of runs above tau | " + " | ".join(libs) + " |", "|---" * (len(libs) + 1) + "|"]
    for tau in TABLE_THRESHOLDS:
        k = int(np.flatnonzero(np.isclose(THRESHOLDS, tau))[0])
        cells = [f"{curves[lib][0][k]:.2f} [{curves[lib][1][k][0]:.2f}, {curves[lib][1][k][1]:.2f}]" for lib in libs]
        lines.append(f"| tau = {tau:g} | " + " | ".join(cells) + " |")
    lines += ["", f"![performance profiles](../images/{image_name(libs)})"]
    return "\n".join(lines)


def plot(curves: dict, path: pathlib.Path, suite_count: int) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for lib, (profile, ci) in curves.items():
        ax.plot(THRESHOLDS, profile, label=lib)
        ax.fill_between(THRESHOLDS, [lo for lo, _ in ci], [hi for _, hi in ci], alpha=0.2)
    ax.set(xlabel="normalized score tau", ylabel="fraction of runs above tau",
           title=f"Performance profiles over {suite_count} suites")
    ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def main(argv):
    cli.no_extra_args(argv)
    libs = [lib.strip() for lib in FLAGS.libs.split(",") if lib.strip()]
    known = set(results_io.LIBRARY_NAMES)
    if len(libs) < 2 or set(libs) - known:
        raise UsageError(f"--libs: two or more of {', '.join(sorted(known))}, got {FLAGS.libs!r}")
    if FLAGS.min_seeds < 1:
        raise UsageError(f"--min_seeds must be >= 1, got {FLAGS.min_seeds}")
    suites = collect(pathlib.Path(FLAGS.results_dir), libs, FLAGS.min_seeds)
    if not suites:
        raise UsageError(f"no suite has a run with {FLAGS.min_seeds}+ seeds for each of {', '.join(libs)}")
    curves = profiles(suites, libs)
    section = markdown(suites, libs, curves, " ".join(["python", "benchmarks/profiles.py", *sys.argv[1:]]))
    print(section)
    if FLAGS.docs != "":  # the section's image sits in docs/images/, one folder above the section's file
        default = BENCHMARKS_DIR.parent / "docs" / "benchmarks" / f"profiles-{'-'.join(libs).lower()}.md"
        docs = pathlib.Path(FLAGS.docs or default)
        plot(curves, docs.parent.parent / "images" / image_name(libs), len(suites))
        results_io.write_section(docs, "profiles-" + "-".join(libs).lower(), section)


if __name__ == "__main__":
    flags.DEFINE_string("libs", "tfrl,SB3,SBX", "Libraries, as compare.py names them in its records.")
    flags.DEFINE_integer("min_seeds", 3, "Seeds a suite's run needs for every library to count.")
    flags.DEFINE_string("results_dir", str(BENCHMARKS_DIR / "results"), "Where the compare-*.jsonl files are.")
    flags.DEFINE_string("docs", None,
                        "Markdown file to write the section into (default docs/benchmarks/profiles-LIBS.md); "
                        "empty: print only.")
    cli.run(main)

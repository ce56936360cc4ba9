"""The summary table at the top of docs/benchmarks.md: one row per side-by-side suite, tfrl against SB3 and SBX.

    python benchmarks/summary.py            # writes the table between its markers in docs/benchmarks.md
    python benchmarks/summary.py --docs=    # print it, write nothing

Reads benchmarks/results/compare-*.jsonl. Per suite, the newest side-by-side table with at least --min_seeds
seeds on which every library ran (profiles.newest_complete_run: runs of one setting, joined over sittings as
compare.py --reuse joins them), with SBX where it ran on those seeds, else tfrl and SB3. Per library the final
greedy return's IQM with its 95 % stratified bootstrap interval (benchmarks/stats.py), and tfrl's process wall
time over each other library's, per seed, as median [min, max]. Suites whose newest runs have fewer seeds are
named below the table, with how many they have so far.
"""

from __future__ import annotations

import math
import pathlib
import statistics
import sys
from typing import Sequence

from absl import flags

BENCHMARKS_DIR = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS_DIR))
import results_io  # noqa: E402  (benchmarks/ is not a package)
import profiles  # noqa: E402
import stats  # noqa: E402
from tfrl import cli  # noqa: E402
from tfrl.errors import UsageError  # noqa: E402

LIBS = ("tfrl", "SB3", "SBX")
SECTION = "summary"
MIN_SEEDS = 3
FLAGS = flags.FLAGS


def newest_table(records: Sequence[dict], min_seeds: int) -> tuple[list[dict], tuple[str, ...]] | None:
    """(records, libraries) of the suite's newest complete table: all three libraries, or tfrl and SB3 when that
    table is newer (or the only one); None when neither has min_seeds seeds."""
    found = [(runs, libs) for libs in (LIBS, LIBS[:2])
             if (runs := profiles.newest_complete_run(records, libs, min_seeds))]
    if not found:
        return None
    return max(found, key=lambda item: max(r["started"] for r in item[0]))  # max keeps the first of a tie


def newest_partial(records: Sequence[dict], table: list[dict] | None) -> tuple[dict, list[int]] | None:
    """(a record of, seeds of) the newest tfrl-and-SB3 runs of a setting other than the table's, when those are
    newer than the table: a series still being run, one seed per sitting."""
    partial = profiles.newest_complete_run(records, LIBS[:2], 1)
    if not partial or (table and profiles._settings(partial[0]) == profiles._settings(table[0])):
        return None
    if table and max(r["started"] for r in partial) <= max(r["started"] for r in table):
        return None
    return partial[0], sorted({r["seed"] for r in partial})


def _ratios(runs: Sequence[dict], base: str, other: str) -> str:
    """base's wall time over other's, per seed: median [min, max]."""
    by_seed = {lib: {r["seed"]: r["wall_s"] for r in runs if r["library"] == lib} for lib in (base, other)}
    return results_io.median_spread([by_seed[base][seed] / by_seed[other][seed] for seed in sorted(by_seed[base])], 2)


def target_return(runs: Sequence[dict], libs: Sequence[str]) -> float | None:
    """The suite's target return: the median, over every run of the libraries, of the last training mean return
    (the learning curve's last point), rounded down to two significant digits; about half the runs end above it.
    None when a run's curve has no clock (records written before curves had one)."""
    if any(not r.get("curve") or len(r["curve"][-1]) < 3 for r in runs if r["library"] in libs):
        return None
    last = [r["curve"][-1][2] for r in runs if r["library"] in libs]
    if not all(math.isfinite(value) for value in last):
        return None
    return _round_down(statistics.median(last))


def _round_down(value: float) -> float:
    """value rounded down (towards -inf) to two significant digits: 2386.1 -> 2300, -157.4 -> -160."""
    if value == 0:
        return 0.0
    step = 10.0 ** (math.floor(math.log10(abs(value))) - 1)
    return math.floor(round(value / step, 9)) * step


def _time_to(runs: Sequence[dict], lib: str, target: float) -> str:
    """"median training s (runs that reached the target / runs)" of lib's runs."""
    mine = [r for r in runs if r["library"] == lib]
    seconds = [reached[1] for r in mine if (reached := results_io.time_to_return(r, target)) is not None]
    median = f"{statistics.median(seconds):.0f}" if seconds else "-"
    return f"{median} ({len(seconds)}/{len(mine)})"


def _env_steps(record: dict) -> int:
    return int(record.get("hparams", {}).get("total_env_steps", record["env_steps"]))


def row(runs: Sequence[dict], libs: Sequence[str]) -> str:
    """One suite's row: env, env steps, seeds, each library's IQM [CI], the wall-time ratios, machine and dates."""
    first = runs[0]
    seeds = sorted({r["seed"] for r in runs})
    returns = {lib: [r["return_mean"] for r in sorted(runs, key=lambda r: r["seed"]) if r["library"] == lib]
               for lib in libs}
    cells = [stats.iqm_with_ci(returns[lib]) if lib in libs else "not run" for lib in LIBS]
    ratios = [_ratios(runs, "tfrl", lib) if lib in libs else "-" for lib in LIBS[1:]]
    target = target_return(runs, libs)
    to_target = "-" if target is None else f"{target:g}: " + " / ".join(_time_to(runs, lib, target) for lib in libs)
    cpus = ", ".join(sorted({r.get("cpu", "CPU in its block").replace("(R)", "") for r in runs}))
    days = ", ".join(sorted({r["started"].split()[0] for r in runs}))
    return (f"| {first['suite']} | {first['env_id']}, {_env_steps(first)} | {', '.join(map(str, seeds))} | "
            f"{' | '.join(cells)} | {' | '.join(ratios)} | {to_target} | {first['threads']}; {cpus}; {days} |")


def markdown(results_dir: pathlib.Path, min_seeds: int, command: str) -> str:
    """The section: the table over every compare-*.jsonl with a complete table, and the shorter series below."""
    rows, short = [], []
    for path in sorted(results_dir.glob("compare-*.jsonl")):
        runs = results_io.read_results_file(path)
        table = newest_table(runs, min_seeds)
        if table:
            rows.append(row(*table))
        partial = newest_partial(runs, table[0] if table else None)
        if partial:
            record, seeds = partial
            short.append(f"{record['suite']} at {_env_steps(record)} env steps (seed{'s' * (len(seeds) > 1)} "
                         f"{', '.join(map(str, seeds))})")
    if not rows:
        raise UsageError(f"no suite in {results_dir} has {min_seeds}+ seeds run side by side by tfrl and SB3")
    lines = ["| suite | env, env steps | seeds | tfrl | SB3 | SBX | wall time tfrl/SB3 | tfrl/SBX | target return: "
             "training s to it, tfrl / SB3 (/ SBX) | threads; CPU; days (UTC) |", "|---" * 10 + "|", *rows, ""]
    lines.append(f"Greedy return of each library's last policy over 100 episodes: IQM over the seeds [95 % "
                 f"stratified bootstrap interval]. Wall time: tfrl's over the other's, per seed, median [min, max]. "
                 f"Target return: the median of every run's last training return (the mean of the training episodes "
                 f"of the last log interval), rounded down to two digits; the training seconds until a run's "
                 f"training episodes first averaged it, median over the runs that did (how many of how many). "
                 f"The rl-baselines3-zoo settings for every library, alternated seed by seed on one machine; each "
                 f"suite's block below gives its command, machine and load. Written by `{command}`.")
    if short:
        lines += ["", f"Run on fewer than {min_seeds} seeds so far (their blocks below): " + "; ".join(short) + "."]
    return "\n".join(lines)


def main(argv):
    cli.no_extra_args(argv)
    if FLAGS.min_seeds < 1:
        raise UsageError(f"--min_seeds must be >= 1, got {FLAGS.min_seeds}")
    section = markdown(pathlib.Path(FLAGS.results_dir), FLAGS.min_seeds,
                       " ".join(["python", "benchmarks/summary.py", *sys.argv[1:]]))
    print(section)
    if FLAGS.docs:
        results_io.write_section(pathlib.Path(FLAGS.docs), SECTION, section)


if __name__ == "__main__":
    flags.DEFINE_integer("min_seeds", MIN_SEEDS, "Seeds a suite's table needs, every library on each.")
    flags.DEFINE_string("results_dir", str(BENCHMARKS_DIR / "results"), "Where the compare-*.jsonl files are.")
    flags.DEFINE_string("docs", str(BENCHMARKS_DIR.parent / "docs" / "benchmarks.md"),
                        "Markdown file to write the section into; empty: print only.")
    cli.run(main)

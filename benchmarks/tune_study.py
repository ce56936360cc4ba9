"""Benchmark: what an hour of `tfrl tune` buys, and what its pruner saves (issue 35). Hours of CPU: run it alone.

    python benchmarks/tune_study.py --phase=tune       # 1. tune PPO on LunarLander for --budget_s (median pruner)
    python benchmarks/tune_study.py --phase=compare    # 2. its best preset against the hand-found one, 3 seeds each
    python benchmarks/tune_study.py --phase=pruning    # 3. the same study without the pruner: trials per hour
    python benchmarks/tune_study.py --phase=all        # 1, 2, 3 in turn

1 runs `tfrl tune` with --timeout_s=--budget_s, every trial --trial_env_steps long (the hand preset,
ppo-lunarlander, trains 1M env steps in ~76 s on the Xeon: 300k, with the final evaluation's 100 episodes, leaves
room for about a hundred trials an hour), into the SQLite database --db (study <agent>-<env>-median; the trials'
runs and the tuned preset go beside it). 2 trains the best trial's preset (as written: its total_env_steps is the
trials') and the hand preset on --seeds with benchmarks/run_presets.py (a process per seed, one at a time), then
with --at_hand_length the tuned preset once more at the hand preset's total_env_steps. 3 runs study <agent>-<env>-none with
--pruner=none for the same budget. Each phase appends JSON lines to --out; trials per hour count the trials that
finished (complete or pruned) within --budget_s of the study's first start.
"""

from __future__ import annotations

import datetime
import json
import pathlib
import subprocess
import sys

from absl import app, flags

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "benchmarks" / "results"

flags.DEFINE_string("phase", "all", "tune, compare, pruning or all.")
flags.DEFINE_string("agent", "ppo", "Agent to tune.")
flags.DEFINE_string("env", "LunarLander-v2", "Env to tune on.")
flags.DEFINE_string("hand_preset", "ppo-lunarlander", "The hand-found preset the tuned one is compared with.")
flags.DEFINE_integer("budget_s", 3600, "Seconds each study may start trials for.")
flags.DEFINE_integer("trial_env_steps", 300_000, "total_env_steps of every trial (fixed with --hp).")
flags.DEFINE_list("seeds", ["1000", "1001", "1002"], "Seeds of the comparison; none a trial trained on (trial N "
                  "trains seed N), so that the tuned preset is not scored on the seed that picked it.")
flags.DEFINE_bool("at_hand_length", False, "compare: also train the tuned preset at the hand preset's 1M env steps "
                  "(a 256x256 tuned network takes ~9 min a seed there on 2 cores).")
flags.DEFINE_string("db", str(RESULTS / "tune-study.db"), "The studies' SQLite database.")
flags.DEFINE_string("out", str(RESULTS / "tune-study.jsonl"), "JSON-lines file the results are appended to.")
FLAGS = flags.FLAGS


def study_name(pruner: str) -> str:
    return f"{FLAGS.agent}-{FLAGS.env}-{pruner}"


def beside_db(name: str) -> pathlib.Path:
    return pathlib.Path(FLAGS.db).resolve().parent / name


def tuned_preset() -> pathlib.Path:
    return beside_db(f"tune-study-{FLAGS.agent}-{FLAGS.env}.json")


def tune(pruner: str) -> None:
    """One study of --budget_s (the median one writes the tuned preset)."""
    name = study_name(pruner)
    out_preset = tuned_preset() if pruner == "median" else beside_db("tune-study-runs") / name / "best.json"
    subprocess.run([sys.executable, "-m", "tfrl", "tune", f"--agent={FLAGS.agent}", f"--env={FLAGS.env}",
                    "--trials=100000", f"--timeout_s={FLAGS.budget_s}",
                    f"--hp=total_env_steps={FLAGS.trial_env_steps}", f"--storage=sqlite:///{pathlib.Path(FLAGS.db).resolve()}",
                    f"--study_name={name}", f"--pruner={pruner}", f"--trials_dir={beside_db('tune-study-runs') / name}",
                    f"--out_preset={out_preset}"], check=True, cwd=REPO_ROOT)


def counts(name: str) -> dict:
    """Trials of the study that finished within --budget_s of its first start, by state; the best value."""
    import optuna

    study = optuna.load_study(study_name=name, storage=f"sqlite:///{pathlib.Path(FLAGS.db).resolve()}")
    trials = study.get_trials(deepcopy=False)
    start = min(trial.datetime_start for trial in trials if trial.datetime_start)
    limit = start + datetime.timedelta(seconds=FLAGS.budget_s)
    within = [t for t in trials if t.datetime_complete and t.datetime_complete <= limit]
    by_state = {state: sum(t.state.name == state for t in within) for state in ("COMPLETE", "PRUNED", "FAIL")}
    finished = by_state["COMPLETE"] + by_state["PRUNED"]
    return {"trials_finished_per_hour": round(finished * 3600 / FLAGS.budget_s, 1), "by_state": by_state,
            "best_value": study.best_value, "best_trial": study.best_trial.number, "budget_s": FLAGS.budget_s,
            "trial_env_steps": FLAGS.trial_env_steps}


def compare() -> None:
    """The tuned preset and the hand one on --seeds (run_presets.py appends its rows to --out)."""
    runs = [("tuned", str(tuned_preset()), []), ("hand", FLAGS.hand_preset, [])]
    if FLAGS.at_hand_length:
        runs.append(("tuned, at the hand preset's length", str(tuned_preset()), ["--extra=--hp=total_env_steps=1000000"]))
    for label, preset, extra in runs:
        print(f"== {label}: {preset}", flush=True)
        subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "run_presets.py"), f"--agent={FLAGS.agent}",
                        f"--env={FLAGS.env}", f"--preset={preset}", f"--seeds={','.join(FLAGS.seeds)}",
                        f"--out={FLAGS.out}", *extra], check=True, cwd=REPO_ROOT)


def main(argv):
    del argv
    RESULTS.mkdir(parents=True, exist_ok=True)
    if FLAGS.phase in ("tune", "all"):
        tune("median")
    if FLAGS.phase in ("compare", "all"):
        compare()
    if FLAGS.phase in ("pruning", "all"):
        tune("none")
    if FLAGS.phase in ("tune", "pruning", "all"):
        with open(FLAGS.out, "a") as out:
            for pruner in ("median", "none"):
                try:
                    row = {"phase": "tune", "study": study_name(pruner), "pruner": pruner, **counts(study_name(pruner))}
                except KeyError:  # that study has not been run yet
                    continue
                out.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    app.run(main)

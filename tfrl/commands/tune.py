"""Tune hyperparameters with Optuna: tfrl tune --agent=ppo --env=CartPole-v1 --trials=20

Each trial trains through tfrl.train, as `tfrl train` does (the preset for --agent/--env, or --preset, as the
starting point; --hp=key=value fixed on top; the trial's sampled values on top of that), on seeds of its own,
into <trials_dir>/trial-<N>-s<seed>/, without an export. Its value is the mean greedy return of the run's final
(or best-kept) policy over final_eval_episodes episodes (--objective=return_per_s: divided by the run's wall
seconds). --space=help prints the agent's search space; --space=FILE.json changes it.

The study lives in --storage (by default the SQLite file <trials_dir>/study.db, trials_dir being
runs/tune-<agent>-<env>; any SQLAlchemy URL optuna takes): run the same command again
and it continues the study up to --trials trials in all (complete and pruned ones count, and those running in
other processes); start it in several shells, or with --jobs=J, and the processes share the trials; a trial
whose process was killed is marked failed (and retried once) by the next process to start. The study remembers
the agent, env, preset, fixed --hp, objective and seeds it tunes and refuses others. The median pruner stops
trials whose periodic evaluations fall below the median of earlier trials at the same env step.

At the end: the best trials, parameter importances, an optimization-history PNG (with matplotlib) in
--trials_dir, and --out_preset (default <trials_dir>/best-preset.json): the best trial as a preset JSON that
`tfrl train --preset=PATH` takes. optuna-dashboard reads the same database: optuna-dashboard
sqlite:///runs/tune-ppo-CartPole-v1/study.db. Needs optuna: pip install 'tfrl[tune]'.
Bad input exits with code 2 before anything is written.
"""

from __future__ import annotations

import math
import pathlib
import sys

from absl import flags

from tfrl import agents, cli, config as config_lib, errors
from tfrl.commands import runtime_flags
from tfrl.errors import UsageError
from tfrl.lazy_import import LazyModule

session = LazyModule("tfrl.tuning.session")
spaces = LazyModule("tfrl.tuning.spaces")

flags.DEFINE_string("agent", None, f"Agent to tune: {', '.join(agents.AGENT_NAMES)}.")
flags.DEFINE_string("env", None, "Gymnasium environment id (module:Id imports the module first).")
flags.DEFINE_multi_string("env_kwargs", [], "Keyword argument of gymnasium.make, key=value, repeatable.")
flags.DEFINE_string("preset", "auto", "The preset trials start from: 'auto' (the one for --agent/--env), a name, a "
                    "JSON file's path, or 'none' (the config defaults).")
flags.DEFINE_string("config_dir", None, "A directory of your own presets, searched before the built-in ones.")
flags.DEFINE_multi_string("hp", [], "Hyperparameter fixed for every trial, key=value, repeatable (not sampled even "
                          "if the space has it): --hp=total_env_steps=200000.")
flags.DEFINE_integer("trials", None, "Trials the study should hold in all (complete, pruned or running); the same "
                     "command with a larger number adds trials.")
flags.DEFINE_string("storage", None, "The study's database, an SQLAlchemy URL: sqlite:///PATH (relative to the "
                    "current directory; sqlite:////abs/path), or postgresql://... / mysql://... with their driver "
                    "installed; default sqlite:///<trials_dir>/study.db.")
flags.DEFINE_string("study_name", None, "The study's name in --storage; default <agent>-<env>.")
flags.DEFINE_string("trials_dir", None, "Where the trials' run directories go; default runs/tune-<study_name>.")
flags.DEFINE_string("out_preset", None, "Write the best trial as a preset JSON here; default "
                    "<trials_dir>/best-preset.json.")
flags.DEFINE_string("space", None, "help: print the search space of --agent; PATH.json: entries laid over the "
                    "built-in space (null drops one).")
flags.DEFINE_string("objective", "return", "return: the final greedy evaluation's mean return; return_per_s: that "
                    "divided by the run's wall seconds.")
flags.DEFINE_string("pruner", "median", "median: stop trials whose periodic evaluation falls below the median of "
                    "earlier trials at the same env step; none: never.")
flags.DEFINE_integer("startup_trials", 5, "Complete trials before the pruner stops any.")
flags.DEFINE_integer("seeds", 1, "Seeds (runs) per trial; its value is their mean.")
flags.DEFINE_integer("seed", 0, "Base seed: trial N trains seeds seed + N * seeds, ... (every trial its own).")
flags.DEFINE_float("timeout_s", None, "Start no trial after this many seconds (the running ones finish).")
flags.DEFINE_float("trial_timeout_s", None, "Prune a trial still training after this many seconds.")
flags.DEFINE_integer("jobs", 1, "Processes running trials: this one and jobs - 1 started beside it.")
flags.DEFINE_integer("heartbeat_s", 60, "Seconds between a running trial's heartbeats; a trial silent for twice as "
                     "long is marked failed by the next process that starts.")
flags.DEFINE_boolean("report", True, "Print the report and write --out_preset and the plot at the end "
                     "(--noreport for a process that only adds trials).")
flags.DEFINE_boolean("trial_logs", False, "Show each trial's training log lines.")
flags.DEFINE_string("vector_mode", "sync", "Vector env of every trial: sync, async or envpool.")
runtime_flags.define_flags()

FLAGS = flags.FLAGS

OBJECTIVES = ("return", "return_per_s")
PRUNERS = ("median", "none")


def check_flags() -> None:
    """UsageError on the first flag value that cannot work (before anything is read or written)."""
    if not FLAGS.agent or not FLAGS.env:
        raise UsageError("--agent and --env are required, e.g. --agent=ppo --env=CartPole-v1")
    agents.get(FLAGS.agent)  # an unknown agent, with the list
    if FLAGS.trials is None or FLAGS.trials < 1:
        raise UsageError(f"--trials must be >= 1 (the study's trials in all), got {FLAGS.trials}")
    for name in ("seeds", "jobs", "heartbeat_s"):
        if FLAGS[name].value < 1:
            raise UsageError(f"--{name} must be >= 1, got {FLAGS[name].value}")
    if FLAGS.startup_trials < 0:
        raise UsageError(f"--startup_trials must be >= 0, got {FLAGS.startup_trials}")
    for name in ("timeout_s", "trial_timeout_s"):
        value = FLAGS[name].value
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UsageError(f"--{name} must be a number of seconds > 0, got {value}")
    if FLAGS.objective not in OBJECTIVES:
        raise UsageError(f"--objective must be one of {', '.join(OBJECTIVES)}, got {FLAGS.objective!r}")
    if FLAGS.pruner not in PRUNERS:
        raise UsageError(f"--pruner must be one of {', '.join(PRUNERS)}, got {FLAGS.pruner!r}")
    if FLAGS.storage is not None and not FLAGS.storage:
        raise UsageError("--storage must be a database URL, e.g. sqlite:///tune.db")
    if FLAGS.study_name is not None and not FLAGS.study_name.strip():
        raise UsageError("--study_name must not be empty")


def options() -> dict:
    """The flags as session.Options' fields."""
    study_name = FLAGS.study_name or f"{FLAGS.agent}-{FLAGS.env}"
    trials_dir = pathlib.Path(FLAGS.trials_dir or f"runs/tune-{study_name.replace('/', '_').replace(':', '_')}")
    return dict(
        agent=FLAGS.agent, env=FLAGS.env, preset=FLAGS.preset,
        env_kwargs={key: config_lib.parse_value(value)
                    for key, value in config_lib.parse_cli_overrides(FLAGS.env_kwargs, "--env_kwargs").items()},
        fixed=config_lib.parse_cli_overrides(FLAGS.hp), config_dir=_path(FLAGS.config_dir),
        trials=FLAGS.trials, storage=FLAGS.storage or f"sqlite:///{trials_dir / session.DEFAULT_DATABASE}",
        study_name=study_name, trials_dir=trials_dir,
        out_preset=_path(FLAGS.out_preset) or trials_dir / "best-preset.json", space_file=FLAGS.space,
        objective=FLAGS.objective, pruner=FLAGS.pruner, startup_trials=FLAGS.startup_trials, seeds=FLAGS.seeds,
        seed=FLAGS.seed, timeout_s=FLAGS.timeout_s, trial_timeout_s=FLAGS.trial_timeout_s, jobs=FLAGS.jobs,
        heartbeat_s=FLAGS.heartbeat_s, report=FLAGS.report, verbose=1 if FLAGS.trial_logs else 0,
        vector_mode=FLAGS.vector_mode, runtime=runtime_flags.options_from_flags())


def print_space() -> None:
    """--space=help: the built-in space of --agent (of every agent without one)."""
    names = [FLAGS.agent] if FLAGS.agent else [n for n in agents.AGENT_NAMES if spaces.builtin(n)]
    for name in names:
        agents.get(name)
        print(spaces.describe(name, spaces.builtin(name)))


def main(argv):
    cli.no_extra_args(argv)
    if FLAGS.space == "help":
        print_space()
        return
    check_flags()
    errors.require_extra("optuna", "tune", "tfrl tune")
    try:
        code = session.run(session.Options(**options()), worker_args=sys.argv[1:])
    except KeyboardInterrupt:
        print(f"{cli.program()}: interrupted: the running trial is marked failed; the same command continues the "
              "study", file=sys.stderr)
        sys.exit(130)
    if code:
        print(f"{cli.program()}: error: a --jobs process ended with an error (its lines are above)", file=sys.stderr)
        sys.exit(code)


def _path(value: str | None) -> pathlib.Path | None:
    return pathlib.Path(value) if value else None


def help_text() -> str:
    return cli.flags_help(__doc__, [("Tuning flags", sys.modules[__name__]),
                                    ("Hardware flags of every trial (tfrl.hardware.runtime)", runtime_flags)])


def run():
    cli.run(main, help_text=help_text)


if __name__ == "__main__":
    run()

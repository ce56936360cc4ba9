"""A `tfrl tune` process from flags to report: check everything, open the study, run trials until the study holds
--trials of them (with --jobs - 1 more processes beside this one), then report and write the best preset.

Every check that can refuse the command comes before the first write: the flags, the agent, env, preset and
fixed hyperparameters (launch.prepare, as `tfrl train` checks them), the space, the output paths, the database
URL and, in the database, the study's identity. --jobs starts more processes of the same command (one trial each
at a time): TensorFlow's device state and Keras' global seed are per process, so threads could not share them.

Trials run in this process one after another, with keras.backend.clear_session() after each: measured on PPO
CartPole (2048 env steps, 12 runs in one process), a run after clear_session writes the same checkpoint bytes as
in a fresh process (without it, the Keras names count on and the bytes differ). Each run leaves ~8 MB behind
either way (the graphs of its tf.while_loop, held by TensorFlow's C++ side): a study of hundreds of trials in one
process grows by that much per trial; stop it and run the same command again to start afresh. A process per
trial would cost ~4 s of imports and start-up per trial instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import signal
import subprocess
import sys
import time
import warnings
from typing import Any, Mapping

from tfrl import agents, errors
from tfrl.errors import UsageError
from tfrl.hardware.runtime import RuntimeOptions
from tfrl.lazy_import import LazyModule
from tfrl.run import launch
from tfrl.tuning import report, spaces, study as study_lib, trials

optuna = LazyModule("optuna")


@dataclasses.dataclass(frozen=True)
class Options:
    """What `tfrl tune` was asked for (tfrl.commands.tune documents each flag)."""

    agent: str
    env: str
    env_kwargs: Mapping[str, Any]
    preset: str
    fixed: Mapping[str, str]
    config_dir: pathlib.Path | None
    trials: int
    storage: str
    study_name: str
    trials_dir: pathlib.Path
    out_preset: pathlib.Path
    space_file: str | None = None
    objective: str = "return"
    pruner: str = "median"
    startup_trials: int = 5
    seeds: int = 1
    seed: int = 0
    timeout_s: float | None = None
    trial_timeout_s: float | None = None
    jobs: int = 1
    heartbeat_s: int = 60
    report: bool = True
    verbose: int = 0
    vector_mode: str = "sync"
    runtime: RuntimeOptions = RuntimeOptions()


DEFAULT_DATABASE = "study.db"  # in the trials' folder, without --storage


def run(options: Options, worker_args: list[str]) -> int:
    """Runs the command; returns its exit code (UsageError before anything is written on bad input)."""
    setup, env_ids = checked_setup(options)
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # its trial lines are ours; failures are raised
    identity = {"agent": options.agent, "env": options.env, "env_kwargs": dict(options.env_kwargs),
                "preset": setup.preset, "fixed_hp": dict(options.fixed), "objective": options.objective,
                "seeds": options.seeds}
    default_db = options.storage == f"sqlite:///{options.trials_dir / DEFAULT_DATABASE}"
    with study_lib.removed_if_refused(options.storage, options.trials_dir if default_db else None):
        storage = study_lib.open_storage(options.storage, options.heartbeat_s)
        saved = study_lib.existing_identity(storage, options.study_name)
        if saved is None:
            _check_no_earlier_trials(options.trials_dir)
        else:
            study_lib.check_identity(options.study_name, options.storage, saved, identity)
    pruner = study_lib.pruner(options.pruner, options.startup_trials, setup.base_config.total_env_steps // 3)
    study = study_lib.open_study(storage, options.study_name, identity, pruner,
                                 {"env_ids": env_ids, "space": dict(setup.space)})
    workers = _start_workers(options.jobs - 1, worker_args)
    try:
        run_trials(study, setup, options)
    except BaseException:
        for worker in workers:
            worker.terminate()
        raise
    failed = any(worker.wait() != 0 for worker in workers)
    if options.report:
        print_report(study, options, setup)
    return 1 if failed else 0


def checked_setup(options: Options) -> tuple[trials.Setup, list[str]]:
    """The trials' shared setup, every input checked (UsageError) and nothing written; and the env's ids."""
    request = launch.TrainRequest(
        agent=options.agent, env=options.env, env_kwargs=dict(options.env_kwargs), seed=options.seed,
        preset=options.preset, hp=dict(options.fixed), config_dir=options.config_dir,
        run_dir=options.trials_dir / "trial-check", runtime=options.runtime, vector_mode=options.vector_mode,
        export=False)
    prepared = launch.prepare(request)  # writes nothing
    config_cls = agents.get(options.agent).config_cls
    overlay = None
    if options.space_file is not None:
        overlay = spaces.read_file(options.space_file)
    space = spaces.resolve(options.agent, config_cls, overlay, options.fixed)
    for flag, path in (("trials_dir", options.trials_dir), ("out_preset", options.out_preset.parent)):
        errors.check_output_dir(flag, path)
    if options.out_preset.is_dir():
        raise UsageError(f"--out_preset: {options.out_preset} is a directory")
    # The preset every trial starts from, as the study records it: a file by its absolute path, else by name.
    as_file = options.preset.endswith(".json") or pathlib.Path(options.preset).is_file()
    preset = str(pathlib.Path(options.preset).resolve()) if as_file else prepared.record.preset or "none"
    setup = trials.Setup(
        agent=options.agent, env=options.env, env_kwargs=dict(options.env_kwargs),
        preset=preset, fixed=dict(options.fixed), base_config=prepared.config,
        space=space, trials_dir=options.trials_dir, objective=options.objective, seeds=options.seeds,
        seed=options.seed, runtime=options.runtime, vector_mode=options.vector_mode, config_dir=options.config_dir,
        trial_timeout_s=options.trial_timeout_s, verbose=options.verbose)
    return setup, list(dict.fromkeys([options.env, prepared.env.name]))


def _check_no_earlier_trials(trials_dir: pathlib.Path) -> None:
    """A new study must not write into the trial directories of an earlier one (a deleted database, a reused
    name): trial N's directory would hold another run."""
    if trials_dir.is_dir() and any(path.name.startswith("trial-") for path in trials_dir.iterdir()):
        raise UsageError(f"--trials_dir {trials_dir} holds the trials of an earlier study, and the study is new in "
                         "--storage: pick another --trials_dir, or remove that one")


def run_trials(study, setup: trials.Setup, options: Options) -> None:
    """Trials one after another until the study holds options.trials, or --timeout_s has passed."""
    started = time.monotonic()
    objective = trials.objective(setup)
    trials.load_tensorflow()
    while True:
        study_lib.fail_stale(study)
        if study_lib.counted_trials(study) >= options.trials:
            return
        if options.timeout_s is not None and time.monotonic() - started > options.timeout_s:
            print(f"--timeout_s={options.timeout_s:g} passed: no new trial", flush=True)
            return
        with warnings.catch_warnings(), _signals_interrupt():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.optimize(objective, n_trials=1, callbacks=[_print_trial])


def _print_trial(study, trial) -> None:
    """One line per finished trial."""
    del study
    params = " ".join(f"{name}={report.short(value)}" for name, value in trial.params.items())
    seconds = trial.duration.total_seconds() if trial.duration else 0.0
    if trial.state == optuna.trial.TrialState.COMPLETE:
        outcome = f"complete: {trial.value:.3f}"
    else:
        outcome = f"{trial.state.name.lower()}: {trial.user_attrs.get('pruned_because', '')}".rstrip(": ")
    print(f"trial {trial.number} {outcome} ({seconds:.1f} s) {params}", flush=True)


@contextlib.contextmanager
def _signals_interrupt():
    """SIGTERM as Ctrl-C while a trial runs: tfrl.train saves the run's checkpoint, the trial is marked FAIL
    (not left running) and the command ends."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _start_workers(count: int, worker_args: list[str]) -> list[subprocess.Popen]:
    """`count` more processes of this command adding trials to the study (no report of their own)."""
    command = [sys.executable, "-m", "tfrl", "tune", *worker_args, "--jobs=1", "--noreport"]
    return [subprocess.Popen(command) for _ in range(count)]


def print_report(study, options: Options, setup: trials.Setup) -> None:
    """The report on stdout; the history plot and the best preset written."""
    study_lib.fail_stale(study)
    print(f"study: {options.study_name} in {options.storage}; trial runs in {options.trials_dir}")
    for line in report.summary(study, options.storage):
        print(line)
    print(report.plot_history(study, options.trials_dir / "optimization_history.png"))
    preset = report.best_preset(study, options.storage, type(setup.base_config), options.config_dir)
    if preset is None:
        print("best preset: none yet (no complete trial)")
        return
    report.write_preset(preset, options.out_preset)
    print(f"best preset: {options.out_preset} (tfrl train --agent={options.agent} --env={options.env} "
          f"--preset={options.out_preset})", flush=True)


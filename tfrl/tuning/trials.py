"""One trial: sample hyperparameters, train through tfrl.train (what `tfrl train` runs), score the final policy.

A trial trains `seeds` runs, seeds seed + number * seeds + k (every trial its own), each into
<trials_dir>/trial-<number>-s<seed>/ with the preset, the fixed --hp and the sampled values, no export and one
checkpoint kept. Its value is the mean over those runs of the final greedy evaluation's mean return (of the
best-kept policy where the run keeps one), or of that return per wall second of the run (--objective=return_per_s).

Pruning: each periodic evaluation's mean return is reported to optuna at its place on the evaluation grid
(env steps rounded down to a multiple of eval_interval, so that trials whose rollouts end at different env
steps compare; seed k's after seed k-1's), and a trial the pruner stops raises optuna.TrialPruned from the
callback: the run loop ends there (its agent, envs and files closed, nothing half-written: checkpoints are
written whole or not at all), skipping the final evaluation of a policy already judged worse than the median,
and the run's checkpoints and best policy are deleted (its config and metrics stay). A sampled combination
the config refuses, a run that diverges (NaN/Inf), or one past --trial_timeout_s also ends pruned, the reason in
the trial's user attribute "pruned_because".
"""

from __future__ import annotations

import dataclasses
import gc
import os
import pathlib
import shutil
import socket
import time
from typing import Any, Mapping

import tfrl
from tfrl import config as config_lib
from tfrl.errors import UsageError
from tfrl.hardware.runtime import RuntimeOptions
from tfrl.lazy_import import LazyModule
from tfrl.run import BEST_POLICY_DIR, CHECKPOINT_DIR
from tfrl.run.callbacks import Callback
from tfrl.tuning import spaces

keras = LazyModule("keras")
numerics = LazyModule("tfrl.models.numerics")  # imports TensorFlow: not before a trial trains
optuna = LazyModule("optuna")

OBJECTIVES = ("return", "return_per_s")


@dataclasses.dataclass(frozen=True)
class Setup:
    """What every trial of a study shares."""

    agent: str
    env: str
    env_kwargs: Mapping[str, Any]
    preset: str  # the resolved preset's name or path, "none" for the defaults
    fixed: Mapping[str, Any]  # --hp values, as given
    base_config: Any  # the agent's config with the preset and the fixed values applied
    space: Mapping[str, Mapping[str, Any]]
    trials_dir: pathlib.Path
    objective: str = "return"
    seeds: int = 1
    seed: int = 0
    runtime: RuntimeOptions = RuntimeOptions()
    vector_mode: str = "sync"
    config_dir: pathlib.Path | None = None
    trial_timeout_s: float | None = None
    verbose: int = 0


class PruningReporter(Callback):
    """Reports each periodic evaluation to the optuna trial; raises optuna.TrialPruned when the pruner says so,
    or at the first log record past the trial's deadline."""

    def __init__(self, trial, step_offset: int, grid: int, deadline: float | None):
        self.trial, self.step_offset, self.grid, self.deadline = trial, step_offset, max(grid, 1), deadline

    def on_eval(self, record: Mapping[str, Any]) -> bool:
        step = self.step_offset + record["env_step"] // self.grid * self.grid
        self.trial.report(record["return_mean"], step)
        if self.trial.should_prune():
            self.trial.set_user_attr("pruned_because", f"median pruner at env step {record['env_step']} "
                                     f"(evaluation return {record['return_mean']:.2f})")
            raise optuna.TrialPruned(f"pruned at env step {record['env_step']}")
        return False

    def on_log(self, record: Mapping[str, Any]) -> bool:
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.trial.set_user_attr("pruned_because", f"--trial_timeout_s at env step {record['env_step']}")
            raise optuna.TrialPruned(f"over the trial's time limit at env step {record['env_step']}")
        return False


def load_tensorflow() -> None:
    """Imports Keras and TensorFlow (seconds, holding the GIL for long stretches) before the first trial: inside
    one, optuna's heartbeat thread could not record the trial's first heartbeat until the import is done, and a
    trial killed before its first heartbeat is never found stale."""
    keras.backend.backend()


def objective(setup: Setup):
    """The optuna objective of the study: trial -> value."""
    def run(trial) -> float:
        try:
            return run_trial(setup, trial)
        finally:  # Keras' global state as in a fresh process (see tfrl.tuning.session)
            keras.backend.clear_session()
            gc.collect()
    return run


def run_trial(setup: Setup, trial) -> float:
    trial.set_user_attr("process", f"{socket.gethostname()}:{os.getpid()}")
    sampled = spaces.sample(trial, setup.space)
    try:
        config = config_lib.apply_overrides(setup.base_config, sampled, f"trial {trial.number}")
    except config_lib.ConfigError as e:
        _prune(trial, f"refused: {e}")
    deadline = time.monotonic() + setup.trial_timeout_s if setup.trial_timeout_s else None
    values, run_dirs = [], []
    for k in range(setup.seeds):
        seed = setup.seed + trial.number * setup.seeds + k
        reporter = PruningReporter(trial, k * _rounded_up(config.total_env_steps, config.eval_interval),
                                   config.eval_interval, deadline)
        run_dir = setup.trials_dir / f"trial-{trial.number}-s{seed}"
        run_dirs.append(str(run_dir))
        trial.set_user_attr("run_dirs", run_dirs)  # a retried trial's were its failed original's
        values.append(_train_one(setup, trial, {**setup.fixed, **sampled}, seed, run_dir, reporter))
    return sum(values) / len(values)


def _train_one(setup: Setup, trial, hp: dict, seed: int, run_dir: pathlib.Path, reporter: PruningReporter) -> float:
    """One run of the trial: its objective value (or TrialPruned, its checkpoints deleted)."""
    try:
        run = tfrl.train(setup.agent, setup.env, hp=hp, seed=seed, run_dir=run_dir, preset=setup.preset,
                         env_kwargs=setup.env_kwargs, runtime=setup.runtime, callbacks=[reporter],
                         vector_mode=setup.vector_mode, keep_checkpoints=1, export=False,
                         config_dir=setup.config_dir, verbose=setup.verbose, progress_bar=False)
    except optuna.TrialPruned:
        _drop_checkpoints(run_dir)
        raise
    except numerics.NonFiniteError as e:
        _drop_checkpoints(run_dir)
        _prune(trial, f"diverged: {str(e).splitlines()[0]}")
    except UsageError as e:  # a combination of values that tfrl.train refuses (memory, spaces); nothing written
        _prune(trial, f"refused: {e}")
    if not run.complete:  # a stop signal: tfrl.train delivers it again once it returns, so this is not reached
        raise RuntimeError(f"{run_dir}: the run stopped before its end")
    return score(run.result, setup.objective)


def score(result: Mapping[str, Any], objective: str) -> float:
    """The objective of a run's final record: the mean return of the best-kept policy (if the run keeps one,
    else the last), or that divided by the run's wall seconds."""
    value = (result.get("best") or result)["return_mean"]
    if objective == "return_per_s":
        value /= max(result["wall_time_s"], 1e-9)
    return float(value)


def _prune(trial, reason: str):
    trial.set_user_attr("pruned_because", reason)
    raise optuna.TrialPruned(reason)


def _drop_checkpoints(run_dir: pathlib.Path) -> None:
    """A pruned run keeps its config and metrics; its checkpoints and best policy (the disk it takes) go."""
    for name in (CHECKPOINT_DIR, BEST_POLICY_DIR):
        shutil.rmtree(run_dir / name, ignore_errors=True)


def _rounded_up(total: int, grid: int) -> int:
    """total rounded up to the evaluation grid, plus one grid step: where the next seed's steps start."""
    grid = max(grid, 1)
    return (total // grid + 1) * grid

"""Launching a training run, from the command line (scripts/train.py) and from Python (tfrl.train) alike.

    prepare(request)   every check that needs no TensorFlow and writes nothing: the agent, the env, the preset
                       and hyperparameters, the runtime options, the run dir and what it already holds, the
                       export target. Bad input is a UsageError (one line, exit code 2 in a launcher).
    execute(prepared)  applies the runtime options, takes the run dir (lock, config.json), trains
                       (tfrl.training_loop), exports the policy and writes result.json; a run dir whose run
                       is complete is left as it is.

Under --strategy=multi_worker only the chief writes the run dir; the other workers checkpoint into a
temporary directory that is deleted at the end (TF's pattern for non-chief workers).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import pathlib
import re
import tempfile
from typing import Any, Callable, Mapping, Sequence

from absl import logging

from tfrl import agents, cli, config as config_lib, distribute, envpool_vector, envs, memory, runs
from tfrl import runtime as runtime_lib, shutdown
from tfrl.errors import UsageError
from tfrl.lazy_import import LazyModule

# TensorFlow loads in execute(), after every check.
checkpoints = LazyModule("tfrl.checkpoints")
keras = LazyModule("keras")
training_loop = LazyModule("tfrl.training_loop")

DEFAULT_CONFIG_DIR = pathlib.Path(__file__).resolve().parent.parent / "configs"
MAX_SEED = 2**32 - 1  # NumPy's global seed (keras.utils.set_random_seed) takes 32 bits


@dataclasses.dataclass(frozen=True)
class TrainRequest:
    """A training run as asked for: what scripts/train.py's flags and tfrl.train's arguments both become."""

    agent: str
    env: Any  # a gymnasium id ("CartPole-v1", "my_pkg.envs:MyEnv-v0"), a factory returning an Env, or an EnvSpec
    env_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    seed: int = 0
    preset: str = "auto"  # "auto" (the one for agent and env), "none", a name in config_dir, or a JSON file's path
    hp: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # overrides, typed or as strings
    config_dir: pathlib.Path = DEFAULT_CONFIG_DIR
    run_dir: pathlib.Path | None = None  # None: <runs_root>/<agent>-<env>-s<seed>-<time>
    runs_root: pathlib.Path = pathlib.Path("runs")
    resume: bool = False  # continue the run in run_dir as config.json has it (its config, not the presets')
    runtime: runtime_lib.RuntimeOptions = runtime_lib.RuntimeOptions()
    vector_mode: str = "sync"
    keep_checkpoints: int = 3  # the newest kept; 0 keeps all
    export_base_path: pathlib.Path | None = None  # None: <run_dir>/saved_models
    export: bool = True
    model_name: str | None = None  # None: <agent>-<env>


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A request that passed every check: what execute() runs."""

    request: TrainRequest
    env: envs.EnvSpec
    record: runs.RunRecord  # what config.json holds (or will hold)
    saved: runs.RunRecord | None  # the run already in run_dir, if any
    chief: bool  # False on the other workers of a multi_worker run: they write nothing
    complete: dict | None  # the run dir's result.json, if its run is complete

    @property
    def config(self):
        return self.record.config


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What a launch did."""

    run_dir: pathlib.Path | None  # None on a multi_worker run's other workers
    record: dict  # the loop's last record: "final_eval", "stopped" or, for a complete run, result.json's
    saved_model: pathlib.Path | None = None  # the exported version directory
    already_complete: bool = False  # the run dir held a complete run: nothing was done
    task: str = "chief"
    variables_sha256: str | None = None  # multi_worker: the final checkpoint's digest, equal on every worker


def prepare(request: TrainRequest) -> Prepared:
    """Checks `request` without TensorFlow and without writing anything; UsageError on the first problem."""
    chief = _is_chief(request.runtime)
    _check_launch_options(request)
    run_dir = request.run_dir if chief else None
    saved = _saved_run(run_dir)
    _check_resume(request, run_dir, saved)
    spec = agents.get(request.agent)
    env = envs.as_spec(request.env, request.env_kwargs)
    info = _probe(env)  # one env, made and closed: its spaces are checked here, before any write
    if request.vector_mode == "envpool":
        envpool_vector.check(env.id, env.kwargs, env.atari)
    if request.resume:
        config, preset_name = saved.config, saved.preset  # as saved, even if the presets changed since
        runtime = _resolved_runtime(request.runtime, {"xla": saved.runtime.xla})
    else:
        config, preset_name, preset_runtime = _preset_config(request, spec, env)
        runtime = _resolved_runtime(request.runtime, preset_runtime)
    config = config_lib.apply_overrides(config, request.hp, "--hp")
    spec.check_env(info, config)
    memory.check(request.agent, config, info, request.vector_mode)
    runtime_lib.validate_options(runtime)
    if run_dir is not None:
        cli.check_output_dir("run_dir", run_dir)
    if request.export and request.export_base_path is not None:
        cli.check_output_dir("export_base_path", request.export_base_path)
    record = runs.RunRecord(agent=request.agent, env_id=env.name, seed=request.seed, config=config,
                            runtime=runtime, env_arg=_env_arg(request.env), env_kwargs=dict(env.kwargs),
                            preset=preset_name, vector_mode=request.vector_mode,
                            keep_checkpoints=request.keep_checkpoints, env_info=info.to_dict())
    if saved is not None:
        differences = record.differences(saved)
        if differences:
            advice = ("drop the options that differ" if request.resume
                      else "use a new run dir, or --resume to continue it as it was")
            raise UsageError(f"--run_dir {run_dir} holds a run with a different config (requested != saved: "
                             f"{'; '.join(differences)}); {advice}")
    complete = runs.read_result(run_dir) if saved is not None else None
    return Prepared(request=request, env=env, record=record, saved=saved, chief=chief, complete=complete)


def _probe(env: envs.EnvSpec) -> envs.EnvInfo:
    """The env's EnvInfo; UsageError if it cannot be made (a bad kwarg, a broken factory) or tfrl cannot train
    on its spaces."""
    try:
        return runs.probe_env_info(env)
    except UsageError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever the env's constructor raises
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UsageError(f"--env={env.name}: cannot make the env ({type(e).__name__}: {message})") from None


def _check_launch_options(request: TrainRequest) -> None:
    if not request.agent or request.env is None or request.env == "":
        raise UsageError("--agent and --env are required, e.g. --agent=dqn --env=LunarLander-v2")
    if not 0 <= request.seed <= MAX_SEED:
        raise UsageError(f"--seed must be in [0, {MAX_SEED}], got {request.seed}")
    if request.keep_checkpoints < 0:
        raise UsageError(f"--keep_checkpoints must be >= 0 (0 keeps every checkpoint), got {request.keep_checkpoints}")
    if request.vector_mode not in envs.VECTOR_MODES:
        raise UsageError(f"--vector_mode: unknown mode {request.vector_mode!r}; choose one of "
                         f"{', '.join(envs.VECTOR_MODES)}")
    if request.model_name is not None:
        runs.check_model_name(request.model_name)
    if not request.config_dir.is_dir() and request.preset != "none":
        raise UsageError(f"--config_dir: {request.config_dir} is not a directory")
    if request.runtime.strategy == "multi_worker" and request.resume:
        raise UsageError("--resume is not supported with --strategy=multi_worker: the other workers' replay and "
                         "env state are not checkpointed; start a new --run_dir")


def _saved_run(run_dir: pathlib.Path | None) -> runs.RunRecord | None:
    """The run already in run_dir, or None if it is new or empty; UsageError if it holds something else."""
    if run_dir is None or not run_dir.exists():
        return None
    if not run_dir.is_dir():
        raise UsageError(f"--run_dir: {run_dir} exists and is not a directory")
    if not any(run_dir.iterdir()):
        return None
    if not (run_dir / runs.CONFIG_FILE).exists():
        raise UsageError(f"--run_dir {run_dir} is not empty and holds no tfrl run (no {runs.CONFIG_FILE}); "
                         "pick a new one")
    return runs.read_config(run_dir)


def _check_resume(request: TrainRequest, run_dir: pathlib.Path | None, saved: runs.RunRecord | None) -> None:
    multi_worker = request.runtime.strategy == "multi_worker"
    if saved is not None and multi_worker and checkpoints.latest_checkpoint_number(run_dir):
        raise UsageError(f"--run_dir {run_dir} holds checkpoints, and a multi_worker run cannot resume; "
                         "use a new --run_dir")
    if not request.resume:
        return
    if run_dir is None:
        raise UsageError("--resume needs --run_dir, the run to continue")
    if saved is None:
        raise UsageError(f"--resume: {run_dir} holds no run to resume")
    if checkpoints.latest_checkpoint_number(run_dir) is None:
        raise UsageError(f"--resume: {run_dir} has no checkpoint to resume from")


def _preset_config(request: TrainRequest, spec: agents.AgentSpec, env: envs.EnvSpec):
    """(the agent's config with the preset applied, the preset's name or None, its runtime defaults)."""
    names = [name for name in (_env_arg(request.env), env.id) if name]
    preset = config_lib.find_preset(request.config_dir, request.agent, names, request.preset)
    config = spec.config_cls()
    if preset is None:
        return config, None, {}
    if names and not set(names) & set(preset.env_ids):
        logging.warning("preset %s is for %s, not %s: its hyperparameters may not suit this env", preset.name,
                        ", ".join(preset.env_ids), env.name)
    config = config_lib.apply_overrides(config, preset.hparams, f"preset {preset.name}")
    return config, preset.name, preset.runtime


def _resolved_runtime(options: runtime_lib.RuntimeOptions, defaults: Mapping[str, Any]) -> runtime_lib.RuntimeOptions:
    """`options` with each option the user left unset (None) taken from `defaults` (the preset's, or the resumed
    run's), else off."""
    if options.xla is not None:
        return options
    return dataclasses.replace(options, xla=bool(defaults.get("xla", False)))


def _env_arg(env: Any) -> str | None:
    """The env as the user named it, if by a string."""
    if isinstance(env, str):
        return env
    return env.id if isinstance(env, envs.EnvSpec) else None


def _is_chief(options: runtime_lib.RuntimeOptions) -> bool:
    """False on the non-chief workers of --strategy=multi_worker: they write nothing in the run dir."""
    return options.strategy != "multi_worker" or distribute.parse_tf_config(os.environ.get("TF_CONFIG")).is_chief


# ---- execute ------------------------------------------------------------------------

def execute(prepared: Prepared, stop_requested: Callable[[], bool] = shutdown.never, callbacks: Sequence = (),
            progress_bar: bool | None = None) -> RunResult:
    """Trains what `prepared` describes; see the module docstring."""
    request = prepared.request
    if prepared.complete is not None:
        return RunResult(run_dir=request.run_dir, record=prepared.complete, already_complete=True,
                         saved_model=_path_or_none(prepared.complete.get("saved_model")))
    runtime = runtime_lib.apply(prepared.record.runtime)  # validates first; raises before anything is written
    training_loop.check_runtime(request.agent, prepared.config, runtime)
    # Python, NumPy and TF global seeds: network initialization (under multi_worker, the chief's initial
    # values are broadcast to every worker when the variables are created).
    keras.utils.set_random_seed(request.seed)
    with _run_directory(prepared) as run_dir:
        for line in runtime.banner().splitlines():
            logging.info("%s", line)
        logging.info("agent=%s env=%s preset=%s seed=%d run_dir=%s", request.agent, prepared.env.name,
                     prepared.record.preset, request.seed, run_dir)
        options = training_loop.LoopOptions(vector_mode=request.vector_mode, progress_bar=progress_bar,
                                            stop_requested=stop_requested, callbacks=tuple(callbacks),
                                            keep_checkpoints=request.keep_checkpoints or None)
        # Each worker its own env, exploration and replay seeds; the chief's are the run's seed.
        record = training_loop.train(request.agent, prepared.config, prepared.env, runtime.worker_seed(request.seed),
                                     runtime, run_dir, options)
        digest = _variables_digest(run_dir) if runtime.cluster.num_workers > 1 else None
        if record["kind"] == "stopped" or not prepared.chief:
            return RunResult(run_dir=run_dir if prepared.chief else None, record=record,
                             task=runtime.cluster.task, variables_sha256=digest)
        saved_model = _export(prepared, run_dir, best="best" in record and record["best"] is not None)
        runs.write_result(run_dir, {**record, "saved_model": str(saved_model) if saved_model else None})
        return RunResult(run_dir=run_dir, record=record, saved_model=saved_model, task=runtime.cluster.task,
                         variables_sha256=digest)


@contextlib.contextmanager
def _run_directory(prepared: Prepared):
    """The run dir, created, locked and holding config.json, for as long as the block runs (a temporary
    directory on a multi_worker run's other workers)."""
    if not prepared.chief:
        with tempfile.TemporaryDirectory(prefix="tfrl-worker-") as worker_dir:
            yield pathlib.Path(worker_dir)
        return
    request = prepared.request
    run_dir = request.run_dir or _default_run_dir(request, prepared.env)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--run_dir: cannot create {run_dir}: {e.strerror}") from None
    lock = runs.lock_for_training(run_dir)
    try:
        if prepared.saved is None:
            runs.write_config(run_dir, prepared.record)
        else:
            number = checkpoints.latest_checkpoint_number(run_dir)
            logging.info("%s holds this run already: %s", run_dir,
                         f"resuming from its newest loadable checkpoint (newest: {number})" if number
                         else "no checkpoint yet, starting over")
        yield run_dir
    finally:
        if lock is not None:
            lock.close()


def _default_run_dir(request: TrainRequest, env: envs.EnvSpec) -> pathlib.Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return request.runs_root / f"{request.agent}-{safe_name(env.name)}-s{request.seed}-{stamp}"


def safe_name(name: str) -> str:
    """A name usable as one directory name: "ALE/Pong-v5" -> "ALE-Pong-v5", "pkg.envs:Maze-v0" -> "pkg.envs-Maze-v0"."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "env"


def _export(prepared: Prepared, run_dir: pathlib.Path, best: bool) -> pathlib.Path | None:
    request = prepared.request
    if not request.export:
        return None
    base_path = request.export_base_path or run_dir / "saved_models"
    model_name = request.model_name or f"{request.agent}-{safe_name(prepared.env.name)}"
    return runs.export_run(run_dir, base_path, model_name, best=best)


def _variables_digest(run_dir: pathlib.Path) -> str:
    number = checkpoints.latest_checkpoint_number(run_dir)
    return distribute.checkpoint_digest(run_dir / checkpoints.CHECKPOINT_DIR / f"ckpt-{number}")


def _path_or_none(value: str | None) -> pathlib.Path | None:
    return pathlib.Path(value) if value else None

"""Launching a training run, from the command line (`tfrl train`) and from Python (tfrl.train) alike.

    prepare(request)   every check that writes nothing: the agent, the env, the preset and hyperparameters, the
                       runtime options, the run dir and what it already holds, the weights a new run starts
                       from, the export target. Bad input is a UsageError (one line, exit code 2 in a launcher).
    execute(prepared)  applies the runtime options, takes the run dir (lock, config.json), trains
                       (tfrl.run.training_loop), exports the policy and writes result.json; a run dir whose run
                       is complete is left as it is.

Which run dir: --run_dir if given; else the newest interrupted run of the same command under runs/
(tfrl.run.run_finder: same agent, env, seed and settings, a checkpoint, not finished, not in use), unless
--new_run; else a new runs/<agent>-<env>-s<seed>-<time>/. A run dir whose run differs only in total_env_steps
is extended (or shortened) to the new total, even once complete: it trains on from its newest checkpoint, then
evaluates and exports again.

Under --strategy=multi_worker only the chief writes the run dir; the other workers checkpoint into a
temporary directory that is deleted at the end (TF's pattern for non-chief workers).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import pathlib
import tempfile
from typing import Any, Callable, Mapping, Sequence

from absl import logging

from tfrl import agents, config as config_lib, envs, errors, presets
from tfrl.envs import envpool_vector
from tfrl.errors import UsageError
from tfrl.hardware import distribute, runtime as runtime_lib, runtime_defaults
from tfrl.lazy_import import LazyModule
from tfrl.rollout_actors import MODES, ActorSettings, cluster
from tfrl.run import BEST_POLICY_DIR, CHECKPOINT_DIR, CONFIG_FILE, LOCK_FILE, run_finder, runs, shutdown, warm_start

# TensorFlow loads in execute(), after every check.
checkpoints = LazyModule("tfrl.run.checkpoints")
keras = LazyModule("keras")
training_loop = LazyModule("tfrl.run.training_loop")

MAX_SEED = 2**32 - 1  # NumPy's global seed (keras.utils.set_random_seed) takes 32 bits


@dataclasses.dataclass(frozen=True)
class TrainRequest:
    """A training run as asked for: what scripts/train.py's flags and tfrl.train's arguments both become."""

    agent: str
    env: Any  # a gymnasium id ("CartPole-v1", "my_pkg.envs:MyEnv-v0"), a factory returning an Env, or an EnvSpec
    env_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    seed: int = 0
    preset: str = "auto"  # "auto" (the one for agent and env), "none", a preset's name, or a JSON file's path
    hp: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # overrides, typed or as strings
    config_dir: pathlib.Path | None = None  # a folder of the user's presets, searched before the built-in ones
    run_dir: pathlib.Path | None = None  # None: an interrupted run of the same command, else a new one
    runs_root: pathlib.Path = pathlib.Path("runs")  # where run dirs without a --run_dir go
    new_run: bool = False  # run_dir None: start a new run even if an interrupted one of the same command exists
    resume: bool = False  # continue the run in run_dir as config.json has it (its config, not the presets')
    init_from: pathlib.Path | None = None  # a run dir or SavedModel whose weights a new run starts from
    runtime: runtime_lib.RuntimeOptions = runtime_lib.RuntimeOptions()
    vector_mode: str = "sync"
    keep_checkpoints: int = 3  # the newest kept; 0 keeps all
    export_base_path: pathlib.Path | None = None  # None: <run_dir>/saved_models
    export: bool = True
    model_name: str | None = None  # None: <agent>-<env>
    actors: int = 0  # >0: step the envs in this many Ray actors (tfrl.rollout_actors)
    actor_mode: str = "sync"  # tfrl.rollout_actors.MODES
    weight_sync_period: int = 1  # updates between two refreshes of the actors' weights
    ray_address: str | None = None  # the actors' Ray: None starts one here (tfrl.rollout_actors.cluster)

    @property
    def actor_settings(self) -> ActorSettings:
        return ActorSettings(self.actors, self.actor_mode, self.weight_sync_period)


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A request that passed every check: what execute() runs."""

    request: TrainRequest
    agent: agents.RegisteredAgent  # resolved once, here; the loop and the export take it from here
    env: envs.EnvSpec
    record: runs.RunRecord  # what config.json holds (or will hold)
    saved: runs.RunRecord | None  # the run already in run_dir, if any
    chief: bool  # False on the other workers of a multi_worker run: they write nothing
    complete: dict | None  # the run dir's result.json, if its run is complete (and not extended)
    run_dir: pathlib.Path | None = None  # where the run goes (None on a multi_worker run's other workers)
    extending: bool = False  # the run in run_dir continues to a new total_env_steps
    source: warm_start.Source | None = None  # the weights a new run starts from
    model_label: str = "env"  # the env's part of default run dir and model names

    @property
    def config(self):
        return self.record.config


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What a launch did."""

    run_dir: pathlib.Path | None  # None on a multi_worker run's other workers
    record: dict  # result.json's (runs.result_record), or the loop's "stopped" record
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
    record = _record(request, spec, env, info, saved)
    source = None
    if request.init_from is not None and saved is None:
        source = warm_start.check(request.init_from, record)
        record = dataclasses.replace(record, init_from=str(source.path.resolve()))
    label = envs.readable_name(env)
    if chief and run_dir is None:
        run_dir, saved = _run_dir_for(request, record, label)
    extending = _check_same_run(request, run_dir, record, saved)
    complete = runs.read_result(run_dir) if saved is not None and not extending else None
    if record.preset is None and request.preset == "auto" and not request.resume:  # every check passed
        config = record.config
        logging.warning("no preset of %s for %s: training with %s's defaults (total_env_steps=%d, hidden_sizes=%s); "
                        "--hp sets any of them, --hp=help lists them", request.agent, env.name,
                        type(config).__name__, config.total_env_steps, list(getattr(config, "hidden_sizes", ())))
    return Prepared(request=request, agent=spec, env=env, record=record, saved=saved, chief=chief, complete=complete,
                    run_dir=run_dir, extending=extending, source=source, model_label=label)


def _record(request: TrainRequest, spec: agents.RegisteredAgent, env: envs.EnvSpec, info: envs.EnvInfo,
            saved: runs.RunRecord | None) -> runs.RunRecord:
    """The run's record (config.json): preset, hyperparameters and runtime options resolved and checked."""
    if request.resume:
        config, preset_name = saved.config, saved.preset  # as saved, even if the presets changed since
        preset_runtime = {"xla": saved.runtime.xla, "mixed_precision": saved.runtime.mixed_precision}
        source = "the resumed run"
    else:
        config, preset_name, preset_runtime = _preset_config(request, spec, env)
        source = f"preset {preset_name}"
    config = config_lib.apply_overrides(config, request.hp, "--hp")
    spec.check_env(info, config)
    spec.check_memory(config, info, request.vector_mode)
    spec.check_actors(config, info, request.actor_settings)
    runtime_lib.validate_options(request.runtime)
    if request.run_dir is not None:
        errors.check_output_dir("run_dir", request.run_dir)
    if request.export and request.export_base_path is not None:
        errors.check_output_dir("export_base_path", request.export_base_path)
    # May list the GPUs, which imports TF: the checks come first.
    runtime, choices = runtime_defaults.resolve(request.runtime, preset_runtime, source)
    return runs.RunRecord(agent=request.agent, env_id=env.name, seed=request.seed, config=config,
                          runtime=runtime, runtime_choices=choices, env_arg=_env_arg(request.env),
                          env_kwargs=dict(env.kwargs),
                          preset=preset_name, vector_mode=request.vector_mode,
                          keep_checkpoints=request.keep_checkpoints, env_info=info.to_dict(),
                          init_from=saved.init_from if request.resume else None)


def _run_dir_for(request: TrainRequest, record: runs.RunRecord, label: str):
    """(run dir, the run it holds) without a --run_dir: the newest interrupted run of the same command, unless
    new_run; else a new <runs_root>/<agent>-<env>-s<seed>-<time>."""
    prefix = f"{request.agent}-{label}-s{request.seed}"
    if not request.new_run:
        found = run_finder.find_interrupted(request.runs_root, prefix, record)
        if found is not None:
            number = checkpoints.latest_checkpoint_number(found)
            logging.info("continuing the interrupted run in %s from its checkpoint %d (--new_run starts a new one)",
                         found, number)
            return found, runs.read_config(found)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = request.runs_root / f"{prefix}-{stamp}"
    suffix = 2
    while run_dir.exists():  # two runs started within a second
        run_dir, suffix = request.runs_root / f"{prefix}-{stamp}-{suffix}", suffix + 1
    errors.check_output_dir("run_dir", run_dir)
    return run_dir, None


def _check_same_run(request: TrainRequest, run_dir: pathlib.Path | None, record: runs.RunRecord,
                    saved: runs.RunRecord | None) -> bool:
    """UsageError unless the run in run_dir is the one asked for; True if it is extended (or shortened) to a new
    total_env_steps, which must lie beyond its newest checkpoint."""
    if saved is None:
        return False
    differences = record.differences(saved, ignore=("total_env_steps",))
    if request.init_from is not None and saved.init_from != str(pathlib.Path(request.init_from).resolve()):
        differences.append(f"init_from: {str(request.init_from)!r} != {saved.init_from!r}")
    if differences:
        advice = ("drop the options that differ" if request.resume
                  else "use a new run dir, or --resume to continue it as it was")
        raise UsageError(f"--run_dir {run_dir} holds a run with a different config (requested != saved: "
                         f"{'; '.join(differences)}); {advice}")
    total = record.config.total_env_steps
    if total == saved.config.total_env_steps:
        return False
    trained = _trained_env_steps(run_dir)
    if total <= trained:
        raise UsageError(f"total_env_steps={total}: the run in {run_dir} has trained {trained} env steps already "
                         f"(total_env_steps={saved.config.total_env_steps}); give more to extend it")
    return True


def _trained_env_steps(run_dir: pathlib.Path) -> int:
    """Env steps of the run's newest committed checkpoint (0 if none)."""
    newest = checkpoints.Checkpointer(run_dir, {}).newest_loop_state()
    return newest[0] if newest else 0


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
    _check_actors(request)
    if request.config_dir is not None and not request.config_dir.is_dir():
        raise UsageError(f"--config_dir: {request.config_dir} is not a directory")
    if request.runtime.strategy == "multi_worker" and request.resume:
        raise UsageError("--resume is not supported with --strategy=multi_worker: the other workers' replay and "
                         "env state are not checkpointed; start a new --run_dir")
    envs.check_render_mode(request.env_kwargs)
    if request.new_run and request.run_dir is not None:
        raise UsageError("--new_run starts a run in a new directory under runs/; it takes no --run_dir")
    if request.init_from is not None and request.resume:
        raise UsageError("--init_from starts a new run from other weights; --resume continues a run from its own")
    if request.init_from is not None and not pathlib.Path(request.init_from).exists():
        raise UsageError(f"--init_from: {request.init_from} does not exist")


def _check_actors(request: TrainRequest) -> None:
    if request.actors < 0:
        raise UsageError(f"--actors must be >= 0 (0 steps the envs in this process), got {request.actors}")
    if request.actors and request.runtime.strategy == "multi_worker":
        raise UsageError("--actors and --strategy=multi_worker: rollout actors feed one learner; pick one")
    if request.actor_mode not in MODES:
        raise UsageError(f"--actor_mode must be one of {', '.join(MODES)}, got {request.actor_mode!r}")
    if isinstance(request.weight_sync_period, bool) or request.weight_sync_period < 1:
        raise UsageError(f"--weight_sync_period must be >= 1 (updates), got {request.weight_sync_period}")
    if not request.actors and (request.actor_mode != "sync" or request.weight_sync_period != 1):
        raise UsageError("--actor_mode and --weight_sync_period are how rollout actors run; give --actors too")
    cluster.check_address(request.ray_address, request.actors)


def _saved_run(run_dir: pathlib.Path | None) -> runs.RunRecord | None:
    """The run already in run_dir, or None if it is new or empty; UsageError if it holds something else."""
    if run_dir is None or not run_dir.exists():
        return None
    if not run_dir.is_dir():
        raise UsageError(f"--run_dir: {run_dir} exists and is not a directory")
    if all(path.name == LOCK_FILE for path in run_dir.iterdir()):
        return None
    if not (run_dir / CONFIG_FILE).exists():
        raise UsageError(f"--run_dir {run_dir} is not empty and holds no tfrl run (no {CONFIG_FILE}); "
                         "pick a new one")
    for name in (CHECKPOINT_DIR, BEST_POLICY_DIR):
        if (run_dir / name).exists() and not (run_dir / name).is_dir():
            raise UsageError(f"{run_dir / name} is not a directory: it must hold the run's checkpoints; move the "
                             "file away")
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


def _preset_config(request: TrainRequest, spec: agents.RegisteredAgent, env: envs.EnvSpec):
    """(the agent's config with the preset applied, the preset's name or None, its runtime defaults)."""
    names = [name for name in (_env_arg(request.env), env.id) if name]
    preset = presets.find(request.agent, names, request.preset, presets.search_dirs(request.config_dir))
    config = spec.config_cls()
    if preset is None:
        return config, None, {}
    if names and not set(names) & set(preset.env_ids):
        logging.warning("preset %s is for %s, not %s: its hyperparameters may not suit this env", preset.name,
                        ", ".join(preset.env_ids), env.name)
    config = config_lib.apply_overrides(config, preset.hparams, f"preset {preset.name}")
    return config, preset.name, preset.runtime


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
        return _already_complete(prepared.run_dir, prepared.complete)
    runtime = runtime_lib.apply(prepared.record.runtime)  # validates first; raises before anything is written
    training_loop.check_runtime(prepared.agent, prepared.config, runtime)
    # Python, NumPy and TF global seeds: network initialization (under multi_worker, the chief's initial
    # values are broadcast to every worker when the variables are created).
    keras.utils.set_random_seed(request.seed)
    actors_ray = (cluster.connected(request.ray_address, request.actors) if request.actors
                  else contextlib.nullcontext())
    with actors_ray, _run_directory(prepared) as (run_dir, complete):
        if complete is not None:  # another process finished it while this one waited for the lock
            return _already_complete(run_dir, complete)
        for line in runtime.banner(prepared.record.runtime_choices).splitlines():
            logging.info("%s", line)
        logging.info("agent=%s env=%s preset=%s seed=%d", request.agent, prepared.env.name, prepared.record.preset,
                     request.seed)
        config = prepared.config
        if config.trained_env_steps != config.total_env_steps:
            logging.info("total_env_steps=%d trains %d env steps: a whole number of collection passes of %d env "
                         "steps each (A2C, PPO: num_envs x rollout_length)", config.total_env_steps,
                         config.trained_env_steps, config.env_steps_per_collect)
        logging.info("run_dir=%s", run_dir)
        options = training_loop.LoopOptions(vector_mode=request.vector_mode, progress_bar=progress_bar,
                                            stop_requested=stop_requested, callbacks=tuple(callbacks),
                                            keep_checkpoints=request.keep_checkpoints or None,
                                            init_from=prepared.source, actors=request.actor_settings)
        # Each worker its own env, exploration and replay seeds; the chief's are the run's seed.
        record = training_loop.train(prepared.agent, prepared.config, prepared.env, runtime.worker_seed(request.seed),
                                     runtime, run_dir, options)
        digest = _variables_digest(run_dir) if runtime.cluster.num_workers > 1 else None
        if record["kind"] == "stopped" or not prepared.chief:
            return RunResult(run_dir=run_dir if prepared.chief else None, record=record,
                             task=runtime.cluster.task, variables_sha256=digest)
        saved_model = _export(prepared, run_dir, best=record.get("best") is not None)
        result = runs.result_record(record, saved_model)
        runs.write_result(run_dir, result)
        return RunResult(run_dir=run_dir, record=result, saved_model=saved_model, task=runtime.cluster.task,
                         variables_sha256=digest)


def _already_complete(run_dir: pathlib.Path | None, result: dict) -> RunResult:
    return RunResult(run_dir=run_dir, record=result, already_complete=True,
                     saved_model=_path_or_none(result.get("saved_model")))


@contextlib.contextmanager
def _run_directory(prepared: Prepared):
    """(the run dir, created, locked and holding config.json, for as long as the block runs; its result.json if
    another process completed the run before the lock was taken). A temporary directory on a multi_worker run's
    other workers."""
    if not prepared.chief:
        with tempfile.TemporaryDirectory(prefix="tfrl-worker-") as worker_dir:
            yield pathlib.Path(worker_dir), None
        return
    run_dir = prepared.run_dir
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--run_dir: cannot create {run_dir}: {e.strerror}") from None
    lock = runs.lock_for_training(run_dir)
    try:
        yield run_dir, _take_run_dir(prepared, run_dir)
    finally:
        if lock is not None:
            lock.close()


def _take_run_dir(prepared: Prepared, run_dir: pathlib.Path) -> dict | None:
    """Under the lock: writes config.json for a new or extended run; the run's result.json if it is complete now."""
    saved = _saved_run(run_dir)  # again: another process may have written it since prepare()
    if saved is not None and prepared.saved is None:
        _check_same_run(prepared.request, run_dir, prepared.record, saved)
    complete = runs.read_result(run_dir)
    if complete is not None and not prepared.extending:
        return complete
    if prepared.extending:
        runs.remove_result(run_dir)  # first: a crash before the new config.json leaves an interrupted run
        logging.info("%s: extending the run to total_env_steps=%d", run_dir, prepared.config.total_env_steps)
    if saved is None or prepared.extending:
        runs.write_config(run_dir, prepared.record)
    else:
        number = checkpoints.latest_checkpoint_number(run_dir)
        logging.info("%s holds this run already: %s", run_dir,
                     f"resuming from its newest loadable checkpoint (newest: {number})" if number
                     else "no checkpoint yet, starting over")
    return None


def _export(prepared: Prepared, run_dir: pathlib.Path, best: bool) -> pathlib.Path | None:
    request = prepared.request
    if not request.export:
        return None
    base_path = request.export_base_path or run_dir / "saved_models"
    model_name = request.model_name or f"{request.agent}-{prepared.model_label}"
    return runs.export_run(run_dir, base_path, model_name, checkpoint=runs.BEST if best else runs.LAST)


def _variables_digest(run_dir: pathlib.Path) -> str:
    number = checkpoints.latest_checkpoint_number(run_dir)
    return distribute.checkpoint_digest(run_dir / checkpoints.CHECKPOINT_DIR / f"ckpt-{number}")


def _path_or_none(value: str | None) -> pathlib.Path | None:
    return pathlib.Path(value) if value else None

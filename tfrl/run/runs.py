"""A run directory: its resolved config, and the greedy policy of one of its checkpoints.

    <run_dir>/config.json       the resolved config (scripts/train.py writes it once, at the start)
    <run_dir>/metrics.jsonl     tfrl.run.metrics
    <run_dir>/tensorboard/      tfrl.run.metrics
    <run_dir>/checkpoints/      tfrl.run.checkpoints
    <run_dir>/best_policy/      tfrl.run.best_policy (keep_best_policy runs): the best evaluated policy
    <run_dir>/saved_models/<model_name>/<version>/   tfrl.models.export (train.py exports there at the end)
    <run_dir>/result.json       the final evaluation record and the export, written when the run is complete
    <run_dir>/.lock             the pid of the process training into it, flock-ed while it runs

An agent's exportable policy comes from the policy module the agent registry names
(tfrl.agents), function `serving_policy(config, env_info) -> tfrl.models.export.ServingPolicy`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
from typing import Any, Callable, Mapping

from absl import logging

import tfrl
from tfrl import agents, config as config_lib, envs, strict_json
from tfrl.envs.env_info import checked_record
from tfrl.errors import UsageError
from tfrl.hardware.runtime import RuntimeOptions, option_types
from tfrl.lazy_import import LazyModule
from tfrl.run import BEST_POLICY_DIR, CONFIG_FILE, LOCK_FILE, RESULT_FILE

# TensorFlow loads at the first policy load or export: a launcher checks a run's config.json without it.
best_policy = LazyModule("tfrl.run.best_policy")
checkpoints = LazyModule("tfrl.run.checkpoints")
export = LazyModule("tfrl.models.export")
tf = LazyModule("tensorflow")


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """A run's config.json: what defines the run, and how it was launched. This class is its only reader and
    writer: train.py writes it once, at the start; --resume, evaluation and export read it.

    Resuming needs the same agent, env id, seed, hyperparameters and precision (`differences`); the launcher
    flags (`launcher_flags`) fill in what a --resume command line leaves out.
    """

    agent: str
    env_id: str  # resolved, e.g. LunarLander-v3
    seed: int
    config: Any  # the agent's config dataclass
    runtime: RuntimeOptions = RuntimeOptions()
    # Why XLA and the precision have their values (tfrl.hardware.runtime_defaults): for the banner and config.json's reader.
    runtime_choices: Mapping[str, str] = dataclasses.field(default_factory=dict)
    env_arg: str | None = None  # as given on the command line, e.g. LunarLander-v2 (None: env_id)
    env_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # passed to gymnasium.make
    env_info: Mapping[str, Any] | None = None  # envs.EnvInfo.to_dict(): what the networks are built for
    preset: str | None = None
    vector_mode: str = "sync"
    keep_checkpoints: int | None = None  # as given; None: the launcher's default
    init_from: str | None = None  # the run dir or SavedModel whose weights the run started from (tfrl.run.warm_start)
    tfrl_version: str = tfrl.__version__

    @property
    def mixed_precision(self) -> str:
        """The precision policy: it changes the optimizer's checkpoint structure (loss scaling)."""
        return self.runtime.mixed_precision or "float32"  # unset: the default

    def differences(self, other: RunRecord, ignore: tuple[str, ...] = ()) -> list[str]:
        """Human-readable "field: mine != other's" for each difference that makes another run; empty if none.
        ignore: hyperparameters left out (e.g. total_env_steps, which an extended run changes)."""
        diffs = [f"{name}: {getattr(self, name)!r} != {getattr(other, name)!r}"
                 for name in ("agent", "env_id", "seed", "mixed_precision")
                 if getattr(self, name) != getattr(other, name)]
        if _jsonable(self.env_kwargs) != _jsonable(other.env_kwargs):
            diffs.append(f"env_kwargs: {_jsonable(self.env_kwargs)!r} != {_jsonable(other.env_kwargs)!r}")
        if type(self.config) is not type(other.config):
            return diffs + [f"config class: {type(self.config).__name__} != {type(other.config).__name__}"]
        mine, theirs = config_lib.to_dict(self.config), config_lib.to_dict(other.config)
        diffs += [f"hparams.{key}: {mine[key]!r} != {theirs[key]!r}" for key in mine
                  if mine[key] != theirs[key] and key not in ignore]
        return diffs

    def launcher_flags(self) -> dict[str, Any]:
        """{flag name: value} of the launch that wrote this record, for --resume."""
        flags = {"agent": self.agent, "env": self.env_arg or self.env_id, "seed": self.seed,
                 "vector_mode": self.vector_mode, **dataclasses.asdict(self.runtime)}
        if self.keep_checkpoints is not None:
            flags["keep_checkpoints"] = self.keep_checkpoints
        return flags

    def to_json(self) -> dict:
        return {"tfrl_version": self.tfrl_version, "agent": self.agent, "env_id": self.env_id,
                "env_arg": self.env_arg or self.env_id, "env_kwargs": _jsonable(self.env_kwargs),
                "env_info": self.env_info, "seed": self.seed, "preset": self.preset,
                "vector_mode": self.vector_mode, "keep_checkpoints": self.keep_checkpoints,
                "init_from": self.init_from, "hparams": config_lib.to_dict(self.config),
                "runtime": dataclasses.asdict(self.runtime), "runtime_choices": dict(self.runtime_choices)}

    @classmethod
    def from_json(cls, raw: Any, source: str) -> RunRecord:
        """The record of a parsed config.json; UsageError naming the first field that is missing or ill-typed.

        Hyperparameters missing from the file (fields added to the config class later) take their defaults,
        and renamed ones are read under their old names (tfrl.config).
        """
        field = _JsonFields(raw, source)
        unknown = sorted(set(raw) - _RECORD_KEYS)
        if unknown:
            raise UsageError(f"{source}: unknown key {unknown[0]!r} (a run's config.json holds {sorted(_RECORD_KEYS)})")
        agent = field.get("agent", str)
        config = config_lib.apply_overrides(agents.get(agent).config_cls(), field.get("hparams", dict), source)
        runtime_raw = field.get("runtime", dict, default={})
        runtime_types = option_types()
        unknown = sorted(set(runtime_raw) - set(runtime_types))
        if unknown:
            raise UsageError(f"{source}: unknown runtime option {unknown[0]!r}")
        runtime = RuntimeOptions(**{name: _JsonFields(runtime_raw, f"{source}: runtime").get(
            name, runtime_types[name], default=getattr(RuntimeOptions(), name)) for name in runtime_raw})
        return cls(agent=agent, env_id=field.get("env_id", str), seed=field.get("seed", int), config=config,
                   runtime=runtime, runtime_choices=_checked_choices(field.get("runtime_choices", dict, {}), source),
                   env_arg=field.get("env_arg", str, None), env_kwargs=field.get("env_kwargs", dict, default={}),
                   env_info=checked_record(field.get("env_info", dict, default=None), source),
                   preset=field.get("preset", str, default=None),
                   vector_mode=field.get("vector_mode", str, default="sync"),
                   keep_checkpoints=field.get("keep_checkpoints", int, default=None),
                   init_from=field.get("init_from", str, default=None),
                   tfrl_version=field.get("tfrl_version", str, default="unknown"))


def _checked_choices(raw: Mapping[str, Any], source: str) -> dict[str, str]:
    if all(isinstance(value, str) for value in raw.values()):
        return dict(raw)
    raise UsageError(f"{source}: 'runtime_choices' must map runtime options to strings, got {raw!r:.200}")


_RECORD_KEYS = {"tfrl_version", "agent", "env_id", "env_arg", "env_kwargs", "env_info", "seed", "preset",
                "vector_mode", "keep_checkpoints", "init_from", "hparams", "runtime", "runtime_choices"}

class _JsonFields:
    """Typed reads of a JSON object's fields: a missing required field or a value of another JSON type is a
    UsageError naming the file and the field (booleans are true/false only, never "no" or 0)."""

    _REQUIRED = object()

    def __init__(self, raw: Any, source: str):
        if not isinstance(raw, dict):
            raise UsageError(f"{source}: expected a JSON object, got {type(raw).__name__}")
        self._raw, self._source = raw, source

    def get(self, name: str, kind: type, default: Any = _REQUIRED) -> Any:
        if name not in self._raw or (self._raw[name] is None and default is not self._REQUIRED):
            if default is self._REQUIRED:
                raise UsageError(f"{self._source}: missing {name!r}")
            return default
        value = self._raw[name]
        valid = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
        if not valid:
            expected = {str: "a string", int: "an integer", bool: "true or false", dict: "an object"}[kind]
            raise UsageError(f"{self._source}: {name!r} must be {expected}, got {value!r}")
        return value


def _jsonable(value: Any) -> Any:
    """value as JSON would give it back (objects JSON cannot hold become their repr)."""
    return json.loads(json.dumps(value, default=repr))


def write_config(run_dir: pathlib.Path, record: RunRecord) -> None:
    """Writes <run_dir>/config.json (atomically: a run dir never holds half a config)."""
    _write_json(pathlib.Path(run_dir) / CONFIG_FILE, record.to_json())


def result_record(final: Mapping[str, Any], saved_model: pathlib.Path | None) -> dict:
    """result.json of a finished run, from the loop's final record (the last policy's "final_eval", with the best
    policy's "best_eval" under "best" for keep_best_policy runs): at the top the evaluation of the policy the run
    exports ("policy": "best" or "last"), the last policy's under "last", the best's under "best"."""
    last = {key: value for key, value in final.items() if key != "best"}
    best = final.get("best")
    exported = {**last, **best} if best is not None else last  # the run's counters (gradient_steps, ...) stay
    return {**exported, "policy": "best" if best is not None else "last", "last": last,
            **({"best": best} if best is not None else {}), "saved_model": str(saved_model) if saved_model else None}


def write_result(run_dir: pathlib.Path, result: Mapping[str, Any]) -> None:
    """Writes <run_dir>/result.json: the run is complete (final evaluation and export done)."""
    _write_json(pathlib.Path(run_dir) / RESULT_FILE, _jsonable(dict(result)))


def remove_result(run_dir: pathlib.Path) -> None:
    """Deletes result.json: the run is no longer complete (it is being extended)."""
    try:
        (pathlib.Path(run_dir) / RESULT_FILE).unlink(missing_ok=True)
    except OSError as e:
        raise UsageError(f"--run_dir: cannot remove {run_dir / RESULT_FILE}: {e.strerror}") from None


def read_result(run_dir: pathlib.Path | None) -> dict | None:
    """The run's result.json, or None if the run is not complete (or the file is unreadable: a warning)."""
    if run_dir is None:
        return None
    path = pathlib.Path(run_dir) / RESULT_FILE
    if not path.exists():
        return None
    try:
        result = json.loads(path.read_text())
        if isinstance(result, dict) and result.get("kind") in ("final_eval", "best_eval"):  # the exported one's
            return result
    except (OSError, ValueError):
        pass
    logging.warning("%s is unreadable: the run is treated as not complete", path)
    return None


def _write_json(path: pathlib.Path, value: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(json.dumps(value, indent=2) + "\n")
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise UsageError(f"--run_dir: cannot write {path}: {e.strerror}") from None


def check_model_name(model_name: str) -> None:
    """UsageError unless model_name is one plain directory name (TF Serving's <base_path>/<model_name>)."""
    if not model_name or model_name in (".", "..") or "/" in model_name or os.sep in model_name:
        raise UsageError(f"--model_name must be a plain directory name, got {model_name!r}")


def lock_for_training(run_dir: pathlib.Path):
    """An open file holding an exclusive lock on run_dir for as long as it stays open (or the process lives).

    Two processes training into one run dir would interleave metrics and overwrite each other's checkpoints;
    the second one gets a UsageError naming the first one's pid instead. The lock is flock(2), so a process
    killed with SIGKILL releases it and the same command can resume at once. Where there is no fcntl
    (Windows), or the filesystem refuses flock (some NFS mounts: ENOLCK), there is no lock: returns None,
    after a warning in the second case, rather than refusing to train on that filesystem.
    """
    try:
        import fcntl
    except ImportError:
        return None
    path = run_dir / LOCK_FILE
    try:
        handle = open(path, "a+")
    except OSError as e:
        raise UsageError(f"--run_dir: cannot open {path}: {e.strerror}") from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise UsageError(f"--run_dir {run_dir} is in use by another training process (pid {holder}); wait for it "
                         "to end, stop it (SIGTERM or Ctrl-C saves a checkpoint), or use another --run_dir") from None
    except OSError as e:
        handle.close()
        logging.warning("cannot lock %s (%s): training without the run-dir lock, so nothing stops a second "
                        "train.py from writing into %s at the same time", path, e.strerror or e, run_dir)
        return None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def read_config(run_dir: pathlib.Path) -> RunRecord:
    """The RunRecord of a run dir; UsageError if its config.json is missing or broken."""
    path = pathlib.Path(run_dir) / CONFIG_FILE
    if not path.exists():
        raise UsageError(f"{path} does not exist: {run_dir} is not a tfrl run directory")
    try:
        text = path.read_text()
    except (OSError, ValueError) as e:
        raise UsageError(f"{path}: cannot read the run's config ({type(e).__name__}: {e})") from None
    return RunRecord.from_json(strict_json.loads(text, str(path)), str(path))


def probe_env_info(env: envs.EnvSpec | str) -> envs.EnvInfo:
    """Observation shape and action count of `env`, from one throwaway env."""
    spec = envs.as_spec(env)
    vector_env = envs.make_vector_env(spec, 1, seed=0)
    try:
        return envs.env_info(vector_env, spec.name)
    finally:
        vector_env.close()


def run_env_info(record: RunRecord) -> envs.EnvInfo:
    """What the run's networks were built for: from config.json, or (runs written before it held that) from
    one env made by its id."""
    if record.env_info is not None:
        return envs.EnvInfo.from_dict(record.env_info, record.env_id)
    return probe_env_info(envs.as_spec(record.env_id, record.env_kwargs))


@dataclasses.dataclass(frozen=True)
class LoadedPolicy:
    policy: export.ServingPolicy
    env: envs.EnvInfo
    run_config: RunRecord
    env_step: int  # training env steps at the checkpoint
    checkpoint: int  # checkpoint number (in best_policy/ for the best policy)
    best: bool = False  # the run's best policy (tfrl.run.best_policy), not a checkpoint
    best_eval_return_mean: float | None = None  # the periodic evaluation that made it the best policy, if it is


BEST, LAST = "best", "last"  # the policies a run names besides its numbered checkpoints


def load_policy(run_dir: pathlib.Path, checkpoint: int | str | None = None, best: bool = False) -> LoadedPolicy:
    """A greedy policy of a run. checkpoint: None (default) for the one the run exports, its best policy if it
    keeps one (keep_best_policy) and the newest checkpoint's otherwise; "best" for the best policy, "last" for the
    newest loadable checkpoint, or a checkpoint number N (ckpt-N). best=True is checkpoint="best"."""
    run_dir = pathlib.Path(run_dir)
    if not run_dir.is_dir():
        raise UsageError(f"run directory {run_dir} does not exist")
    run_config = read_config(run_dir)
    which = _which_policy(run_dir, run_config, checkpoint, best)
    info = run_env_info(run_config)
    policy = agents.get(run_config.agent).policy_module.serving_policy(run_config.config, info)
    if which == BEST:
        restored = best_policy.restore(run_dir, policy.checkpoint_items)
        if restored is None:
            raise checkpoints.CheckpointError(f"{run_dir} has no best policy (it is kept by runs trained with "
                                              "--hp=keep_best_policy=true)")
        return LoadedPolicy(policy=policy, env=info, run_config=run_config, env_step=restored.env_step,
                            checkpoint=restored.number, best=True,
                            best_eval_return_mean=restored.loop_state.get("eval_return_mean"))
    checkpointer = checkpoints.Checkpointer(run_dir, policy.checkpoint_items)
    if which == LAST:
        restored = checkpointer.restore_latest(load_arrays=False)
        if restored is None:
            raise checkpoints.CheckpointError(f"{run_dir} has no checkpoint yet")
    else:
        restored = checkpointer.restore(which, load_arrays=False)
    return LoadedPolicy(policy=policy, env=info, run_config=run_config, env_step=restored.env_step,
                        checkpoint=restored.number)


def _which_policy(run_dir: pathlib.Path, run_config: RunRecord, checkpoint: int | str | None, best: bool) -> int | str:
    """BEST, LAST or a checkpoint number, from load_policy's arguments; UsageError for anything else."""
    if best:
        if checkpoint not in (None, BEST):
            raise UsageError("choose a checkpoint or the best policy, not both")
        return BEST
    if checkpoint is None:
        kept = run_config.config.keep_best_policy and checkpoints.complete_numbers(run_dir / BEST_POLICY_DIR)
        return BEST if kept else LAST
    if isinstance(checkpoint, str) and checkpoint.strip().isdigit():
        checkpoint = int(checkpoint)
    if checkpoint in (BEST, LAST) or (isinstance(checkpoint, int) and not isinstance(checkpoint, bool)
                                      and checkpoint >= 1):
        return checkpoint
    raise UsageError(f"checkpoint must be \"best\", \"last\" or a checkpoint number >= 1, got {checkpoint!r}")


def export_run(run_dir: pathlib.Path, base_path: pathlib.Path, model_name: str,
               checkpoint: int | str | None = None, best: bool = False,
               finisher: Callable[..., Callable] | None = None) -> pathlib.Path:
    """Exports a greedy policy of the run (load_policy's `checkpoint`: by default the one a run exports) as the
    next version of <base_path>/<model_name>; returns its dir. finisher(env) gives export_saved_model's `finish`
    (tfrl.models.portable.convert.finisher: the LiteRT and ONNX files)."""
    loaded = load_policy(run_dir, checkpoint, best)
    best = loaded.best
    observations = loaded.env.export_observations  # the env's own mask dtype
    example = loaded.policy.outputs(*tf.nest.map_structure(lambda spec: tf.zeros([1, *spec.shape[1:]], spec.dtype),
                                                           export.signature_inputs(loaded.policy, observations)))
    state_size = loaded.policy.state_size
    metadata = {
        "agent": loaded.run_config.agent,
        "env_id": loaded.run_config.env_id,
        "env_kwargs": _jsonable(loaded.run_config.env_kwargs),
        "observation": _observation_json(observations, loaded.env),
        "action_space": loaded.env.action_space_json(),
        "signature": {"name": export.SIGNATURE, "inputs": _inputs_json(observations, state_size),
                      "outputs": {k: f"{v.dtype.name} {[None, *v.shape[1:]]}" for k, v in example.items()}},
        "memory": ({"state_size": state_size, "input": export.STATE_NAME, "output": export.STATE_NAME,
                    "start": "zeros"} if state_size else None),
        "config": config_lib.to_dict(loaded.run_config.config),
        "seed": loaded.run_config.seed,
        "train_env_steps": loaded.env_step,
        "checkpoint": None if best else loaded.checkpoint,
        "best_policy": {"eval_return_mean": loaded.best_eval_return_mean} if best else None,
        "run_dir": str(pathlib.Path(run_dir).resolve()),
        "tfrl_version": tfrl.__version__,
    }
    finish = None
    if finisher is not None:  # it plays the env: an id the run can make again
        finish = finisher(envs.as_spec(loaded.run_config.env_id, loaded.run_config.env_kwargs))
    return export.export_saved_model(loaded.policy, observations, base_path, model_name, metadata, finish)


def _observation_json(observations, info: envs.EnvInfo) -> dict:
    """What the signature takes, and the env's own space where a policy object converts it (tfrl.models.env_space)."""
    own = {"env_space": json.loads(info.env_space)} if info.env_space else {}
    if not observations.structured:
        field = observations.fields[0]
        return {"shape": list(field.shape), "dtype": field.dtype, **own}
    return {"shape": [], "dtype": "structured", "fields": observations.to_json(), **own}


def _inputs_json(observations, state_size: int) -> dict:
    state = {export.STATE_NAME: f"float32 [None, {state_size}]"} if state_size else {}
    if not observations.structured:
        return {export.INPUT_NAME: f"{observations.fields[0].dtype} [None, *obs_shape]", **state}
    return {**{export.input_name(field.key): f"{field.dtype} {[None, *field.shape]}" for field in observations.fields},
            **state}

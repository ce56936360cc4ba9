"""Starting a new run from another run's weights: `--init_from=RUN_DIR|SAVED_MODEL`, `tfrl.train(init_from=...)`.

    a run dir      every network of its newest checkpoint (the learner's Keras layers: policy, value, Q and
                   target networks, the observation statistics); optimizers, counters, replay and RNGs start fresh
    a SavedModel   an export (a version dir, or a model dir whose highest version is taken): the exported policy
                   network and its observation statistics only; networks the export lacks (SAC's critics) start
                   fresh, and target networks are copied from the networks they follow

The source must be of the same agent, with the same observation and action spaces and the same network settings
(the agent config's NETWORK_FIELDS); `check` says which differs, before anything is written. The weights are
loaded once, when the new run starts; a resumed run continues from its own checkpoints.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any, Mapping

from tfrl import config as config_lib
from tfrl.errors import RunError, UsageError
from tfrl.lazy_import import LazyModule
from tfrl.run import CONFIG_FILE, runs

checkpoints = LazyModule("tfrl.run.checkpoints")
export = LazyModule("tfrl.models.export")
keras = LazyModule("keras")
tf = LazyModule("tensorflow")

_METADATA = pathlib.Path("assets.extra") / "tfrl_metadata.json"  # tfrl.models.export's, read without importing TF


@dataclasses.dataclass(frozen=True)
class Source:
    kind: str  # "run" or "saved_model"
    path: pathlib.Path  # the run dir, or the SavedModel version dir
    agent: str
    config: Mapping[str, Any]  # hyperparameters, as JSON
    observation: tuple[tuple[int, ...], str]  # (shape, dtype)
    actions: Any  # what identifies the action space: the number of actions, or the Box's shape

    def describe(self) -> str:
        return f"{'run' if self.kind == 'run' else 'SavedModel'} {self.path}"


def check(path: pathlib.Path, record: runs.RunRecord) -> Source:
    """The source at `path`, checked against the new run's record; UsageError naming the first mismatch."""
    source = _read_source(pathlib.Path(path))
    if source.agent != record.agent:
        raise UsageError(f"--init_from: {source.describe()} is a {source.agent} policy, not {record.agent}")
    info = record.env_info
    wanted = ((tuple(info["obs_shape"]), info.get("obs_dtype", "float32")), _actions(info))
    if (source.observation, source.actions) != wanted:
        raise UsageError(f"--init_from: {source.describe()} takes observations {source.observation} and actions "
                         f"{source.actions}; this run's env has {wanted[0]} and {wanted[1]}")
    new = config_lib.to_dict(record.config)
    for name in type(record.config).NETWORK_FIELDS:
        theirs = source.config.get(name)
        if theirs != new[name]:
            raise UsageError(f"--init_from: {source.describe()} has {name}={theirs!r}, this run {new[name]!r}: "
                             "the networks differ; set the same value")
    return source


def _actions(env_info: Mapping[str, Any]) -> Any:
    return int(env_info["num_actions"]) or tuple(env_info.get("action_shape", ()))


def _read_source(path: pathlib.Path) -> Source:
    if (path / CONFIG_FILE).is_file():
        saved = runs.read_config(path)
        if checkpoints.latest_checkpoint_number(path) is None:
            raise UsageError(f"--init_from: the run in {path} has no checkpoint yet")
        info = runs.run_env_info(saved).to_dict()
        return Source("run", path, saved.agent, config_lib.to_dict(saved.config),
                      (tuple(info["obs_shape"]), info.get("obs_dtype", "float32")), _actions(info))
    version = _version_dir(path)
    try:
        metadata = json.loads((version / _METADATA).read_text())
        space = metadata["action_space"]
        actions = int(space["n"]) if space["type"] == "Discrete" else tuple(space["shape"])
        observation = (tuple(metadata["observation"]["shape"]), metadata["observation"]["dtype"])
        return Source("saved_model", version, metadata["agent"], metadata["config"], observation, actions)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"--init_from: {version} has no readable tfrl metadata ({type(e).__name__}: {e}); "
                         "only tfrl's exports and run dirs can start a run") from None


def _version_dir(path: pathlib.Path) -> pathlib.Path:
    """A SavedModel version dir: `path` itself, or the highest integer version under it."""
    if (path / "saved_model.pb").is_file():
        return path
    versions = sorted(int(p.name) for p in path.iterdir() if p.is_dir() and p.name.isdigit()) if path.is_dir() else []
    if not versions:
        raise UsageError(f"--init_from: {path} is neither a run directory (config.json) nor a SavedModel "
                         "(saved_model.pb, or version directories holding one)")
    return path / str(versions[-1])


def load(source: Source, agent) -> None:
    """Assigns the source's weights to the agent's learner (see the module docstring); RunError if they do not fit."""
    if source.kind == "run":
        _load_run(source.path, agent.learner)
    else:
        _load_saved_model(source.path, agent.serving_policy())
        sync = getattr(agent.learner, "sync_target_networks", None)
        if sync is not None:
            sync()
    agent.reload_weights()


def _load_run(run_dir: pathlib.Path, learner) -> None:
    networks = {name: item for name, item in learner.checkpoint_items().items()
                if isinstance(item, keras.layers.Layer)}
    number = checkpoints.latest_checkpoint_number(run_dir)
    prefix = run_dir / checkpoints.CHECKPOINT_DIR / f"ckpt-{number}"
    try:
        status = tf.train.Checkpoint(**networks).read(str(prefix))
        status.assert_existing_objects_matched().expect_partial()
    except (AssertionError, ValueError, tf.errors.OpError) as e:
        raise RunError(f"--init_from: the networks of checkpoint {number} in {run_dir} do not fit this run's "
                       f"({str(e).splitlines()[0]})") from None


def _load_saved_model(version_dir: pathlib.Path, policy) -> None:
    loaded = tf.saved_model.load(str(version_dir))
    targets = list(policy.model.variables)
    if policy.observation_normalization is not None:
        targets += list(policy.observation_normalization.variables)
    sources = list(loaded.variables)
    shapes = [(tuple(v.shape), v.dtype) for v in sources]
    if shapes != [(tuple(v.shape), tf.as_dtype(v.dtype)) for v in targets]:
        raise RunError(f"--init_from: the variables of {version_dir} do not fit this run's policy network")
    for target, value in zip(targets, sources):
        target.assign(value)

"""A run directory: its resolved config, and the greedy policy of one of its checkpoints.

    <run_dir>/config.json       the resolved config (scripts/train.py writes it once, at the start)
    <run_dir>/metrics.jsonl     tfrl.metrics
    <run_dir>/tensorboard/      tfrl.metrics
    <run_dir>/checkpoints/      tfrl.checkpoints
    <run_dir>/best_policy/      tfrl.best_policy (keep_best_policy runs): the best evaluated policy
    <run_dir>/saved_models/<model_name>/<version>/   tfrl.export (train.py exports there at the end)
    <run_dir>/.lock             the pid of the process training into it, flock-ed while it runs

An agent's exportable policy comes from the module `tfrl.agents.<agent>.policy`,
function `serving_policy(config, env_info) -> tfrl.export.ServingPolicy`.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import pathlib
from typing import Any

from absl import logging

import tfrl
from tfrl import agents, config as config_lib, envs
from tfrl.errors import UsageError
from tfrl.lazy_import import LazyModule

# TensorFlow loads at the first policy load or export: a launcher checks a run's config.json without it.
best_policy = LazyModule("tfrl.best_policy")
checkpoints = LazyModule("tfrl.checkpoints")
export = LazyModule("tfrl.export")
tf = LazyModule("tensorflow")

CONFIG_FILE = "config.json"
LOCK_FILE = ".lock"  # held (flock) by the one process training into the run dir; the OS drops it when that process dies


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """What defines a run: resuming needs the same agent, env id, seed, hyperparameters and precision."""

    agent: str
    env_id: str  # resolved, e.g. LunarLander-v3
    seed: int
    config: Any  # the agent's config dataclass
    mixed_precision: str = "float32"  # changes the optimizer's checkpoint structure (loss scaling)

    def differences(self, other: RunConfig) -> list[str]:
        """Human-readable "field: mine != other's" for each difference; empty if the runs are the same."""
        diffs = [f"{name}: {getattr(self, name)!r} != {getattr(other, name)!r}"
                 for name in ("agent", "env_id", "seed", "mixed_precision")
                 if getattr(self, name) != getattr(other, name)]
        if type(self.config) is not type(other.config):
            return diffs + [f"config class: {type(self.config).__name__} != {type(other.config).__name__}"]
        mine, theirs = config_lib.to_dict(self.config), config_lib.to_dict(other.config)
        diffs += [f"hparams.{key}: {mine[key]!r} != {theirs[key]!r}" for key in mine if mine[key] != theirs[key]]
        return diffs


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


def read_config(run_dir: pathlib.Path) -> tuple[RunConfig, dict]:
    """(RunConfig, the raw config.json) of a run dir; UsageError if it is missing or broken.

    Hyperparameters missing from the file (fields added to the config class later) take their defaults.
    """
    path = pathlib.Path(run_dir) / CONFIG_FILE
    if not path.exists():
        raise UsageError(f"{path} does not exist: {run_dir} is not a tfrl run directory")
    try:
        raw = json.loads(path.read_text())
        agent, env_id, seed, hparams = raw["agent"], raw["env_id"], int(raw["seed"]), raw["hparams"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"{path}: cannot read the run's config ({type(e).__name__}: {e})") from None
    entry = agents.get(agent)
    config = config_lib.apply_overrides(entry.config_cls(), hparams, str(path))
    mixed_precision = (raw.get("runtime") or {}).get("mixed_precision", "float32")
    return RunConfig(agent=agent, env_id=env_id, seed=seed, config=config, mixed_precision=mixed_precision), raw


def env_info(env_id: str) -> envs.EnvInfo:
    """Observation shape and action count of `env_id`, from one throwaway env."""
    env = envs.make_vector_env(env_id, 1, seed=0)
    try:
        return envs.env_info(env, env_id)
    finally:
        env.close()


def policy_module(agent: str):
    name = f"tfrl.agents.{agent}.policy"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name:
            raise
        raise UsageError(f"agent {agent!r} has no exportable policy yet (no module {name})") from None


@dataclasses.dataclass(frozen=True)
class LoadedPolicy:
    policy: export.ServingPolicy
    env: envs.EnvInfo
    run_config: RunConfig
    env_step: int  # training env steps at the checkpoint
    checkpoint: int  # checkpoint number (in best_policy/ for the best policy)
    best_eval_return_mean: float | None = None  # the periodic evaluation that made it the best policy, if it is


def load_policy(run_dir: pathlib.Path, checkpoint: int | None = None, best: bool = False) -> LoadedPolicy:
    """The greedy policy of checkpoint `checkpoint` (None: the newest loadable one) of a run, or its best policy."""
    run_dir = pathlib.Path(run_dir)
    if not run_dir.is_dir():
        raise UsageError(f"run directory {run_dir} does not exist")
    run_config, _ = read_config(run_dir)
    info = env_info(run_config.env_id)
    policy = policy_module(run_config.agent).serving_policy(run_config.config, info)
    if best:
        if checkpoint is not None:
            raise UsageError("choose a checkpoint number or the best policy, not both")
        restored = best_policy.restore(run_dir, policy.checkpoint_items)
        if restored is None:
            raise checkpoints.CheckpointError(f"{run_dir} has no best policy (it is kept by runs trained with "
                                              "--hp=keep_best_policy=true)")
        return LoadedPolicy(policy=policy, env=info, run_config=run_config, env_step=restored.env_step,
                            checkpoint=restored.number,
                            best_eval_return_mean=restored.loop_state.get("eval_return_mean"))
    checkpointer = checkpoints.Checkpointer(run_dir, policy.checkpoint_items)
    if checkpoint is None:
        restored = checkpointer.restore_latest(load_arrays=False)
        if restored is None:
            raise checkpoints.CheckpointError(f"{run_dir} has no checkpoint yet")
    else:
        restored = checkpointer.restore(checkpoint, load_arrays=False)
    return LoadedPolicy(policy=policy, env=info, run_config=run_config, env_step=restored.env_step,
                        checkpoint=restored.number)


def export_run(run_dir: pathlib.Path, base_path: pathlib.Path, model_name: str,
               checkpoint: int | None = None, best: bool = False) -> pathlib.Path:
    """Exports a checkpoint's greedy policy (or the best policy's) as the next version of
    <base_path>/<model_name>; returns its dir."""
    loaded = load_policy(run_dir, checkpoint, best)
    obs_shape = list(loaded.env.obs_shape)
    example = loaded.policy.outputs(tf.zeros([1, *obs_shape], tf.float32))
    metadata = {
        "agent": loaded.run_config.agent,
        "env_id": loaded.run_config.env_id,
        "observation": {"shape": obs_shape, "dtype": "float32"},
        "action_space": {"type": "Discrete", "n": loaded.env.num_actions},
        "signature": {"name": export.SIGNATURE, "inputs": {export.INPUT_NAME: "float32 [None, *obs_shape]"},
                      "outputs": {k: f"{v.dtype.name} {[None, *v.shape[1:]]}" for k, v in example.items()}},
        "config": config_lib.to_dict(loaded.run_config.config),
        "seed": loaded.run_config.seed,
        "train_env_steps": loaded.env_step,
        "checkpoint": None if best else loaded.checkpoint,
        "best_policy": {"eval_return_mean": loaded.best_eval_return_mean} if best else None,
        "run_dir": str(pathlib.Path(run_dir).resolve()),
        "tfrl_version": tfrl.__version__,
    }
    return export.export_saved_model(loaded.policy, obs_shape, base_path, model_name, metadata)

"""tfrl from Python: train an agent, then load and use its policy.

    import tfrl
    run = tfrl.train("ppo", "CartPole-v1", hp={"total_env_steps": 50_000}, run_dir="runs/ppo-cartpole", seed=0)
    print(run.result["return_mean"])              # the exported policy's final greedy evaluation
    policy = tfrl.load_policy("runs/ppo-cartpole")  # or an exported SavedModel directory
    action = policy(observation)                   # one observation -> one action; a batch -> a batch

train() is what `tfrl train` runs (tfrl.run.launch): the same presets, checks, checkpoints and resume, metrics,
log lines, best policy and export; the same call again continues an interrupted run.
"""

from __future__ import annotations

import contextlib
import logging as std_logging
import os
import pathlib
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from absl import logging as absl_logging

import tfrl
from tfrl import envs
from tfrl.envs.observations import ObsSpec
from tfrl.errors import UsageError
from tfrl.hardware import quiet_logs
from tfrl.hardware.runtime import RuntimeOptions
from tfrl.lazy_import import LazyModule
from tfrl.models import env_space, policy_inputs
from tfrl.models.policy_memory import PolicyMemory, RememberingPolicy
from tfrl.models.portable import runtime as portable
from tfrl.run import launch, shutdown

evaluation = LazyModule("tfrl.run.evaluation")
export = LazyModule("tfrl.models.export")
runs = LazyModule("tfrl.run.runs")
serving = LazyModule("tfrl.models.serving")


def train(agent: str, env: str | Callable[..., Any] | envs.EnvSpec, *, hp: Mapping[str, Any] | None = None,
          seed: int = 0, run_dir: str | os.PathLike | None = None, preset: str = "auto",
          env_kwargs: Mapping[str, Any] | None = None, runtime: RuntimeOptions | None = None,
          callbacks: Sequence[Any] = (), vector_mode: str = "sync", keep_checkpoints: int = 3,
          export: bool = True, model_name: str | None = None, new_run: bool = False,
          init_from: str | os.PathLike | None = None, config_dir: str | os.PathLike | None = None,
          verbose: int = 1, progress_bar: bool | None = None, actors: int = 0, actor_mode: str = "sync",
          weight_sync_period: int = 1, ray_address: str | None = None) -> Run:
    """Trains `agent` (a name of tfrl.agents.AGENT_NAMES: "dqn", "ppo", ...) on `env` and returns the Run.

    env: a gymnasium id ("CartPole-v1"), "module:Id" (the module is imported first: it registers the id), or a
      function returning a gymnasium.Env (called once per env copy: vector envs, evaluation), made with
      env_kwargs.
    hp: hyperparameter overrides on top of the preset (preset: "auto" picks the one for agent and env, "none"
      uses the defaults; a preset's name or a JSON file's path picks that one; config_dir: a folder of your own
      presets, searched first).
    run_dir: where config, metrics, checkpoints and the export go. One holding the same run continues it from
      its newest checkpoint (with a larger hp total_env_steps, also a complete one). Default: the interrupted
      run of the same call under runs/ (new_run=True: a new one), else runs/<agent>-<env>-s<seed>-<time>.
    init_from: a run dir or an exported SavedModel whose weights a new run starts from (tfrl.run.warm_start).
    runtime: devices, precision, XLA, strategy (tfrl.hardware.runtime.RuntimeOptions); TensorFlow's device settings
      are process-wide, so every train() of one process must ask for the same ones.
    callbacks: tfrl.run.callbacks (e.g. StopOnReturn(475)).
    model_name: the export's name under <run_dir>/saved_models/ (default <agent>-<env>).
    verbose: 0 warnings only, 1 the run's log lines on stderr (as the CLI), 2 also TensorFlow's own start-up lines.
    progress_bar: a progress bar on stderr; None: when stderr is a terminal.
    actors: step the envs in this many Ray actors (extra ray; docs/distributed.md), each with its share of
      num_envs; 0 steps them in this process. actor_mode: "sync" (every round with the learner's newest
      weights) or, for A2C and PPO, "async" (updates on the rollouts that arrived first, corrected with V-trace).
      weight_sync_period: updates between two refreshes of the actors' weights (async, DQN, SAC, TD3).
      ray_address: the Ray cluster ("auto", "host:port"); None starts a local Ray for the run (a Ray this
      program connected already is used as it is).
    Ctrl-C or SIGTERM (in the main thread) saves a checkpoint, then interrupts as it would have without tfrl:
    KeyboardInterrupt for Ctrl-C. Calling train() again the same way continues the run.
    Raises tfrl.errors.UsageError on bad input before anything is written.
    """
    arguments = _checked_arguments(locals())
    request = launch.TrainRequest(
        agent=agent, env=env, env_kwargs=dict(env_kwargs or {}), seed=seed, preset=preset, hp=dict(hp or {}),
        run_dir=arguments["run_dir"], runtime=runtime or RuntimeOptions(), vector_mode=vector_mode,
        keep_checkpoints=keep_checkpoints, export=export, model_name=model_name, new_run=new_run,
        init_from=arguments["init_from"], config_dir=arguments["config_dir"], actors=actors,
        actor_mode=actor_mode, weight_sync_period=weight_sync_period, ray_address=ray_address)
    with _logging(verbose), shutdown.StopRequest.while_training() as stop:
        prepared = launch.prepare(request)
        result = launch.execute(prepared, stop_requested=stop.requested, callbacks=callbacks,
                                progress_bar=progress_bar)
    return Run(result, prepared.env, model_name)


_TYPES = {  # argument: (accepted types, what the message calls them); bool is refused where an int is meant
    "agent": (str, "a string"), "preset": (str, "a string"), "vector_mode": (str, "a string"),
    "seed": (int, "an integer"), "keep_checkpoints": (int, "an integer"), "verbose": (int, "0, 1 or 2"),
    "hp": (Mapping, "a dict"), "env_kwargs": (Mapping, "a dict"), "runtime": (RuntimeOptions, "tfrl.RuntimeOptions"),
    "export": (bool, "True or False"), "new_run": (bool, "True or False"),
    "progress_bar": (bool, "True, False or None"), "model_name": (str, "a string"),
    "run_dir": ((str, os.PathLike), "a path"), "init_from": ((str, os.PathLike), "a path"),
    "config_dir": ((str, os.PathLike), "a path"), "actors": (int, "an integer"), "actor_mode": (str, "a string"),
    "weight_sync_period": (int, "an integer"), "ray_address": (str, "a string"),
}


def _checked_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """UsageError naming the first argument of train() of a wrong type; the paths as pathlib.Paths."""
    for name, (kinds, description) in _TYPES.items():
        value = arguments[name]
        if value is None and name not in ("agent", "seed", "keep_checkpoints", "verbose", "export", "new_run",
                                          "actors", "actor_mode", "weight_sync_period"):
            continue
        wrong_bool = isinstance(value, bool) and kinds is int
        if not isinstance(value, kinds) or wrong_bool:
            raise UsageError(f"tfrl.train: {name} must be {description}, got {value!r}")
    for name in ("hp", "env_kwargs"):
        keys = [key for key in (arguments[name] or {}) if not isinstance(key, str)]
        if keys:
            raise UsageError(f"tfrl.train: the keys of {name} must be strings, got {keys[0]!r}")
    if arguments["verbose"] not in (0, 1, 2):
        raise UsageError(f"tfrl.train: verbose must be 0, 1 or 2, got {arguments['verbose']!r}")
    if isinstance(arguments["callbacks"], (str, bytes)) or not isinstance(arguments["callbacks"], Sequence):
        raise UsageError(f"tfrl.train: callbacks must be a list of callbacks, got {arguments['callbacks']!r}")
    for callback in arguments["callbacks"]:
        if not (callable(getattr(callback, "on_log", None)) and callable(getattr(callback, "on_eval", None))):
            raise UsageError(f"tfrl.train: callback {callback!r} has no on_log and on_eval methods "
                             "(see tfrl.Callback)")
    return {name: pathlib.Path(arguments[name]) if arguments[name] is not None else None
            for name in ("run_dir", "init_from", "config_dir")}


@contextlib.contextmanager
def _logging(verbose: int):
    """The run's log lines as the CLI shows them (verbose 1), TF's start-up noise filtered unless verbose is 2."""
    if verbose < 2:
        quiet_logs.quiet()
    handler = absl_logging.get_absl_handler()
    root = std_logging.getLogger()
    attached = handler not in root.handlers and not absl_logging.get_absl_logger().handlers
    if attached:  # outside absl's app.run, absl's handler is not installed
        root.addHandler(handler)
    # absl warns that "logging before flag parsing goes to stderr": in a library call, that is where it should go.
    absl_logging._warn_preinit_stderr = False  # noqa: SLF001 - absl's switch for that one notice
    previous = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.INFO if verbose else absl_logging.WARNING)
    quiet_logs.short_prefixes()
    try:
        yield
    finally:
        absl_logging.set_verbosity(previous)
        if attached:
            root.removeHandler(handler)


class Run:
    """A training run: where it is, how it ended, and its policy."""

    def __init__(self, result: launch.RunResult, env: envs.EnvSpec, model_name: str | None = None):
        self._result = result
        self.env = env
        self._model_name = model_name
        self.run_dir: pathlib.Path | None = result.run_dir
        # result.json: the exported policy's final evaluation ("return_mean", ..., "policy": "best" or "last"), the
        # last policy's under "last" (tfrl.run.runs.result_record); a stopped run's "stopped" record
        self.result: dict = result.record
        self.saved_model: pathlib.Path | None = result.saved_model  # the exported SavedModel version dir

    @property
    def complete(self) -> bool:
        """Trained to the end (or stopped early by a callback), evaluated and exported."""
        return self.result.get("kind") in ("final_eval", "best_eval")  # the exported policy's evaluation

    def policy(self, checkpoint: int | str | None = None, best: bool = False) -> Policy:
        """A greedy policy of the run (load_policy): by default the one it exports."""
        return load_policy(self.run_dir, checkpoint=checkpoint, best=best)

    def evaluate(self, episodes: int = 100, seed: int = 0, checkpoint: int | str | None = None) -> np.ndarray:
        """Returns of `episodes` greedy episodes of the run's policy (load_policy's `checkpoint`) on its env,
        seeded seed, seed + 1, ..."""
        return evaluation.evaluate(self.policy(checkpoint), self.env, episodes, seed=seed)

    def export(self, base_path: str | pathlib.Path | None = None, model_name: str | None = None,
               checkpoint: int | str | None = None) -> pathlib.Path:
        """Exports a policy of the run (load_policy's `checkpoint`: by default the one the run exported) as the
        next version of <base_path>/<model_name> (TF Serving's layout; default <run_dir>/saved_models/ and the
        run's model name); returns the version directory."""
        base = pathlib.Path(base_path) if base_path is not None else self.run_dir / "saved_models"
        name = model_name or self._model_name or (self.saved_model.parent.name if self.saved_model else None)
        if name is None:
            record = runs.read_config(self.run_dir)
            name = f"{record.agent}-{envs.safe_name(record.env_id)}"
        return runs.export_run(self.run_dir, base, name, checkpoint=checkpoint)

    def __repr__(self) -> str:
        return f"Run({self.run_dir}, {self.result.get('kind')}, return_mean={self.result.get('return_mean')})"


class Policy(RememberingPolicy):
    """A greedy policy in NumPy: policy(obs) -> actions, for one observation or a batch.

    An observation is an array, or for Dict observations a dict {key: array} (or a batch of them: every array with
    a leading batch dimension); the env's own observations too, where tfrl converts them (Discrete and
    MultiDiscrete integers, Tuples, nested Dicts: tfrl.models.env_space). outputs(obs) gives every output of the policy's serving signature ("action", and
    "q_values" for DQN or "logits" and "value" for A2C and PPO), batched.

    For a hybrid (Dict or Tuple) action space, policy(obs) gives what the env's step takes: {key: part} (a tuple),
    from the outputs "action.<key>"; outputs(obs)["action"] has the parts side by side as float32.

    A policy with memory (lstm_units; state_size > 0) keeps one state per row of the batch: each call continues
    the episodes of the previous call's rows, and reset(done) forgets the rows whose episodes ended (reset():
    all). step(obs, state) -> (actions, next state) takes and returns the state instead, keeping none.
    """

    def __init__(self, outputs: Callable[..., Mapping[str, Any]], observations: ObsSpec, source: str,
                 metadata: Mapping[str, Any] | None = None, keep_alive: Any = None, state_size: int = 0,
                 own_space: str | Mapping[str, Any] | None = None, allow_non_finite: bool = False,
                 action_container: str | None = None):
        self._outputs = outputs
        self.action_container = action_container
        self.allow_non_finite = allow_non_finite  # NaN, Inf and numbers beyond float32 in observations: refused
        self.observations = observations
        self.source = source
        self.metadata = metadata
        # The env's own observation space (tfrl.models.env_space), from the export's metadata unless given.
        self._own_space = env_space.parse(own_space or ((metadata or {}).get("observation") or {}).get("env_space"),
                                          source)
        self._keep_alive = keep_alive  # a loaded SavedModel: its signature needs it alive
        self.memory = PolicyMemory(state_size)

    @property
    def obs_shape(self) -> tuple[int, ...]:
        """One observation's shape (() for Dict observations: `observations` has each field's)."""
        return self.observations.row_shape

    @property
    def obs_dtype(self) -> np.dtype:
        """One observation's dtype: float32, uint8 for images (a structured dtype for Dict observations)."""
        return self.observations.numpy_dtype

    def _answer(self, batch, state: np.ndarray | None) -> Mapping[str, Any]:
        return self._outputs(batch) if state is None else self._outputs(batch, state)

    def _as_batch(self, obs) -> tuple[Any, bool]:
        """(the observations as a batch the signature takes, whether one observation was given)."""
        obs = env_space.to_fields(self._own_space, obs, self.source)
        return policy_inputs.as_batch(self.observations.fields, self.observations.structured, obs, self.source,
                                      self.allow_non_finite)

    def __repr__(self) -> str:
        shape = self.obs_shape if not self.observations.structured else {f.key: f.shape for f in self.observations.fields}
        return f"Policy({self.source}, observations={shape})"


def load_policy(path: str | os.PathLike, checkpoint: int | str | None = None, best: bool = False,
                allow_non_finite: bool = False) -> Policy:
    """The greedy policy at `path`: an exported SavedModel version directory, a model directory of versions
    (the highest is taken, as TF Serving does), or a run directory. Of a run directory, by default the policy
    its export holds (its best policy if it keeps one, else its newest checkpoint's); checkpoint="best",
    "last" or a checkpoint number picks another (best=True is checkpoint="best"). The policy refuses (UsageError)
    observations holding NaN, Inf or numbers beyond float32's range unless allow_non_finite, and always action
    masks with values other than 0 and 1 or rows that allow no action."""
    if not isinstance(path, (str, os.PathLike)):
        raise UsageError(f"tfrl.load_policy: path must be a path, got {path!r}")
    if portable.is_portable(path):  # no TensorFlow needed: tfrl.load_policy routes these before importing this
        return tfrl.load_policy(path, checkpoint=checkpoint, best=best, allow_non_finite=allow_non_finite)
    path = pathlib.Path(path)
    if (path / runs.CONFIG_FILE).is_file():
        loaded = runs.load_policy(path, checkpoint, best)
        traced = serving.traced_outputs(loaded.policy, loaded.env.observations)
        source = f"{path} ({'best policy' if loaded.best else f'checkpoint {loaded.checkpoint}'})"
        return Policy(traced, loaded.env.observations, source=source, state_size=loaded.policy.state_size,
                      own_space=loaded.env.env_space, allow_non_finite=allow_non_finite,
                      action_container=loaded.policy.action_container or None)
    if checkpoint is not None or best:
        raise UsageError(f"{path} is not a run directory: checkpoint and best apply to run directories only")
    versions = export.version_numbers(path)
    if not (path / "saved_model.pb").exists() and versions:
        path = path / str(versions[-1])
    served = serving.load(path)
    return Policy(served.outputs, served.observations, source=str(path), metadata=served.metadata,
                  keep_alive=served.saved_model, state_size=served.state_size, allow_non_finite=allow_non_finite)

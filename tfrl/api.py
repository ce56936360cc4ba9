"""tfrl from Python: train an agent, then load and use its policy.

    import tfrl
    run = tfrl.train("ppo", "CartPole-v1", hp={"total_env_steps": 50_000}, run_dir="runs/ppo-cartpole", seed=0)
    print(run.result["return_mean"])              # the final greedy evaluation
    policy = tfrl.load_policy("runs/ppo-cartpole")  # or an exported SavedModel directory
    action = policy(observation)                   # one observation -> one action; a batch -> a batch

train() is what scripts/train.py runs (tfrl.launch): the same presets, checks, checkpoints and resume,
metrics, best policy and export; a run_dir that holds the same run continues it.
"""

from __future__ import annotations

import pathlib
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tfrl import envs, launch
from tfrl.errors import UsageError
from tfrl.lazy_import import LazyModule
from tfrl.runtime import RuntimeOptions

evaluation = LazyModule("tfrl.evaluation")
export = LazyModule("tfrl.export")
runs = LazyModule("tfrl.runs")
serving = LazyModule("tfrl.serving")


def train(agent: str, env: str | Callable[..., Any] | envs.EnvSpec, *, hp: Mapping[str, Any] | None = None,
          seed: int = 0, run_dir: str | pathlib.Path | None = None, preset: str = "auto",
          env_kwargs: Mapping[str, Any] | None = None, runtime: RuntimeOptions | None = None,
          callbacks: Sequence[Any] = (), vector_mode: str = "sync", keep_checkpoints: int = 3,
          export: bool = True, progress_bar: bool | None = False) -> Run:
    """Trains `agent` ("dqn", "a2c", "ppo") on `env` and returns the Run.

    env: a gymnasium id ("CartPole-v1"), "module:Id" (the module is imported first: it registers the id), or a
      function returning a gymnasium.Env (called once per env copy: vector envs, evaluation), made with
      env_kwargs.
    hp: hyperparameter overrides on top of the preset (preset: "auto" picks the one for agent and env, "none"
      uses the defaults; a name in configs/ or a JSON file's path picks that one).
    run_dir: where config, metrics, checkpoints and the export go (default runs/<agent>-<env>-s<seed>-<time>);
      one holding the same run is resumed from its newest checkpoint.
    runtime: devices, precision, XLA, strategy (tfrl.runtime.RuntimeOptions); TensorFlow's device settings
      are process-wide, so every train() of one process must ask for the same ones.
    callbacks: tfrl.callbacks (e.g. StopOnReturn(475)).
    Raises tfrl.errors.UsageError on bad input before anything is written.
    """
    request = launch.TrainRequest(
        agent=agent, env=env, env_kwargs=dict(env_kwargs or {}), seed=seed, preset=preset, hp=dict(hp or {}),
        run_dir=pathlib.Path(run_dir) if run_dir is not None else None, runtime=runtime or RuntimeOptions(),
        vector_mode=vector_mode, keep_checkpoints=keep_checkpoints, export=export)
    prepared = launch.prepare(request)
    result = launch.execute(prepared, callbacks=callbacks, progress_bar=progress_bar)
    return Run(result, prepared.env)


class Run:
    """A training run: where it is, how it ended, and its policy."""

    def __init__(self, result: launch.RunResult, env: envs.EnvSpec):
        self._result = result
        self.env = env
        self.run_dir: pathlib.Path | None = result.run_dir
        self.result: dict = result.record  # the final evaluation record ("return_mean", "return_std", ...)
        self.saved_model: pathlib.Path | None = result.saved_model  # the exported SavedModel version dir

    @property
    def complete(self) -> bool:
        """Trained to the end (or stopped early by a callback), evaluated and exported."""
        return self.result.get("kind") == "final_eval"

    def policy(self, best: bool = False, checkpoint: int | None = None) -> Policy:
        """The greedy policy of the run's newest checkpoint, of checkpoint `checkpoint`, or its best policy."""
        return load_policy(self.run_dir, checkpoint=checkpoint, best=best)

    def evaluate(self, episodes: int = 100, seed: int = 0, best: bool = False) -> np.ndarray:
        """Returns of `episodes` greedy episodes of the run's (best) policy on its env, seeded seed, seed + 1, ..."""
        return evaluation.evaluate(self.policy(best=best), self.env, episodes, seed=seed)

    def export(self, base_path: str | pathlib.Path | None = None, model_name: str | None = None,
               best: bool = False) -> pathlib.Path:
        """Exports the (best) policy as the next version of <base_path>/<model_name> (TF Serving's layout;
        default <run_dir>/saved_models/<agent>-<env>); returns the version directory."""
        record = runs.read_config(self.run_dir)
        base = pathlib.Path(base_path) if base_path is not None else self.run_dir / "saved_models"
        name = model_name or f"{record.agent}-{launch.safe_name(record.env_id)}"
        return runs.export_run(self.run_dir, base, name, best=best)

    def __repr__(self) -> str:
        return f"Run({self.run_dir}, {self.result.get('kind')}, return_mean={self.result.get('return_mean')})"


class Policy:
    """A greedy policy in NumPy: policy(obs) -> actions, for one observation or a batch.

    outputs(obs) gives every output of the policy's serving signature ("action", and "q_values" for DQN or
    "logits" and "value" for A2C and PPO), batched.
    """

    def __init__(self, outputs: Callable[[np.ndarray], Mapping[str, Any]], obs_shape: Sequence[int],
                 source: str, metadata: Mapping[str, Any] | None = None, keep_alive: Any = None,
                 obs_dtype: str = "float32"):
        self._outputs = outputs
        self.obs_shape = tuple(obs_shape)
        self.obs_dtype = np.dtype(obs_dtype)  # float32, or uint8 for images
        self.source = source
        self.metadata = metadata
        self._keep_alive = keep_alive  # a loaded SavedModel: its signature needs it alive

    def outputs(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        batch = self._as_batch(obs)
        return {name: np.asarray(value) for name, value in self._outputs(batch).items()}

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        obs = self._as_array(obs)
        actions = self.outputs(obs)["action"]
        return actions[0] if obs.shape == self.obs_shape else actions

    def _as_array(self, obs) -> np.ndarray:
        obs = np.asarray(obs)
        if self.obs_dtype == np.uint8 and obs.dtype != np.uint8:  # a float image would be silently truncated
            raise UsageError(f"{self.source} takes uint8 observations (images), got {obs.dtype}")
        return obs.astype(self.obs_dtype, copy=False)

    def _as_batch(self, obs) -> np.ndarray:
        obs = self._as_array(obs)
        if obs.shape == self.obs_shape:
            return obs[None]
        if obs.shape[1:] != self.obs_shape:
            raise UsageError(f"{self.source} takes observations of shape {self.obs_shape} (or a batch "
                             f"[N, *{self.obs_shape}]), got {obs.shape}")
        return obs

    def __repr__(self) -> str:
        return f"Policy({self.source}, obs_shape={self.obs_shape})"


def load_policy(path: str | pathlib.Path, checkpoint: int | None = None, best: bool = False) -> Policy:
    """The greedy policy at `path`: an exported SavedModel version directory, a model directory of versions
    (the highest is taken, as TF Serving does), or a run directory (its newest checkpoint, checkpoint
    `checkpoint`, or with best=True its best policy)."""
    path = pathlib.Path(path)
    if (path / runs.CONFIG_FILE).is_file():
        loaded = runs.load_policy(path, checkpoint, best)
        traced = serving.traced_outputs(loaded.policy, loaded.env.obs_shape)
        source = f"{path} ({'best policy' if best else f'checkpoint {loaded.checkpoint}'})"
        return Policy(traced, loaded.env.obs_shape, source=source, obs_dtype=loaded.env.obs_dtype)
    if checkpoint is not None or best:
        raise UsageError(f"{path} is not a run directory: checkpoint and best apply to run directories only")
    versions = export.version_numbers(path)
    if not (path / "saved_model.pb").exists() and versions:
        path = path / str(versions[-1])
    served = serving.load(path)
    return Policy(served.outputs, served.obs_shape, source=str(path), metadata=served.metadata,
                  keep_alive=served.saved_model, obs_dtype=served.obs_dtype)

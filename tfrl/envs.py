"""Gymnasium environments: id resolution, vector envs, and the autoreset bookkeeping.

Vector envs run in gymnasium's SAME_STEP autoreset mode: when a sub-env's
episode ends, `step` already returns the first observation of the next episode
and puts the true last observation in `infos["final_obs"]`. So no env step is
wasted on a reset (as in NEXT_STEP mode), and a transition's next observation
must be taken from `final_obs` for the envs that just finished (`next_obs_for_storage`).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import re
import threading
from typing import Any, Callable, Mapping

import gymnasium as gym
import numpy as np
from absl import logging
from gymnasium.vector import AutoresetMode

from tfrl import atari_preprocessing, envpool_vector, example_envs, image_envs
from tfrl.errors import RunError, UsageError

image_envs.register()
example_envs.register()


class EnvIdError(UsageError):
    """Unknown or unsupported environment id."""


# Ids that gymnasium 1.x deprecated, mapped to the version with the same dynamics we train on.
_ALIASES = {
    "LunarLander-v2": "LunarLander-v3",
    "LunarLanderContinuous-v2": "LunarLanderContinuous-v3",
}
# Packages that register ids in gymnasium: (how to recognize their ids, module, how it registers, what to install).
_PLUGINS = (
    (atari_preprocessing.is_atari, "ale_py", gym.register_envs,  # registers when imported
     "pip install 'tfrl[atari]' (ale-py, with the Atari ROMs)"),
    (lambda env_id: env_id.startswith("MinAtar/"), "minatar.gym", lambda module: module.register_envs(),
     "pip install minatar"),
)
_warned_aliases: set[str] = set()
_warn_lock = threading.Lock()

VECTOR_MODES = ("sync", "async", "envpool")


def resolve_env_id(env_id: str) -> str:
    """The id gymnasium.make takes for `env_id`; EnvIdError for an unknown one.

    Deprecated ids map to their gymnasium 1.x successor (warning once). "module:Id" imports the module first,
    which registers the id (gymnasium's own form), and stays "module:Id" so that every process that makes the
    env imports it. Ids of known plugins (ALE/..., MinAtar/...) import their package, or name what to install.
    """
    target = _ALIASES.get(env_id, env_id)
    if target != env_id:
        with _warn_lock:
            if env_id not in _warned_aliases:
                _warned_aliases.add(env_id)
                logging.warning("%s is deprecated in gymnasium %s; using %s", env_id, gym.__version__, target)
    module, _, name = target.rpartition(":")
    if module:
        _import_registering_module(module, env_id)
    if name not in gym.registry:
        _import_plugin(name)
    if name not in gym.registry:
        close = difflib.get_close_matches(name, list(gym.registry), n=5, cutoff=0.5)
        hint = f"; close matches: {', '.join(close)}" if close else ""
        where = f" (module {module} registers no such id)" if module else ""
        raise EnvIdError(f"unknown environment id {env_id!r}{where}{hint}")
    return target


def _import_registering_module(module: str, env_id: str) -> None:
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise EnvIdError(f"--env={env_id}: cannot import module {module!r} ({e})") from None


def _import_plugin(env_id: str) -> None:
    for matches, module, register, install in _PLUGINS:
        if matches(env_id):
            try:
                register(importlib.import_module(module))
            except ImportError:
                raise EnvIdError(f"{env_id} is registered by the {module} package, which is not installed: "
                                 f"{install}") from None


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What to train or evaluate on: a gymnasium id (already resolved), or a factory returning a gymnasium.Env,
    made with `kwargs`. A factory is called once per copy (vector envs, evaluation, video)."""

    id: str | None = None
    factory: Callable[..., gym.Env] | None = None
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        """The id, or "<module>.<function>" of a factory: what logs, records and exports call the env."""
        if self.id is not None:
            return self.id
        return f"{getattr(self.factory, '__module__', '?')}.{getattr(self.factory, '__qualname__', repr(self.factory))}"

    @property
    def atari(self) -> bool:
        return self.id is not None and atari_preprocessing.is_atari(self.id)

    def make(self, training: bool = False, **options) -> gym.Env:
        """One env with its observations as tfrl's networks take them (observation_adapter), and episode statistics
        (RecordEpisodeStatistics) of the game's own score. Atari ids get the standard preprocessing
        (tfrl.atari_preprocessing); `training` adds its training-only parts (life loss, reward clipping)."""
        if self.atari:
            return atari_preprocessing.make(self.id, training, options, self.kwargs)
        if self.id is not None:
            env = gym.make(self.id, disable_env_checker=True, **options, **self.kwargs)
        else:
            env = self.factory(**options, **self.kwargs)
            if not isinstance(env, gym.Env):
                raise EnvIdError(f"the env factory {self.name} returned {type(env).__name__}, not a gymnasium.Env")
        adapter = observation_adapter(env.observation_space, self.name)
        return gym.wrappers.RecordEpisodeStatistics(env if adapter is None else adapter(env))


def as_spec(env: EnvSpec | str | Callable[..., gym.Env], kwargs: Mapping[str, Any] | None = None) -> EnvSpec:
    """An EnvSpec from an id ("CartPole-v1", "my_pkg.envs:MyEnv-v0"), a factory, or an EnvSpec."""
    if isinstance(env, EnvSpec):
        return env if kwargs is None else dataclasses.replace(env, kwargs=dict(kwargs))
    if isinstance(env, str):
        return EnvSpec(id=resolve_env_id(env), kwargs=dict(kwargs or {}))
    if callable(env):
        return EnvSpec(factory=env, kwargs=dict(kwargs or {}))
    raise EnvIdError(f"env must be a gymnasium id or a function returning a gymnasium.Env, got {env!r}")


def check_render_mode(kwargs: Mapping[str, Any]) -> None:
    """UsageError for a render_mode that draws on a screen: every env copy would open a window (or crash the
    process on a machine without a display); tfrl renders rgb_array frames itself (tfrl evaluate --video)."""
    render_mode = dict(kwargs).get("render_mode")
    if render_mode not in (None, "rgb_array"):
        raise UsageError(f"--env_kwargs: render_mode={render_mode!r} would open a window in every env (and crash "
                         "without a display); leave it out, and record a video with tfrl evaluate --video")


class EnvStepError(RunError):
    """The env raised an error in a step (a wrong observation, a bug in the env): training stops, exit code 1."""

    def __init__(self, reason: str, env_step: int, last_checkpoint: tuple[int, int] | None = None):
        self.reason, self.env_step = reason, env_step
        kept = ("no checkpoint had been written" if last_checkpoint is None
                else f"checkpoint {last_checkpoint[1]} (env step {last_checkpoint[0]}) is the newest")
        super().__init__(f"the env failed at env step {env_step} ({reason}); training stopped: {kept}")

    def at(self, last_checkpoint: tuple[int, int] | None) -> EnvStepError:
        """The same error, naming the newest checkpoint."""
        return EnvStepError(self.reason, self.env_step, last_checkpoint)


def readable_name(spec: EnvSpec) -> str:
    """The env's part of default run dir and model names, usable as part of a directory name: the id
    ("ALE/Pong-v5" -> "ALE-Pong-v5"); for a factory its function's name ("make_maze"), or for a lambda the id or
    class of the env it makes ("CartPole-v1", "MazeEnv")."""
    if spec.id is not None:
        return safe_name(spec.id)
    qualname = getattr(spec.factory, "__qualname__", "")
    if qualname and "<" not in qualname:
        return safe_name(qualname.rsplit(".", 1)[-1])
    env = spec.factory(**spec.kwargs)
    try:
        return safe_name(env.spec.id if env.spec is not None else type(env.unwrapped).__name__)
    finally:
        env.close()


def safe_name(name: str) -> str:
    """A name usable as one directory name: "ALE/Pong-v5" -> "ALE-Pong-v5", "pkg.envs:Maze-v0" -> "pkg.envs-Maze-v0"."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "env"


def observation_adapter(space: gym.Space, env_name: str):
    """The gymnasium wrapper class that turns `space` into what tfrl's networks take, None if it needs none.

    Box observations of any shape are taken as they are (the networks flatten them, or convolve uint8
    images). Boolean Box ones (MinAtar's grids) become uint8 images of 0 and 255. Discrete, MultiDiscrete
    and MultiBinary ones become float vectors (one-hot for Discrete) through FlattenObservation. Dict and
    Tuple spaces are refused: which parts matter and how is the env author's call.
    """
    if isinstance(space, gym.spaces.Box) and space.dtype == np.bool_:
        return _bool_to_uint8
    if isinstance(space, gym.spaces.Box):
        return None
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        return gym.wrappers.FlattenObservation
    raise EnvIdError(f"{env_name} has observation space {space}; tfrl takes Box, Discrete, MultiDiscrete and "
                     "MultiBinary observations: wrap the env in gymnasium.wrappers.FlattenObservation (or pick "
                     "the parts you need) to train on it")


def _bool_to_uint8(env: gym.Env) -> gym.Env:
    space = gym.spaces.Box(0, 255, env.observation_space.shape, np.uint8)
    return gym.wrappers.TransformObservation(env, lambda obs: np.asarray(obs, np.uint8) * np.uint8(255), space)


def observation_dtype(space: gym.Space) -> np.dtype:
    """How observations are stored and fed to the networks: uint8 Boxes (images) as uint8, 4x smaller than
    float32 (the networks scale them to [0, 1]); everything else as float32."""
    return np.dtype(np.uint8) if space.dtype == np.uint8 else np.dtype(np.float32)


@dataclasses.dataclass(frozen=True)
class EnvInfo:
    """What an agent's networks are built for: the observation shape and the action space."""

    env_id: str
    obs_shape: tuple[int, ...]
    num_actions: int  # Discrete actions: how many; Box actions: 0
    action_shape: tuple[int, ...] = ()  # Box actions: the shape of one action
    action_low: tuple[float, ...] = ()  # Box actions: the bounds, flattened
    action_high: tuple[float, ...] = ()
    obs_dtype: str = "float32"  # "uint8" for images (observation_dtype)
    frame_stack: int = 0  # observations stack this many frames in their last axis (Atari: 4); 0 if not

    @property
    def continuous(self) -> bool:
        return self.num_actions == 0

    @property
    def action_size(self) -> int:
        """Outputs a policy needs per action: the number of actions, or the Box's size."""
        return self.num_actions or int(np.prod(self.action_shape))

    def to_dict(self):
        record = {"env_id": self.env_id, "obs_shape": list(self.obs_shape), "num_actions": self.num_actions}
        if self.obs_dtype != "float32":
            record["obs_dtype"] = self.obs_dtype
        if self.frame_stack:
            record["frame_stack"] = self.frame_stack
        if self.continuous:
            record.update(action_shape=list(self.action_shape), action_low=list(self.action_low),
                          action_high=list(self.action_high))
        return record

    @classmethod
    def from_dict(cls, record: Mapping[str, Any], env_id: str | None = None) -> EnvInfo:
        return cls(env_id or record["env_id"], tuple(record["obs_shape"]), int(record["num_actions"]),
                   tuple(record.get("action_shape", ())), tuple(record.get("action_low", ())),
                   tuple(record.get("action_high", ())), record.get("obs_dtype", "float32"),
                   int(record.get("frame_stack", 0)))


def make_vector_env(env: EnvSpec | str, num_envs: int, seed: int, vector_mode: str = "sync",
                    training: bool = False) -> gym.vector.VectorEnv:
    """`num_envs` copies of `env` in SAME_STEP autoreset mode, each with episode statistics, seeded seed..seed+n-1.
    `training`: the copies a run trains on (EnvSpec.make), not the ones it evaluates on.

    Returns the env already reset, with its first observations in `env.first_obs` (in `env.obs_dtype`).
    """
    spec = as_spec(env)
    if vector_mode not in VECTOR_MODES:
        raise UsageError(f"--vector_mode: unknown mode {vector_mode!r}; choose one of {', '.join(VECTOR_MODES)}")
    if num_envs < 1:
        raise UsageError(f"num_envs must be >= 1, got {num_envs}")

    def one_env():
        return spec.make(training=training)

    env_fns = [one_env] * num_envs
    vector_kwargs = {"autoreset_mode": AutoresetMode.SAME_STEP, "copy": False}  # copy=False: the loop copies
    if vector_mode == "envpool":
        envpool_vector.check(spec.id, spec.kwargs, spec.atari)
        vector_env = envpool_vector.EnvPoolVectorEnv(spec.id, num_envs)
    elif vector_mode == "sync":
        vector_env = gym.vector.SyncVectorEnv(env_fns, **vector_kwargs)
    else:
        vector_env = gym.vector.AsyncVectorEnv(env_fns, **vector_kwargs)
    vector_env.obs_dtype = observation_dtype(vector_env.single_observation_space)
    vector_env.frame_stack = atari_preprocessing.frame_stack(spec.kwargs) if spec.atari else 0
    try:
        env_info(vector_env, spec.name)  # the action space is one tfrl can act in
    except EnvIdError:
        vector_env.close()
        raise
    obs, _ = vector_env.reset(seed=seed)
    vector_env.first_obs = np.array(obs, dtype=vector_env.obs_dtype)
    return vector_env


def reset_for_resume(env: gym.vector.VectorEnv, seed: int, env_step: int) -> np.ndarray:
    """Fresh episodes for a run resumed at `env_step`: the episodes in flight at the checkpoint are lost.

    Seeded from (seed, env_step), so a resume is reproducible and differs from the run's first reset.
    """
    obs, _ = env.reset(seed=int(np.random.SeedSequence([seed, env_step]).generate_state(1)[0]))
    return np.array(obs, dtype=env.obs_dtype)


def env_info(env: gym.vector.VectorEnv, env_id: str) -> EnvInfo:
    """The env's EnvInfo; EnvIdError for an action space tfrl cannot act in."""
    space, obs_shape = env.single_action_space, tuple(env.single_observation_space.shape)
    observations = {"obs_dtype": env.obs_dtype.name, "frame_stack": env.frame_stack}
    if isinstance(space, gym.spaces.Discrete):
        return EnvInfo(env_id=env_id, obs_shape=obs_shape, num_actions=int(space.n), **observations)
    if isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating):
        low, high = np.asarray(space.low, np.float64).ravel(), np.asarray(space.high, np.float64).ravel()
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise EnvIdError(f"{env_id} has Box actions with infinite bounds ({space}): tfrl clips actions to the "
                             "bounds; give the env finite ones (gymnasium.wrappers.ClipAction or RescaleAction)")
        with np.errstate(over="ignore"):  # the overflow is the error below
            span = np.asarray(space.high, np.float32) - np.asarray(space.low, np.float32)
        if not np.isfinite(span).all():  # actions are rescaled from [-1, 1] by this span: every one would be inf
            raise EnvIdError(f"{env_id} has Box action bounds whose span (high - low) overflows float32 ({space}): "
                             "tfrl rescales actions to the bounds; wrap the env in gymnasium.wrappers.RescaleAction "
                             "(e.g. to [-1, 1])")
        return EnvInfo(env_id=env_id, obs_shape=obs_shape, num_actions=0, action_shape=tuple(space.shape),
                       action_low=tuple(low.tolist()), action_high=tuple(high.tolist()), **observations)
    raise EnvIdError(f"{env_id} has action space {space}; tfrl agents act in Discrete or (float) Box spaces")


def next_obs_for_storage(next_obs: np.ndarray, done: np.ndarray, infos: dict) -> np.ndarray:
    """The observation each transition ends in: `next_obs`, except the true final obs where an episode ended.

    In SAME_STEP mode `next_obs[i]` of a finished env is already the next episode's reset observation.
    """
    stored = np.array(next_obs)  # a copy: the vector env reuses its buffer (copy=False)
    if done.any():
        final_obs = infos["final_obs"]
        for i in np.flatnonzero(done):
            stored[i] = final_obs[i]
    return stored


def finished_episodes(done: np.ndarray, infos: dict) -> list[tuple[float, int]]:
    """(return, length) of each episode that ended at this vector step, from RecordEpisodeStatistics.

    An env can be done without an episode to report: Atari training ends an "episode" at each lost life, while
    the game's score and length are recorded when the game ends."""
    if not done.any():
        return []
    final_info = infos["final_info"]
    if "episode" not in final_info:
        return []
    episode, recorded = final_info["episode"], final_info.get("_episode", done)
    return [(float(episode["r"][i]), int(episode["l"][i])) for i in np.flatnonzero(done & recorded)]


@dataclasses.dataclass(frozen=True)
class VectorStep:
    """One step of a vector env: what was acted on, and what came back."""

    obs: np.ndarray  # s_t [N, *obs_shape] (float32, or uint8 images), the observations the actions were chosen on
    action: np.ndarray  # a_t [N]
    reward: np.ndarray  # r_t [N]
    terminated: np.ndarray  # [N] bool: the episode reached a terminal state
    truncated: np.ndarray  # [N] bool: the episode was cut (time limit)
    next_obs: np.ndarray  # the env's output: already the next episode's first obs where one ended (SAME_STEP)
    infos: dict

    @property
    def done(self) -> np.ndarray:
        return self.terminated | self.truncated

    def final_obs(self) -> np.ndarray:
        """s_{t+1} [N, ...]: next_obs, with the true last obs where an episode ended (next_obs_for_storage)."""
        return next_obs_for_storage(self.next_obs, self.done, self.infos)


class VectorStepper:
    """A vector env and where the run is in it: its current observations and the env step count.

    `on_episode(env_step, return, length)` hears of every episode that ends.
    """

    def __init__(self, env: gym.vector.VectorEnv, on_episode: Callable[[int, float, int], None]):
        self.env = env
        self.num_envs = env.num_envs
        self.obs = env.first_obs  # [N, *obs_shape] in env.obs_dtype
        self.env_step = 0  # transitions so far, summed over the envs
        self._on_episode = on_episode

    def step(self, action: np.ndarray) -> VectorStep:
        try:
            next_obs, reward, terminated, truncated, infos = self.env.step(action)
        except Exception as e:  # noqa: BLE001 - the env's own code, or gymnasium refusing what it returned
            message = (str(e).splitlines() or [""])[0]
            raise EnvStepError(f"{type(e).__name__}: {message}", self.env_step) from e
        self.env_step += self.num_envs
        step = VectorStep(self.obs, action, reward, terminated, truncated, next_obs, infos)
        for episode_return, length in finished_episodes(step.done, infos):
            self._on_episode(self.env_step, episode_return, length)
        self.obs = np.array(next_obs, dtype=self.env.obs_dtype)  # a copy: the vector env reuses its buffer
        return step

    def resume_at(self, seed: int, env_step: int) -> None:
        """Continue a restored run at `env_step` on fresh episodes (reset_for_resume)."""
        self.env_step = env_step
        self.obs = reset_for_resume(self.env, seed, env_step)

"""The envs wing: gymnasium environments made as tfrl trains on them.

This package's face: id resolution, making envs with their observations as tfrl takes them
(tfrl.envs.observations), and vector envs in gymnasium's SAME_STEP autoreset mode (stepped by tfrl.envs.stepping);
EnvInfo (tfrl.envs.env_info) and the stepping names are the wing's names here too. Its modules: env_info (what
an env is to an agent), observations (and their JSON description), stepping, the built-in example/image/partial
envs, Atari preprocessing and EnvPool's vector envs. May import tfrl's top-level vocabulary and
tfrl.models.policy_inputs (names without gymnasium); never an agent, a run or TensorFlow.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import re
import sys
import threading
from typing import Any, Callable, Mapping

import gymnasium as gym
import numpy as np
from absl import logging
from gymnasium.vector import AutoresetMode

from tfrl.envs import atari_preprocessing, envpool_vector, example_envs, image_envs, partial_envs
from tfrl.envs.env_info import MASK_DTYPES, EnvIdError, EnvInfo, env_info  # noqa: F401 - the wing's names (docstring)
from tfrl.envs.observations import (CheckedDictKeys, MaskedObservation, StructuredObservation, env_space_json,
                                    masked_space, observation_spec, stored_as_given, to_batch)
from tfrl.envs.stepping import (EnvStepError, VectorStep, VectorStepper, finished_episodes,  # noqa: F401
                                next_obs_for_storage, reset_for_resume)
from tfrl.errors import UsageError
from tfrl.models.policy_inputs import MASK_KEY

image_envs.register()
example_envs.register()
partial_envs.register()


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
_mujoco_messages: set[str] = set()

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
        (tfrl.envs.atari_preprocessing); `training` adds its training-only parts (life loss, reward clipping)."""
        if self.atari:
            return atari_preprocessing.make(self.id, training, options, self.kwargs)
        _log_mujoco_warnings(self.id)
        if self.id is not None:
            env = gym.make(self.id, disable_env_checker=True, **options, **self.kwargs)
        else:
            env = self.factory(**options, **self.kwargs)
            if not isinstance(env, gym.Env):
                raise EnvIdError(f"the env factory {self.name} returned {type(env).__name__}, not a gymnasium.Env")
            if env.render_mode in SCREEN_RENDER_MODES and "render_mode" not in options:
                env.close()  # before its first reset draws on a screen (which aborts the process without a display)
                raise EnvIdError(f"the env factory {self.name} makes envs with render_mode={env.render_mode!r}, "
                                 "which would open a window in every env (and crash without a display); make them "
                                 "without it, and record a video with tfrl evaluate --video")
        made = gym.wrappers.RecordEpisodeStatistics(adapted(env, self.name))
        made.tfrl_own_env = env  # the env before tfrl's adapters: make_vector_env describes its space once
        return made


def _log_mujoco_warnings(env_id: str | None) -> None:
    """Before a MuJoCo env is made (a gymnasium id whose entry point is MuJoCo's, or any env once mujoco is
    imported): MuJoCo's warnings logged once per message (a deprecated attribute in gymnasium's model files at
    debug level: the user can do nothing about it), instead of MuJoCo's default, which prints each one and
    appends it to MUJOCO_LOG.TXT in the working
    directory. A handler the user set stays."""
    if "mujoco" not in sys.modules:
        if env_id is None:
            return
        try:
            entry_point = gym.spec(env_id).entry_point
        except gym.error.Error:
            return
        if not (isinstance(entry_point, str) and "mujoco" in entry_point):
            return
        try:
            importlib.import_module("mujoco")
        except ImportError:  # gym.make says what to install
            return
    mujoco = sys.modules["mujoco"]
    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(_log_mujoco_warning)


def _log_mujoco_warning(message: str) -> None:
    with _warn_lock:
        if message in _mujoco_messages:
            return
        _mujoco_messages.add(message)
    if "deprecated" in message:  # of gymnasium's own model files (HalfCheetah's 'settotalmass'): nothing to do
        logging.debug("MuJoCo: %s", message)
    else:
        logging.warning("MuJoCo: %s", message)


def as_spec(env: EnvSpec | str | Callable[..., gym.Env], kwargs: Mapping[str, Any] | None = None) -> EnvSpec:
    """An EnvSpec from an id ("CartPole-v1", "my_pkg.envs:MyEnv-v0"), a factory, or an EnvSpec."""
    if isinstance(env, EnvSpec):
        return env if kwargs is None else dataclasses.replace(env, kwargs=dict(kwargs))
    if isinstance(env, str):
        return EnvSpec(id=resolve_env_id(env), kwargs=dict(kwargs or {}))
    if callable(env):
        return EnvSpec(factory=env, kwargs=dict(kwargs or {}))
    raise EnvIdError(f"env must be a gymnasium id or a function returning a gymnasium.Env, got {env!r}")


SCREEN_RENDER_MODES = ("human",)  # gymnasium's mode that opens a window; "ansi", "rgb_array" and the rest do not


def check_render_mode(kwargs: Mapping[str, Any]) -> None:
    """UsageError for a render_mode that draws on a screen: every env copy would open a window (or crash the
    process on a machine without a display); tfrl renders rgb_array frames itself (tfrl evaluate --video)."""
    render_mode = dict(kwargs).get("render_mode")
    if render_mode in SCREEN_RENDER_MODES:
        raise UsageError(f"--env_kwargs: render_mode={render_mode!r} would open a window in every env (and crash "
                         "without a display); leave it out, and record a video with tfrl evaluate --video")


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


def adapted(env: gym.Env, env_name: str) -> gym.Env:
    """`env` with its observations as tfrl takes them (tfrl.envs.observations): an env with an action_masks() method
    and no action_mask entry gets its mask as one (MaskedObservation); Dict and Tuple observations become a flat
    Dict of converted entries (StructuredObservation); the others go through observation_adapter."""
    space = env.observation_space
    if _mask_from_method(env):
        env, space = _masked(env, env_name), None
    if space is not None and stored_as_given(space):
        return CheckedDictKeys(env)
    if space is None or isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        try:
            return StructuredObservation(env)
        except ValueError as e:
            raise EnvIdError(f"{env_name}: {e}") from None
    adapter = observation_adapter(space, env_name)
    return env if adapter is None else adapter(env)


def _mask_from_method(env: gym.Env) -> bool:
    """The env has an action_masks() method and no action_mask entry: MaskedObservation adds its mask."""
    space = env.observation_space
    return _has_method(env, "action_masks") and not (isinstance(space, gym.spaces.Dict) and MASK_KEY in space.spaces)


def _env_space(made: gym.Env) -> str:
    """env_space_json of the observations of the env under EnvSpec.make's adapters ("" for an env made otherwise:
    Atari's). An env whose mask comes from its action_masks() has a policy that takes {"observation": the env's
    own observation, "action_mask": the mask}: that Dict is described."""
    own = getattr(made, "tfrl_own_env", None)
    if own is None:
        return ""
    space = own.observation_space
    if _mask_from_method(own):
        space = masked_space(space, gym.spaces.flatdim(own.action_space))
    return env_space_json(space)


def _own_mask_dtype(made: gym.Env) -> str:
    """The dtype of the env's own action_mask entry (a Box or MultiBinary), "uint8" where it has none of its own
    (an action_masks() method) or it is not a number or bool type a signature can take."""
    own = getattr(made, "tfrl_own_env", None)
    space = getattr(own, "observation_space", None)
    entry = space.spaces.get(MASK_KEY) if isinstance(space, gym.spaces.Dict) else None
    dtype = getattr(entry, "dtype", None)
    return np.dtype(dtype).name if dtype is not None and np.dtype(dtype).name in MASK_DTYPES else "uint8"


def _has_method(env: gym.Env, name: str) -> bool:
    try:
        return callable(env.get_wrapper_attr(name))
    except AttributeError:
        return False


def _masked(env: gym.Env, env_name: str) -> gym.Env:
    actions = env.action_space
    if not isinstance(actions, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        raise EnvIdError(f"{env_name} has an action_masks() method but {actions} actions: masks choose among "
                         "Discrete (or MultiDiscrete) actions")
    return MaskedObservation(env, gym.spaces.flatdim(actions))


def observation_adapter(space: gym.Space, env_name: str):
    """The gymnasium wrapper class that turns a non-Dict `space` into what tfrl's networks take, None if it needs
    none.

    Box observations of any shape are taken as they are (the networks flatten them, or convolve uint8
    images). Boolean Box ones (MinAtar's grids) become uint8 images of 0 and 255. Discrete, MultiDiscrete
    and MultiBinary ones become float vectors (one-hot for Discrete) through FlattenObservation.
    """
    if isinstance(space, gym.spaces.Box) and space.dtype == np.bool_:
        return _bool_to_uint8
    if isinstance(space, gym.spaces.Box):
        return None
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        return gym.wrappers.FlattenObservation
    raise EnvIdError(f"{env_name} has observation space {space}; tfrl takes Box, Discrete, MultiDiscrete, "
                     "MultiBinary, Dict and Tuple observations")


def _bool_to_uint8(env: gym.Env) -> gym.Env:
    space = gym.spaces.Box(0, 255, env.observation_space.shape, np.uint8)
    return gym.wrappers.TransformObservation(env, lambda obs: np.asarray(obs, np.uint8) * np.uint8(255), space)


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
    vector_env.obs_spec = observation_spec(vector_env.single_observation_space)
    vector_env.obs_dtype = vector_env.obs_spec.numpy_dtype
    vector_env.frame_stack = atari_preprocessing.frame_stack(spec.kwargs) if spec.atari else 0
    # The env's own space, for the policy objects of its exports (a sync env's copies are here to ask).
    vector_env.env_space = _env_space(vector_env.envs[0]) if vector_mode == "sync" else ""
    vector_env.mask_dtype = _own_mask_dtype(vector_env.envs[0]) if vector_mode == "sync" else "uint8"
    try:
        vector_env.action_nvec = env_info(vector_env, spec.name).mask_groups  # spaces tfrl can train on
    except EnvIdError:
        vector_env.close()
        raise
    obs, _ = vector_env.reset(seed=seed)
    vector_env.first_obs = to_batch(vector_env.obs_spec, obs)
    return vector_env

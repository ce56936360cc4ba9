"""Hyperparameter presets: tuned settings for an (agent, env) pair, shipped in this package as JSON files.

    {"agent": "dqn", "env_ids": ["LunarLander-v2", "LunarLander-v3"],
     "description": "...", "hparams": {"learning_rate": 6.3e-4, ...}, "runtime": {"xla": true}}

"runtime" sets defaults of runtime flags a user leaves unset: "xla", and "cpu_bfloat16" (mixed_bfloat16 when the
train step runs on a CPU with bfloat16 instructions).

The built-in presets are this package's data (found through importlib.resources, so an installed wheel has
them). A user's folder of presets (`--config_dir`, `tfrl.train(config_dir=...)`) is searched first: a file
there with a built-in's name takes its place. "auto" picks, among the presets for the agent that list the env,
the one with the shortest name ("dqn-lunarlander" over "dqn-lunarlander-sb3zoo", a benchmark replica), a
user's before a built-in.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.resources
import pathlib
from typing import Any, Iterable, Mapping, Sequence

from absl import logging

from tfrl import strict_json
from tfrl.config import ConfigError


class PresetError(ConfigError):
    """An unknown preset name, or a broken preset file."""


@dataclasses.dataclass(frozen=True)
class Preset:
    name: str  # file stem, e.g. "dqn-lunarlander"
    agent: str
    env_ids: tuple[str, ...]
    description: str
    hparams: Mapping[str, Any]
    runtime: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # {"xla": bool, "cpu_bfloat16": bool}
    source: str = ""  # where it was read from


_KEYS = {"agent", "env_ids", "description", "hparams"}
# Runtime defaults a preset may choose (a flag given by the user wins): xla turns XLA on; cpu_bfloat16 picks
# mixed_bfloat16 when the train step runs on a CPU with bfloat16 instructions (tfrl.run.launch).
_RUNTIME_KEYS = {"xla", "cpu_bfloat16"}


def builtin_dir():
    """The folder of built-in presets (an importlib.resources Traversable: a path in any normal install)."""
    return importlib.resources.files(__name__)


def search_dirs(user_dir: pathlib.Path | None = None) -> list:
    """The folders searched for presets, first match wins: the user's, then the built-in one."""
    return ([pathlib.Path(user_dir)] if user_dir is not None else []) + [builtin_dir()]


def parse(text: str, name: str, source: str) -> Preset:
    """The preset of a JSON text; PresetError naming `source` if it is not one."""
    raw = strict_json.loads(text, f"preset {source}", error=PresetError)
    if not isinstance(raw, dict) or set(raw) - {"runtime"} != _KEYS:
        raise PresetError(f"preset {source}: expected the keys {sorted(_KEYS)} and optionally \"runtime\"")
    runtime = raw.get("runtime", {})
    if not (isinstance(runtime, dict) and set(runtime) <= _RUNTIME_KEYS
            and all(isinstance(value, bool) for value in runtime.values())):
        raise PresetError(f"preset {source}: runtime must be an object of {sorted(_RUNTIME_KEYS)} set to true or false")
    if not (isinstance(raw["agent"], str) and isinstance(raw["env_ids"], list) and isinstance(raw["hparams"], dict)
            and all(isinstance(env_id, str) for env_id in raw["env_ids"])):
        raise PresetError(f"preset {source}: agent must be a string, env_ids a list of strings, hparams an object")
    return Preset(name=name, agent=raw["agent"], env_ids=tuple(raw["env_ids"]), description=str(raw["description"]),
                  hparams=raw["hparams"], runtime=runtime, source=source)


def load_file(path) -> Preset:
    """The preset in a JSON file (a path, or a Traversable of the built-in folder)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise PresetError(f"preset {path}: cannot read it ({type(e).__name__}: {e})") from None
    return parse(text, pathlib.PurePath(path.name).stem, str(path))


def available(dirs: Sequence) -> list[Preset]:
    """Every preset in `dirs`, one per name (the first folder's wins); files that are not presets are passed over."""
    found: dict[str, Preset] = {}
    for directory in dirs:
        for path in sorted(_json_files(directory), key=lambda p: p.name):
            name = pathlib.PurePath(path.name).stem
            if name in found:
                continue
            try:
                found[name] = load_file(path)
            except PresetError as e:
                logging.debug("not a preset: %s", e)
    return list(found.values())


def _json_files(directory) -> Iterable:
    if not directory.is_dir():
        return []
    return [path for path in directory.iterdir() if path.name.endswith(".json") and path.is_file()]


def find(agent: str, env_ids: str | Sequence[str], name: str = "auto", dirs: Sequence | None = None) -> Preset | None:
    """The preset `name` names, or with name="auto" the one for agent and env; None for "none" (or no match).

    name: "auto", "none", a preset's name (a file stem in `dirs`), or the path of a preset file.
    env_ids: the env as given and as resolved, so "LunarLander-v2" and "LunarLander-v3" both find a preset
    listing both. dirs: the folders to search (default: the built-in one; see search_dirs).
    """
    if name == "none":
        return None
    dirs = list(dirs) if dirs is not None else search_dirs()
    env_ids = [env_ids] if isinstance(env_ids, str) else list(env_ids)
    if name == "auto":
        matches = [p for p in available(dirs) if p.agent == agent and set(env_ids) & set(p.env_ids)]
        # Several presets may list an env (a benchmark replica, a longer variant): the shortest name is the default.
        return min(matches, key=lambda p: len(p.name), default=None)
    if name.endswith(".json") or pathlib.Path(name).is_file():
        preset = load_file(pathlib.Path(name))
    else:
        preset = _named(dirs, name)
    if preset.agent != agent:
        raise PresetError(f"--preset={name} is for agent {preset.agent!r}, not {agent!r}")
    return preset


def _named(dirs: Sequence, name: str) -> Preset:
    for directory in dirs:
        path = directory / f"{name}.json"
        if path.is_file():
            return load_file(path)
    names = [p.name for p in available(dirs)]
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else f"available: {', '.join(names) or 'none'}"
    builtin = str(builtin_dir())
    where = " or ".join("the built-in presets" if str(d) == builtin else str(d) for d in dirs)
    raise PresetError(f"--preset: no preset named {name!r} in {where}; {hint}")

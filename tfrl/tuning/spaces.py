"""Search spaces: which hyperparameters `tfrl tune` samples, written as data (each agent's own is its
AgentSpec.search_space).

A space maps a hyperparameter (a field of the agent's config dataclass) to how it is sampled:

    {"type": "float", "low": 1e-5, "high": 1e-2, "log": true}          optuna's suggest_float
    {"type": "int", "low": 1, "high": 8, "step": 1, "log": false}      suggest_int ("step" and "log" optional)
    {"type": "categorical", "choices": [0.95, 0.99, 0.999]}           suggest_categorical

Choices are JSON scalars; a tuple field takes a string, as --hp does ("hidden_sizes": "64,64"). A --space file
has the same form and is laid over the built-in space of the agent: its entries replace or add, an entry set to
null drops one. A hyperparameter fixed with --hp is not sampled. Every name and bound is checked against the
agent's config (an unknown name gets the close matches) before anything runs; combinations the config refuses
(say PPO's batch_size not dividing num_envs * rollout_length) are found per trial, which then ends pruned.

The built-in spaces follow rl-baselines3-zoo's samplers (rl_zoo3/hyperparams_opt.py), narrowed where the zoo's
bounds cost hours (DQN's, SAC's and TD3's gradient steps per env step stay at most 8); run length, num_envs and the
evaluation cadence are not sampled: fix them with --hp.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

from tfrl import config as config_lib, strict_json
from tfrl.errors import UsageError

# Entries the agents' spaces share (each agent's space is its AgentSpec.search_space, in its package).
GAMMAS = {"type": "categorical", "choices": [0.95, 0.98, 0.99, 0.995, 0.999]}
LOG_LEARNING_RATE = {"type": "float", "low": 1e-5, "high": 3e-3, "log": True}

_KEYS = {"float": {"low", "high", "log", "step"}, "int": {"low", "high", "log", "step"}, "categorical": {"choices"}}


def builtin(agent: str) -> dict[str, dict[str, Any]]:
    """The agent's built-in space, its AgentSpec.search_space (empty for an agent without one)."""
    from tfrl import agents

    return json.loads(json.dumps(dict(agents.get(agent).spec.search_space)))  # a deep copy


def read_file(path: str) -> dict[str, Any]:
    """The entries of a --space JSON file: {name: an entry or null}; UsageError if it is no such object."""
    try:
        with open(path) as file:
            text = file.read()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--space: cannot read {path} ({type(e).__name__}: {e})") from None
    raw = strict_json.loads(text, f"--space {path}")
    if not isinstance(raw, dict):
        raise UsageError(f"--space {path}: expected an object of hyperparameter -> entry (or null)")
    return raw


def resolve(agent: str, config_cls: type, overlay: Mapping[str, Any] | None, fixed: Mapping[str, Any],
            source: str = "--space") -> dict[str, dict[str, Any]]:
    """The space a study samples: the built-in one with `overlay` laid over it, less the names `fixed` holds,
    every entry checked against config_cls. UsageError on the first bad entry, or if nothing is left to sample."""
    space = builtin(agent)
    for name, entry in (overlay or {}).items():
        if entry is None:
            space.pop(config_lib.field_name(config_cls, name, source), None)
        else:
            space[name] = entry
    checked = {}
    for name, entry in space.items():
        current = config_lib.field_name(config_cls, name, source)
        checked[current] = check_entry(config_cls, current, entry, source)
    fixed_names = {config_lib.field_name(config_cls, name, "--hp") for name in fixed}
    checked = {name: entry for name, entry in checked.items() if name not in fixed_names}
    if not checked:
        where = "its space" if builtin(agent) else f"--agent={agent} has no built-in space, and --space"
        raise UsageError(f"{source}: nothing to sample ({where} leaves no hyperparameter that --hp does not fix)")
    return checked


def check_entry(config_cls: type, name: str, entry: Any, source: str) -> dict[str, Any]:
    """`entry` if it is a valid space entry for field `name`; UsageError naming the problem otherwise."""
    where = f"{source}: {name}"
    if not isinstance(entry, dict) or entry.get("type") not in _KEYS:
        raise UsageError(f"{where}: expected an object with \"type\": float, int or categorical, got {entry!r}")
    extra = set(entry) - _KEYS[entry["type"]] - {"type"}
    if extra:
        raise UsageError(f"{where}: unexpected key {sorted(extra)[0]!r} for type {entry['type']}")
    if entry["type"] == "categorical":
        choices = entry.get("choices")
        if not isinstance(choices, list) or not choices:
            raise UsageError(f"{where}: \"choices\" must be a non-empty list")
        for choice in choices:
            if not (choice is None or isinstance(choice, (bool, int, float, str))):
                raise UsageError(f"{where}: choice {choice!r} is not a number, string, true/false or null")
            _as_field(config_cls, name, choice, where)
        return entry
    return _check_range(config_cls, name, entry, where)


def _check_range(config_cls: type, name: str, entry: dict, where: str) -> dict[str, Any]:
    low, high, log, step = entry.get("low"), entry.get("high"), entry.get("log", False), entry.get("step")
    kind = int if entry["type"] == "int" else (int, float)
    for label, value in (("low", low), ("high", high), ("step", step)):
        if value is None and label == "step":
            continue
        if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value):
            raise UsageError(f"{where}: \"{label}\" must be a finite {entry['type']}, got {value!r}")
        _as_field(config_cls, name, value, where)
    if not isinstance(log, bool):
        raise UsageError(f"{where}: \"log\" must be true or false, got {log!r}")
    if not low < high:
        raise UsageError(f"{where}: \"low\" must be below \"high\", got {low} and {high}")
    if log and low <= 0:
        raise UsageError(f"{where}: a log range needs \"low\" > 0, got {low}")
    if step is not None and (step <= 0 or log):
        raise UsageError(f"{where}: \"step\" must be > 0 and cannot go with \"log\"")
    return entry


def _as_field(config_cls: type, name: str, value: Any, where: str) -> Any:
    try:
        return config_lib.coerce(config_cls, name, value)
    except config_lib.ConfigError as e:
        raise UsageError(f"{where}: {e}") from None


def sample(trial, space: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """One value per hyperparameter of `space`, drawn through the optuna trial (under the hyperparameter's name)."""
    values = {}
    for name, entry in space.items():
        if entry["type"] == "categorical":
            values[name] = trial.suggest_categorical(name, entry["choices"])
        elif entry["type"] == "int":
            values[name] = trial.suggest_int(name, entry["low"], entry["high"], step=entry.get("step") or 1,
                                             log=entry.get("log", False))
        else:
            values[name] = trial.suggest_float(name, entry["low"], entry["high"], step=entry.get("step"),
                                               log=entry.get("log", False))
    return values


def describe(agent: str, space: Mapping[str, Any]) -> str:
    """--space=help: the agent's space as JSON, with how to change it."""
    if not space:
        return f"# {agent} has no built-in search space: give one with --space=FILE.json (entries as in the others)"
    head = (f"# search space of {agent} (its AgentSpec.search_space); --space=FILE.json lays a file of the same form "
            "over it (null drops an entry), --hp=name=value fixes one")
    entries = ",\n".join(f"  {json.dumps(name)}: {json.dumps(entry)}" for name, entry in space.items())
    return f"{head}\n{{\n{entries}\n}}"

"""Hyperparameter presets and command-line overrides for any agent config.

An agent's hyperparameters are one frozen dataclass (e.g. `DQNConfig`) whose
defaults are the documented baseline. A preset (tfrl.presets) overrides
some fields for an (agent, env) pair; `--hp key=value` flags override both.
Every key and value is checked against the dataclass fields' types, so a typo
stops the run instead of being silently ignored.

The fields every agent shares (run length, vector envs, the loop's evaluation,
log and checkpoint cadences) are declared once, in `LoopConfig`, which each
agent's config extends. A field that was renamed stays readable under its old
name (the config class's RENAMED map) with one deprecation warning, so older
presets and run directories still load.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import math
import textwrap
import threading
import types
import typing
from typing import Any, ClassVar, Mapping, Sequence

from absl import logging

from tfrl.errors import UsageError


class ConfigError(UsageError):
    """An unknown key, an ill-typed value or a broken preset file."""


def _field_types(config_cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(config_cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(config_cls)}


def _coerce(key: str, value: Any, annotation: Any) -> Any:
    """Convert a JSON value or a command-line string to the field's type, or raise ConfigError."""
    bad = ConfigError(f"hyperparameter {key!r}: {value!r} is not a valid {_type_name(annotation)}")
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):  # Optional[X] or X | None
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() == "none"):
            return None
        return _coerce(key, value, args[0])
    if origin is tuple:
        item_type = typing.get_args(annotation)[0]
        if isinstance(value, str):
            text = value.strip().strip("[]()")
            value = [v for v in text.split(",") if v.strip()] if text else []
        if not isinstance(value, (list, tuple)):
            raise bad
        return tuple(_coerce(key, v, item_type) for v in value)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes"):
            return True
        if isinstance(value, str) and value.lower() in ("false", "0", "no"):
            return False
        raise bad
    if annotation is int:
        if isinstance(value, bool):
            raise bad
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.replace("_", ""))  # exact, also past 2**53
            except ValueError:
                pass
            try:
                number = float(value)  # accept 1e5
            except ValueError:
                raise bad from None
            if number.is_integer():
                return int(number)
        raise bad
    if annotation is float:
        if isinstance(value, bool):
            raise bad
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise bad from None
        if not math.isfinite(number):
            raise ConfigError(f"hyperparameter {key!r}: {value!r} is not a finite number")
        return number
    if annotation is str:
        if isinstance(value, str):
            return value
        raise bad
    raise TypeError(f"unsupported config field type {annotation!r} for {key!r}")


def _type_name(annotation: Any) -> str:
    if typing.get_origin(annotation) is not None:
        return str(annotation).replace("typing.", "")
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


TORSOS = ("auto", "mlp", "nature_cnn", "minatar_cnn")  # tfrl.models.networks describes them
CONVOLUTIONS = {  # each CNN torso's layers: (filters, kernel size, stride); tfrl.models.networks builds them
    "nature_cnn": ((32, 8, 4), (64, 4, 2), (64, 3, 1)),
    "minatar_cnn": ((16, 3, 1),),
}
NATURE_CNN_MIN_SIZE = 36  # the smallest height and width its three valid convolutions leave 1x1 or more of


def resolved_torso(torso: str, obs_shape: Sequence[int], obs_dtype: str) -> str:
    """The torso a network gets: "auto" is a CNN for HWC uint8 images (nature_cnn from 36x36 up, minatar_cnn
    below), an MLP otherwise. ConfigError for a CNN asked for observations that are not HWC images."""
    image = obs_dtype == "uint8" and len(obs_shape) == 3
    if torso == "auto":
        if not image:
            return "mlp"
        return "nature_cnn" if min(obs_shape[:2]) >= NATURE_CNN_MIN_SIZE else "minatar_cnn"
    if torso != "mlp" and not image:
        raise ConfigError(f"torso={torso} takes HWC uint8 image observations, got {obs_dtype} {tuple(obs_shape)}")
    if torso == "nature_cnn" and min(obs_shape[:2]) < NATURE_CNN_MIN_SIZE:
        raise ConfigError(f"torso=nature_cnn needs images of at least {NATURE_CNN_MIN_SIZE}x{NATURE_CNN_MIN_SIZE}, "
                          f"got {tuple(obs_shape)}; use minatar_cnn")
    return torso


def field_torsos(torso: str, spec) -> dict[str, str]:
    """The torso reading each field a network reads (spec: a tfrl.envs.observations.ObsSpec): for one array, `torso`
    resolved for it; for Dict observations, `torso` resolved for each image field and an MLP's flatten for the
    others. ConfigError as resolved_torso's."""
    if not spec.structured:
        field = spec.fields[0]
        return {field.key: resolved_torso(torso, field.shape, field.dtype)}
    return {field.key: resolved_torso(torso, field.shape, field.dtype) if field.image else "mlp"
            for field in spec.inputs}


def require(condition: bool, message: str) -> None:
    """Range check for a config's __post_init__; raised as ConfigError by apply_overrides."""
    if not condition:
        raise ValueError(message)


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """The fields of every agent's config that the run loop (tfrl.run.training_loop) reads.

    "env steps" count transitions summed over all vector envs. An agent's config extends this class and may
    give these fields other defaults.
    """

    RENAMED: ClassVar[Mapping[str, str]] = {}  # old hyperparameter name -> current one, in the subclasses
    NETWORK_FIELDS: ClassVar[tuple[str, ...]] = ()  # the fields that shape the networks (tfrl.run.warm_start checks them)
    REFUSED: ClassVar[Mapping[str, str]] = {}  # another agent's hyperparameter -> why this agent does not take it

    total_env_steps: int = 100_000
    """Length of training, in env steps."""
    num_envs: int = 1
    """Parallel environments stepped together (one batched NumPy forward pass per vector step)."""
    eval_interval: int = 10_000
    """Env steps between greedy evaluations (0 disables periodic evaluation)."""
    eval_episodes: int = 10
    """Episodes per periodic greedy evaluation."""
    final_eval_episodes: int = 100
    """Episodes of the greedy evaluation that ends the run."""
    keep_best_policy: bool = False
    """Keep the policy of the best periodic evaluation (tfrl.run.best_policy): the run then also evaluates it at the
    end ("best_eval", on the final evaluation's episodes) and exports it instead of the last policy."""
    log_interval: int = 2_000
    """Env steps between log lines and TensorBoard scalars."""
    checkpoint_interval: int = 25_000
    """Env steps between checkpoints (networks, optimizer, step counters, RNG states, the loop's state and, for
    off-policy agents, the replay buffer; see tfrl.run.checkpoints); 0 = only at the end of training. A run resumes
    from its newest checkpoint."""

    def __post_init__(self):
        for name in ("total_env_steps", "num_envs", "final_eval_episodes", "log_interval"):
            require(getattr(self, name) > 0, f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("eval_interval", "eval_episodes", "checkpoint_interval"):
            require(getattr(self, name) >= 0, f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("eval_episodes", "final_eval_episodes"):
            require(getattr(self, name) <= MAX_EVAL_EPISODES, f"{name} must be at most {MAX_EVAL_EPISODES:,} episodes "
                    f"(an evaluation that would outlast any run), got {getattr(self, name):,}")
        require(not self.keep_best_policy or (self.eval_interval > 0 and self.eval_episodes > 0),
                "keep_best_policy needs periodic evaluations: eval_interval > 0 and eval_episodes > 0")

    @property
    def env_steps_per_collect(self) -> int:
        """Env steps of one collection pass of the loop (one vector step); training ends on a whole number."""
        return self.num_envs

    @property
    def trained_env_steps(self) -> int:
        """total_env_steps rounded up to a whole number of collection passes: what the loop trains."""
        per = self.env_steps_per_collect
        return -(-self.total_env_steps // per) * per


MAX_EVAL_EPISODES = 100_000  # more is a typo: 100k CartPole episodes are already hours of evaluation


def require_positive_sizes(name: str, sizes: Sequence[int]) -> None:
    require(len(sizes) > 0 and all(h > 0 for h in sizes), f"{name} must be positive layer sizes, got {tuple(sizes)}")


_warned_renames: set[tuple[str, str]] = set()
_rename_lock = threading.Lock()


def _current_name(config_cls: type, key: str, source: str) -> str:
    """`key`, or its current name if the config class renamed it (warning once per process and name)."""
    new = getattr(config_cls, "RENAMED", {}).get(key)
    if new is None:
        return key
    with _rename_lock:
        if (config_cls.__name__, key) not in _warned_renames:
            _warned_renames.add((config_cls.__name__, key))
            logging.warning("%s: hyperparameter %r is now called %r; the old name is read for now", source, key, new)
    return new


def field_name(config_cls: type, key: str, source: str) -> str:
    """The current name of hyperparameter `key` of config_cls (an old name is read, with one warning);
    ConfigError naming `source` and the close matches if it has no such field."""
    key = _current_name(config_cls, key, source)
    refused = getattr(config_cls, "REFUSED", {}).get(key)
    if refused:
        raise ConfigError(f"{source}: {key!r} is not supported by {config_cls.__name__}: {refused}")
    types = _field_types(config_cls)
    if key not in types:
        close = difflib.get_close_matches(key, types, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"{source}: unknown hyperparameter {key!r} for {config_cls.__name__}{hint}")
    return key


def coerce(config_cls: type, key: str, value: Any) -> Any:
    """`value` as field `key` of config_cls takes it (a string is parsed); ConfigError if it is ill-typed. No range
    check: those are the config's __post_init__, which sees every field together."""
    return _coerce(key, value, _field_types(config_cls)[key])


def apply_overrides(config: Any, overrides: Mapping[str, Any], source: str) -> Any:
    """Return `config` with `overrides` applied; unknown keys list the close matches."""
    types = _field_types(type(config))
    changes = {}
    for key, value in overrides.items():
        new_key = field_name(type(config), key, source)
        if new_key in changes:
            raise ConfigError(f"{source}: {new_key!r} is given twice (once under its old name)")
        changes[new_key] = _coerce(new_key, value, types[new_key])
    try:
        return dataclasses.replace(config, **changes)
    except (ValueError, TypeError) as e:  # __post_init__ range checks
        raise ConfigError(f"{source}: {e}") from None


def field_docs(config_cls: type) -> dict[str, str]:
    """{field: its docstring} from the class bodies (the string under each field), the nearest class first."""
    docs: dict[str, str] = {}
    for cls in config_cls.__mro__:
        if not dataclasses.is_dataclass(cls):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body
        for node, following in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                    and isinstance(following.value.value, str)):
                docs.setdefault(node.target.id, " ".join(following.value.value.split()))
    return docs


def describe(config_cls: type, preset=None) -> str:
    """Every hyperparameter of config_cls: name, type, default, the preset's value, and its documentation."""
    defaults, docs, types = config_cls(), field_docs(config_cls), _field_types(config_cls)
    preset_config = apply_overrides(defaults, preset.hparams, f"preset {preset.name}") if preset else None
    source = f"preset {preset.name}" if preset else "no preset"
    lines = [f"{config_cls.__name__} hyperparameters ({source}); set one with --hp=name=value:", ""]
    for field in dataclasses.fields(config_cls):
        default = getattr(defaults, field.name)
        line = f"  {field.name} ({_type_name(types[field.name])}): default {default!r}"
        if preset_config is not None and getattr(preset_config, field.name) != default:
            line += f", preset {getattr(preset_config, field.name)!r}"
        lines.append(line)
        lines.extend(textwrap.wrap(docs.get(field.name, ""), width=100, initial_indent="      ",
                                   subsequent_indent="      "))
    renamed = getattr(config_cls, "RENAMED", {})
    if renamed:
        lines += ["", "Old names still read: " + ", ".join(f"{old} -> {new}" for old, new in renamed.items())]
    return "\n".join(lines)


def parse_value(text: str) -> Any:
    """A command-line value typed by its look: true/false, none, an int, a float, else the string itself."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_cli_overrides(items: Sequence[str], flag: str = "--hp") -> dict[str, str]:
    """['lr=1e-3', 'hidden_sizes=64,64'] -> {'lr': '1e-3', 'hidden_sizes': '64,64'}."""
    overrides = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{flag}: expected key=value, got {item!r}")
        if key.strip() in overrides:
            raise ConfigError(f"{flag}: {key.strip()!r} given twice")
        overrides[key.strip()] = value.strip()
    return overrides


def to_dict(config: Any) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(config).items()}

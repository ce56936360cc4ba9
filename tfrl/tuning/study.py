"""The study in its database: opened, checked against what this command tunes, counted.

The database (any SQLAlchemy URL optuna's RDBStorage takes; SQLite by default) is the source of truth: every
process that opens the same study name there adds trials to it, and a trial whose process died (SIGKILL, a
lost machine) stops sending heartbeats and is marked FAIL by the next process that looks (fail_stale), with one
new trial enqueued on the same hyperparameters (optuna's RetryFailedTrialCallback, once). SQLite writes through
its journal, so a kill at any moment leaves the database as of its last committed transaction.

A study remembers what it tunes (study user attributes: agent, env, its keyword arguments, the preset, the
fixed hyperparameters, the objective, seeds per trial): opening it for anything else is refused, naming the
difference, since its trials' values would not compare.
"""

from __future__ import annotations

import contextlib
import pathlib
import time
import warnings
from typing import Any, Mapping

from tfrl.errors import UsageError
from tfrl.lazy_import import LazyModule

optuna = LazyModule("optuna")

IDENTITY = ("agent", "env", "env_kwargs", "preset", "fixed_hp", "objective", "seeds")
COUNTED = ("COMPLETE", "PRUNED", "RUNNING")  # the trials --trials counts: finished, or under way elsewhere
CREATE_ATTEMPTS = 4
CREATE_RACE = ("already exists", "UNIQUE constraint failed: alembic_version", "UNIQUE constraint failed: version_info")


def open_storage(url: str, heartbeat_s: int):
    """optuna's RDBStorage at `url`, with heartbeats every heartbeat_s seconds (stale after twice that);
    UsageError in one line if it cannot be opened."""
    engine_kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else None  # wait on locks
    # Named RetryFailedTrialCallback before optuna 4.9.
    retry = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None) or optuna.storages.RetryFailedTrialCallback
    for attempt in range(CREATE_ATTEMPTS):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(
                    url, engine_kwargs=engine_kwargs, heartbeat_interval=heartbeat_s, grace_period=2 * heartbeat_s,
                    heartbeat_stale_trial_callback=retry(max_retry=1))
        except Exception as e:  # noqa: BLE001 - SQLAlchemy's and the drivers' errors, of every kind
            message = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            # Two processes creating one new database race for its tables: the loser opens it once they exist.
            if attempt + 1 < CREATE_ATTEMPTS and any(text in message for text in CREATE_RACE):
                time.sleep(0.5 * (attempt + 1))
                continue
            raise UsageError(f"--storage={url}: cannot open it ({type(e).__name__}: {message})") from None
    raise AssertionError("unreachable")


@contextlib.contextmanager
def removed_if_refused(url: str, owned_dir: pathlib.Path | None = None):
    """For a block that opens the storage and checks it: an SQLite file that the block created is removed again
    if the block refuses the command (UsageError), which must write nothing. owned_dir (the trials' folder, which
    holds the default database): made if missing, and removed again on a refusal if it is still empty."""
    path = pathlib.Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None
    new = path is not None and not path.exists()
    made = owned_dir is not None and not owned_dir.exists()
    if made:
        owned_dir.mkdir(parents=True)
    try:
        yield
    except UsageError:
        if new and path.is_file():
            path.unlink()
        if made:
            with contextlib.suppress(OSError):
                owned_dir.rmdir()
        raise


def existing_identity(storage, name: str) -> dict[str, Any] | None:
    """The identity attributes of study `name` in `storage`, or None if there is no such study."""
    try:
        study_id = storage.get_study_id_from_name(name)
    except KeyError:
        return None
    return {key: value for key, value in storage.get_study_user_attrs(study_id).items() if key in IDENTITY}


def check_identity(name: str, url: str, saved: Mapping[str, Any], identity: Mapping[str, Any]) -> None:
    """UsageError unless the study `name` (attributes `saved`) tunes what `identity` describes. A study without
    them (created by another program, or this one a moment ago) is taken as it is."""
    if not saved:
        return
    if (saved.get("agent"), saved.get("env")) != (identity["agent"], identity["env"]):
        raise UsageError(f"--study_name={name}: the study of that name in {url} tunes --agent={saved.get('agent')} "
                         f"--env={saved.get('env')}, not --agent={identity['agent']} --env={identity['env']}; "
                         "pick another --study_name")
    differences = [f"{key} {_text(saved.get(key))} there, {_text(identity[key])} here" for key in IDENTITY
                   if saved.get(key) != identity[key]]
    if differences:
        raise UsageError(f"--study_name={name}: the study in {url} was run with other settings "
                         f"({'; '.join(differences)}): its trials would not compare; pick another --study_name")


def _text(value: Any) -> str:
    """An identity value as a message shows it: a dict as key=value pairs."""
    if isinstance(value, dict):
        return " ".join(f"{key}={item}" for key, item in value.items()) or "none"
    return str(value)


def open_study(storage, name: str, identity: Mapping[str, Any], pruner, extra_attrs: Mapping[str, Any]):
    """The study `name` (created if new, maximizing), its identity attributes set."""
    study = optuna.create_study(storage=storage, study_name=name, direction="maximize", pruner=pruner,
                                load_if_exists=True)
    if study.direction != optuna.study.StudyDirection.MAXIMIZE:
        raise UsageError(f"--study_name={name}: that study minimizes its objective; tfrl's maximize the return: "
                         "pick another --study_name")
    if not study.user_attrs.keys() & set(IDENTITY):
        for key, value in {**identity, **extra_attrs}.items():
            study.set_user_attr(key, value)
    return study


def fail_stale(study) -> None:
    """Marks FAIL the running trials whose process stopped sending heartbeats (and enqueues their retry)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def counted_trials(study) -> int:
    """Trials that count towards --trials: complete, pruned, or running (in this process or another)."""
    states = tuple(getattr(optuna.trial.TrialState, state) for state in COUNTED)
    return len(study.get_trials(deepcopy=False, states=states))


def pruner(kind: str, startup_trials: int, warmup_env_steps: int):
    """--pruner: median (optuna's MedianPruner on the periodic evaluations, once startup_trials trials are
    complete and past warmup_env_steps) or none."""
    if kind == "none":
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=startup_trials, n_warmup_steps=warmup_env_steps)

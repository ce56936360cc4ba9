"""Start-up checks of --model_base_path, without TensorFlow: a path one level off is an error that names the right one.

TF Serving's layout is <base path>/<integer version>/saved_model.pb. Pointed one level too deep (at a version),
or at a tfrl run directory, or at the saved_models/ folder holding several models, the server would answer 503
for ever while waiting for versions that never appear there; these are usage errors instead. A base path with
none of that (empty, or other files) may receive versions later: the server starts and waits.
"""

from __future__ import annotations

import pathlib

from tfrl.errors import UsageError

_SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")
_LISTED_AT_MOST = 5


def check_base_path(base_path: pathlib.Path) -> None:
    """UsageError naming the right --model_base_path when base_path has no integer version directory but is a
    version directory, a tfrl run directory, or a directory of models."""
    if _has_versions(base_path):
        return
    if any((base_path / name).is_file() for name in _SAVED_MODEL_FILES):
        raise UsageError(_version_directory_message(base_path))
    saved_models = base_path / "saved_models"
    if (base_path / "config.json").is_file() or saved_models.is_dir():
        models = _model_directories(saved_models) if saved_models.is_dir() else []
        if not models:
            raise UsageError(f"--model_base_path {base_path} is a tfrl run directory without exported models (no "
                             f"{saved_models}/<name>/<version>/): export a policy, then use "
                             f"--model_base_path={saved_models}/<name>")
        raise UsageError(f"--model_base_path {base_path} is a tfrl run directory: serve one of its models, "
                         f"--model_base_path={_listed(models)}")
    models = _model_directories(base_path)
    if models:
        raise UsageError(f"--model_base_path {base_path} holds model directories, not versions: use "
                         f"--model_base_path={_listed(models)}")


def waiting_message(base_path: pathlib.Path) -> str:
    """The start-up warning of a base path without versions yet: what the server waits for."""
    return (f"no version under {base_path} yet: waiting for an integer version directory such as "
            f"{base_path / '1'}/saved_model.pb (tfrl's export writes them; copy or rename one in); predict answers "
            "503 until one loads")


def _version_directory_message(base_path: pathlib.Path) -> str:
    if _is_version_name(base_path.name):
        return (f"--model_base_path {base_path} is a SavedModel version directory: use its parent, "
                f"--model_base_path={base_path.parent}")
    return (f"--model_base_path {base_path} is a SavedModel, not a directory of versions: move it to "
            f"{base_path / '1'} (TF Serving's layout: <base path>/<integer version>/saved_model.pb) or point "
            "--model_base_path at a directory holding it as 1/")


def _model_directories(path: pathlib.Path) -> list[pathlib.Path]:
    """The sub-directories of path that hold integer version directories, by name."""
    try:
        return sorted(p for p in path.iterdir() if p.is_dir() and _has_versions(p))
    except OSError:
        return []


def _has_versions(path: pathlib.Path) -> bool:
    try:
        return any(_is_version_name(p.name) and p.is_dir() for p in path.iterdir())
    except OSError:
        return False


def _is_version_name(name: str) -> bool:
    return name.isascii() and name.isdigit()


def _listed(paths: list[pathlib.Path]) -> str:
    """'a' or 'a (or b, c)', at most _LISTED_AT_MOST named."""
    names = [str(p) for p in paths[:_LISTED_AT_MOST]]
    more = f", and {len(paths) - _LISTED_AT_MOST} more" if len(paths) > _LISTED_AT_MOST else ""
    return names[0] + (f" (or {', '.join(names[1:])}{more})" if len(names) > 1 else "")

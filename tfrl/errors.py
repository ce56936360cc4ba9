"""Errors a launcher reports as one line on stderr, without a traceback (tfrl.cli.run), and the checks of user
input that library code raises them from: a missing optional dependency, an output folder that cannot be made."""

from __future__ import annotations

import importlib
import os
import pathlib


class UsageError(ValueError):
    """Bad flag value, config key, env id, or similar user input: exit code 2."""


class RunError(RuntimeError):
    """The run stopped on a condition its message explains in full (e.g. the disk is full): exit code `exit_code`."""

    exit_code = 1


class MissingExtraError(UsageError):
    """An optional dependency is not installed; the message names the pip extra that brings it."""


def require_extra(module: str, extra: str, purpose: str):
    """Imports and returns `module`, or raises MissingExtraError naming `pip install 'tfrl[extra]'`."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(f"{purpose} needs {module.split('.')[0]}, which is not installed: "
                                f"pip install 'tfrl[{extra}]' (or pip install -e '.[{extra}]' in a checkout)") from None


def check_output_dir(flag: str, directory: pathlib.Path) -> None:
    """UsageError unless `directory` exists as a writable directory or can be created (checked, not created)."""
    directory = pathlib.Path(directory)
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"--{flag}: cannot create {directory}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"--{flag}: {existing} is not writable")

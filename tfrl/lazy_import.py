"""A module imported at its first attribute access, so that a launcher can check its flags before TensorFlow loads."""

from __future__ import annotations

import importlib


class LazyModule:
    """Stands for `import <name>` until an attribute is read; then imports the module and delegates to it."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attribute: str):
        return getattr(importlib.import_module(self._name), attribute)

    def __repr__(self) -> str:
        return f"LazyModule({self._name!r})"

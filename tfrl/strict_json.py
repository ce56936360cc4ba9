"""JSON that a user may have edited by hand, read strictly: a duplicated key or a NaN/Infinity is an error.

Python's json module keeps the last of two equal keys and accepts NaN and Infinity; in a config file either one
is a silent mistake (`"xla": false, ..., "xla": true` trains with XLA; `"learning_rate": NaN` diverges).
"""

from __future__ import annotations

import json
from typing import Any

from tfrl.errors import UsageError


def loads(text: str, source: str, error: type[UsageError] = UsageError) -> Any:
    """The value of a JSON text; `error` (one line naming `source`) if it is not valid strict JSON."""

    def unique_keys(pairs: list[tuple[str, Any]]) -> dict:
        keys = [key for key, _ in pairs]
        duplicated = sorted({key for key in keys if keys.count(key) > 1})
        if duplicated:
            raise error(f"{source}: key {duplicated[0]!r} is given twice")
        return dict(pairs)

    def no_constant(name: str) -> Any:
        raise error(f"{source}: {name} is not a number JSON allows")

    try:
        return json.loads(text, object_pairs_hook=unique_keys, parse_constant=no_constant)
    except json.JSONDecodeError as e:
        raise error(f"{source}: not valid JSON ({e})") from None
    except RecursionError:
        raise error(f"{source}: nested too deeply") from None

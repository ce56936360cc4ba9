"""The hardware flags of the commands (--device, --mixed_precision, --xla, ...): one per tfrl.hardware.runtime.RuntimeOptions
field, defined from the field's name, type, default and the docstring under it, so the options are listed once.

Plain string, integer and boolean flags (no DEFINE_enum: absl exits 1 on a bad enum value, and the commands exit 2
with tfrl's message); the values are checked by tfrl.hardware.runtime.validate_options.
"""

from __future__ import annotations

from absl import flags

from tfrl import config as config_lib
from tfrl.hardware.runtime import RuntimeOptions, option_types

_DEFINE = {str: flags.DEFINE_string, int: flags.DEFINE_integer, bool: flags.DEFINE_boolean}


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines one flag per RuntimeOptions field, in this module (its --help section)."""
    docs, defaults = config_lib.field_docs(RuntimeOptions), RuntimeOptions()
    for name, kind in option_types().items():
        _DEFINE[kind](name, getattr(defaults, name), docs[name], flag_values=flag_values)


def options_from_flags(flag_values: flags.FlagValues = flags.FLAGS) -> RuntimeOptions:
    """The RuntimeOptions the parsed flags ask for."""
    return RuntimeOptions(**{name: flag_values[name].value for name in option_types()})

"""What the commands (tfrl.commands, tfrl-serve) share: absl flag parsing and the usage-error contract.

Bad input (an unknown flag, a bad value, a missing file) ends a launcher with
one line on stderr, "<script>: error: <message>", and exit code 2, with no
traceback: `run(main)` turns absl's flag errors and tfrl's UsageError into that.
A run that stops on a condition its message fully explains (tfrl.errors.RunError:
a full disk, exit code 1; diverged training, exit code 3) ends the same way.
"""

from __future__ import annotations

import pathlib
import sys
from typing import Any, Callable, Sequence

from absl import app, flags

import tfrl
from tfrl.errors import RunError, UsageError
from tfrl.hardware import quiet_logs


def define_common_flags() -> None:
    """The flags every command has; a command module calls this when it defines its own (a library module never
    defines flags: importing tfrl must not change the flags of the user's program)."""
    if "tf_logs" not in flags.FLAGS:
        flags.DEFINE_boolean("tf_logs", False, "Show TensorFlow's start-up and INFO logs (oneDNN, XLA, CPU "
                             "features, saver details), which the commands hide by default.")


def program() -> str:
    """The command's name in messages: "tfrl train", "tfrl-serve", or a script's file name."""
    return pathlib.Path(sys.argv[0]).name


def parse_flags_or_exit(argv, unknown_flag_hint: Callable[[str], str] | None = None):
    """absl exits with code 1 on a bad flag; our contract is one clear line and exit code 2.

    unknown_flag_hint(name): text added to the error of an unknown flag (e.g. "; did you mean ...").
    """
    try:
        return flags.FLAGS(argv)
    except SystemExit as e:
        # absl prints --help and exits 1, as for an error; asking for help is no error.
        if e.code == 1 and set(argv[1:]) & {"--help", "-h", "-?", "--helpshort", "--helpfull", "--helpxml"}:
            sys.exit(0)
        raise
    except flags.Error as e:
        hint = ""
        if unknown_flag_hint is not None and isinstance(e, flags.UnrecognizedFlagError) and e.flagname:
            hint = unknown_flag_hint(e.flagname)
        print(f"{pathlib.Path(argv[0]).name}: error: {e}{hint}", file=sys.stderr)
        sys.exit(2)


HELP_FLAGS = {"--help", "-h", "-?", "--helpshort"}


def flags_help(doc: str, sections: Sequence[tuple[str, Any]]) -> str:
    """doc, then each (title, module) section's flags: --help without absl's and TensorFlow's own flags."""
    parts = [doc.strip(), ""]
    for title, module in sections:
        text = flags.FLAGS.module_help(module).strip()
        parts += [f"{title}:", *text.splitlines()[1:], ""]  # its first line is the module's name
    parts.append("--helpfull lists every flag, absl's own included.")
    return "\n".join(parts)


def run(main: Callable[[list[str]], None], unknown_flag_hint: Callable[[str], str] | None = None,
        help_text: Callable[[], str] | None = None, needs_tensorflow: bool = True) -> None:
    """app.run(main), with UsageError (raised by main or anything it calls) as one line and exit code 2.

    help_text: what --help prints (exit code 0) instead of absl's listing; by default main's module docstring and
    the flags that module defines.
    needs_tensorflow: a missing TensorFlow build is one line naming the extras, exit code 1.
    """
    define_common_flags()
    if help_text is None:
        module = sys.modules[main.__module__]
        help_text = lambda: flags_help(module.__doc__ or "", [("Flags", module)])  # noqa: E731
    try:
        if needs_tensorflow:
            tfrl.require_tensorflow()
    except ImportError as e:
        print(f"{program()}: error: {e}", file=sys.stderr)
        sys.exit(1)
    if help_text is not None and set(sys.argv[1:]) & HELP_FLAGS:
        print(help_text())
        sys.exit(0)

    def quiet_main(argv):
        if not flags.FLAGS.tf_logs:
            quiet_logs.quiet()
        quiet_logs.short_prefixes()
        return main(argv)

    try:
        app.run(quiet_main, flags_parser=lambda argv: parse_flags_or_exit(argv, unknown_flag_hint))
    except UsageError as e:
        print(f"{program()}: error: {e}", file=sys.stderr)
        sys.exit(2)
    except RunError as e:
        print(f"{program()}: error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)


def check_run_dir(run_dir: str | None) -> None:
    """UsageError, before TensorFlow loads (seconds), if --run_dir is given and holds no run's config.json."""
    from tfrl.run import CONFIG_FILE

    if run_dir and not (pathlib.Path(run_dir) / CONFIG_FILE).is_file():
        raise UsageError(f"{pathlib.Path(run_dir) / CONFIG_FILE} does not exist: {run_dir} is not a tfrl run "
                         "directory")


def check_checkpoint_flag(value: str | None) -> None:
    """UsageError unless --checkpoint is unset, best, last or a checkpoint number >= 1."""
    if value is None or value in ("best", "last") or (value.isascii() and value.isdigit() and int(value) >= 1):
        return
    raise UsageError(f"--checkpoint must be best, last or a checkpoint number >= 1, got {value!r}")


def no_extra_args(argv: list[str]) -> None:
    if len(argv) > 1:
        raise UsageError(f"unexpected arguments: {' '.join(argv[1:])}")

"""Errors a launcher reports as one line on stderr, without a traceback (tfrl.cli.run)."""


class UsageError(ValueError):
    """Bad flag value, config key, env id, or similar user input: exit code 2."""


class RunError(RuntimeError):
    """The run stopped on a condition its message explains in full (e.g. the disk is full): exit code `exit_code`."""

    exit_code = 1

"""Errors that mean "the user asked for something invalid": launchers print them as one line and exit 2."""
class UsageError(ValueError):
    """Bad flag value, config key, env id, or similar user input."""

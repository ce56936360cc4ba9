"""`tfrl tune` from a checkout: python scripts/tune.py --help (the command is tfrl.commands.tune)."""

from tfrl.commands import tune

if __name__ == "__main__":
    tune.run()

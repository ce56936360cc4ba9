"""`tfrl export` from a checkout: python scripts/export.py --help (the command is tfrl.commands.export)."""

from tfrl.commands import export

if __name__ == "__main__":
    export.run()

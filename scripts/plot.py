"""`tfrl plot` from a checkout: python scripts/plot.py --help (the command is tfrl.commands.plot)."""

from tfrl.commands import plot

if __name__ == "__main__":
    plot.run()

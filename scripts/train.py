"""`tfrl train` from a checkout: python scripts/train.py --help (the command is tfrl.commands.train)."""

from tfrl.commands import train

if __name__ == "__main__":
    train.run()

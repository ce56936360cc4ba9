"""`tfrl evaluate` from a checkout: python scripts/evaluate.py --help (the command is tfrl.commands.evaluate)."""

from tfrl.commands import evaluate

if __name__ == "__main__":
    evaluate.run()

"""`tfrl serve` (also `tfrl-serve`) from a checkout: python scripts/serve.py --help (tfrl.commands.serve)."""

from tfrl.commands import serve

if __name__ == "__main__":
    serve.run()

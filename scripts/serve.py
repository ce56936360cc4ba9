"""`tfrl serve` (also `tfrl-serve`) from a checkout: python scripts/serve.py --help (tfrl.model_server.main)."""

from tfrl.model_server import main

if __name__ == "__main__":
    main.run()

"""Serve a model over TensorFlow Serving's REST API: the `tfrl-serve` program (see tfrl/model_server/main.py).

    python scripts/serve.py --model_name=lunar --model_base_path=saved_models/lunar
"""

from tfrl.model_server import main

if __name__ == "__main__":
    main.run()

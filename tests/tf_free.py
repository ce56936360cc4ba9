"""Running a script in a process where TensorFlow, Keras, gymnasium and absl cannot be imported, as in an install of
tfrl with --no-deps beside NumPy and a runtime (the portable LiteRT and ONNX loaders)."""

import json
import pathlib
import subprocess
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
HIDDEN = ("tensorflow", "keras", "gymnasium", "absl", "tqdm", "tf2onnx")
_PRELUDE = "import sys\nfor name in {hidden!r}:\n    sys.modules[name] = None\n"


def run_json(body: str, *args: str, hidden: tuple[str, ...] = ()) -> dict:
    """The JSON object of the last stdout line of `body` (its sys.argv[1:] = args), run with HIDDEN and `hidden`
    unimportable; "loaded" is added: the top-level modules it had imported at the end."""
    script = _PRELUDE.format(hidden=HIDDEN + tuple(hidden)) + body + (
        "\nimport json as _json\n_loaded = sorted({m.split('.')[0] for m, v in sys.modules.items() if v is not None})\n"
        "print(_json.dumps({'result': result, 'loaded': _loaded}))\n")
    completed = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True,
                               timeout=120, cwd=REPO_ROOT)
    assert completed.returncode == 0, completed.stderr[-2000:]
    answer = json.loads(completed.stdout.strip().splitlines()[-1])
    return {**answer["result"], "loaded": answer["loaded"]}


# run_json's body for a version's portable files of a policy with memory, run as run_json(PLAY_FILES, version,
# observations.npy): each file plays the observations (each a batch of 3) along its kept states, then row 0 starts
# a new episode and rows 1 and 2 go on -> {"policy.tflite": [actions...], "policy.onnx": [...]}.
PLAY_FILES = """
import numpy as np, tfrl
observations = np.load(sys.argv[2])
result = {}
for file in ("policy.tflite", "policy.onnx"):
    policy = tfrl.load_policy(sys.argv[1] + "/" + file)
    result[file] = [policy(obs).tolist() for obs in observations]
    policy.reset([True, False, False])
    result[file].append(policy(observations[0]).tolist())
"""

"""Digests of short --deterministic training runs: the numbers today's code produces, written down.

A refactoring that keeps behaviour gives the same digests; a change that alters the numerics changes them and
must say so (and re-record them: python tests/behaviour_digests.py --record). A digest covers

  - every tensor of the run's newest TF checkpoint (weights, optimizer slots, step counters), by name, and
  - metrics.jsonl without the fields that read the clock (tfrl.metrics.TIMING_FIELDS), keys sorted.

The runs pin the CPU code paths of oneDNN, OpenBLAS and NumPy to AVX2 (PINNED_ENV), so that the Xeon and EPYC
machines the suite runs on take the same kernels; the digests are recorded per numerics fingerprint
(`fingerprint()`: a few ops of the same kinds, under the same pinning), so an unknown machine says so instead of
reporting a false regression.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
DIGESTS_FILE = REPO_ROOT / "tests" / "data" / "behaviour_digests.json"

PINNED_ENV = {
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "OPENBLAS_CORETYPE": "Haswell",
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
    "TF_CPP_MIN_LOG_LEVEL": "2",
}

_COMMON = ["--env=CartPole-v1", "--preset=none", "--seed=3", "--deterministic", "--export_base_path="]
RUNS = {
    "dqn": ["--agent=dqn", *_COMMON, "--hp=total_env_steps=2000", "--hp=hidden_sizes=16,16",
            "--hp=learning_starts=200", "--hp=gradient_steps_per_train=2", "--hp=batch_size=32", "--hp=replay_capacity=2000",
            "--hp=n_step_return=3", "--hp=dueling=true", "--hp=target_update_period_env_steps=100", "--hp=log_interval=500",
            "--hp=eval_interval=1000", "--hp=eval_episodes=2", "--hp=final_eval_episodes=3",
            "--hp=checkpoint_interval=1000"],
    "a2c": ["--agent=a2c", *_COMMON, "--hp=total_env_steps=4000", "--hp=hidden_sizes=16,16",
            "--hp=log_interval=1000", "--hp=eval_interval=2000", "--hp=eval_episodes=2",
            "--hp=final_eval_episodes=3", "--hp=checkpoint_interval=2000"],
    "ppo": ["--agent=ppo", *_COMMON, "--hp=total_env_steps=4000", "--hp=num_envs=4", "--hp=rollout_length=50",
            "--hp=batch_size=50", "--hp=n_epochs=2", "--hp=hidden_sizes=16,16", "--hp=log_interval=1000",
            "--hp=eval_interval=2000", "--hp=eval_episodes=2", "--hp=final_eval_episodes=3",
            "--hp=checkpoint_interval=2000"],
}


def pinned_env() -> dict[str, str]:
    env = dict(os.environ, **PINNED_ENV)
    env.pop("KERAS_BACKEND", None)
    return env


def launch(agent: str, run_dir: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "train.py"), *RUNS[agent],
                           f"--run_dir={run_dir}"], capture_output=True, text=True, cwd=REPO_ROOT,
                          env=pinned_env(), timeout=300)


def digest(run_dir: pathlib.Path) -> dict[str, str]:
    """{"checkpoint": sha256 over (name, bytes) of every newest-checkpoint tensor, "metrics": sha256 of the records
    without timing fields}."""
    import tensorflow as tf

    from tfrl.metrics import TIMING_FIELDS

    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(run_dir / "checkpoints")))
    tensors = hashlib.sha256()
    for name in sorted(reader.get_variable_to_shape_map()):
        if name.startswith("_CHECKPOINTABLE_OBJECT_GRAPH"):
            continue
        tensors.update(name.encode() + b"\0" + reader.get_tensor(name).tobytes())
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    records = [{k: v for k, v in r.items() if k not in TIMING_FIELDS} for r in records]
    return {"checkpoint": tensors.hexdigest(),
            "metrics": hashlib.sha256(json.dumps(records, sort_keys=True).encode()).hexdigest()}


_FINGERPRINT_CODE = r"""
import hashlib, numpy as np, tensorflow as tf
rng = np.random.default_rng(0)
x, w = rng.normal(size=(64, 16)).astype(np.float32), rng.normal(size=(16, 16)).astype(np.float32)
h = hashlib.sha256()
outputs = (np.tanh(x @ w), np.exp(x) @ w, np.log(np.abs(x) + 1.0), tf.tanh(tf.matmul(x, w)).numpy(),
           tf.nn.log_softmax(tf.matmul(x, w)).numpy(), tf.nn.relu(tf.matmul(tf.exp(x), w)).numpy())
for a in outputs:
    h.update(np.ascontiguousarray(a).tobytes())
print(h.hexdigest()[:16])
"""


def fingerprint() -> str:
    """sha256 prefix of a few NumPy and TF float32 ops under PINNED_ENV: equal on machines that compute alike."""
    out = subprocess.run([sys.executable, "-c", _FINGERPRINT_CODE], capture_output=True, text=True,
                         env=pinned_env(), timeout=120, check=True)
    return out.stdout.strip().splitlines()[-1]


def recorded() -> dict:
    return json.loads(DIGESTS_FILE.read_text()) if DIGESTS_FILE.exists() else {}


def main() -> None:
    import tempfile

    record = "--record" in sys.argv
    key = fingerprint()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for agent in RUNS:
            run_dir = pathlib.Path(tmp) / agent
            completed = launch(agent, run_dir)
            if completed.returncode != 0:
                sys.exit(f"{agent}: train.py exited {completed.returncode}:\n{completed.stderr[-3000:]}")
            results[agent] = digest(run_dir)
    print(json.dumps({key: results}, indent=2))
    if record:
        data = recorded()
        data[key] = results
        DIGESTS_FILE.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()

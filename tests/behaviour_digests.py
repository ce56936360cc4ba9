"""Behaviour digests: short --deterministic training runs of every agent, and the numbers today's code gives.

A refactoring that keeps behaviour gives the same numbers; a change that alters them must say so and re-record
them (python tests/behaviour_digests.py --record, from a clean checkout of the commit; without --record it only
compares). tests/data/behaviour_digests.json holds, per run (RUNS):

  - per machine ("<CPU model> | <numerics fingerprint>", machine_key()): the digest, sha256 of every tensor of
    the newest committed checkpoint (the highest checkpoints/ckpt-N.json, not TF's `checkpoint` index) and of
    metrics.jsonl without the fields that read the clock (tfrl.run.metrics.TIMING_FIELDS). Checked exactly.
  - once, from the last recording: the trajectory, i.e. those metrics records and the L2 norm of every checkpoint
    tensor, floats rounded to 7 significant digits. A machine with no digests of its own is checked against it:
    strings and integers (kinds, env steps, counters, integer tensors) exactly, floats within RTOL (see there).

What makes machines compute differently, and the pins (PINNED_ENV; --intra_op_threads=1 --inter_op_threads=1 in
every run). Measured in December 2026 on an AMD EPYC (2 vCPUs, AVX-512 with BF16; TF 2.21, oneDNN 3.7.3):

  - oneDNN's sgemm does TF's float32 matmuls whether TF's oneDNN ops are on or off: with TF_ENABLE_ONEDNN_OPTS=0
    Eigen's contraction calls it block by block (ONEDNN_VERBOSE shows gemm_api calls either way), and the numbers
    change with ONEDNN_MAX_CPU_ISA (SSE41, AVX2, AVX-512: three different digests of every run, both settings).
    So ONEDNN_MAX_CPU_ISA=AVX2 stays.
  - TF's default for TF_ENABLE_ONEDNN_OPTS depends on the CPU: on with AVX512_VNNI/BF16 or AMX (this EPYC), off
    without (TF under QEMU, whose CPUs have no AVX-512, does not turn them on), and the two settings give other
    numbers (other kernels: oneDNN inner products, fused MatMul+bias). Pinned to 0: Eigen's kernels. (With it on,
    oneDNN's own primitives, some with cache-size-driven blocking, come in; and TF crashes under QEMU with it on,
    so that path could not be checked as below.)
  - Thread counts: Eigen shards a long contraction over the intra-op threads ([64, 2000] x [2000, 64] differs
    between 1 and 2 threads), so a runner with more cores would compute differently: one intra-op and one
    inter-op thread. OPENBLAS_NUM_THREADS=1 for NumPy's matmuls (the actors' NumPy forward passes).
  - NumPy: NPY_DISABLE_CPU_FEATURES keeps its SIMD dispatch at X86_V3 (AVX2; checked in __cpu_dispatch__), and
    OpenBLAS runs its Haswell kernels.
  - Not pinnable: Eigen computes rsqrt, reciprocal and softmax with the CPU's approximate rsqrtps/rcpps and a
    Newton step, whose last bits are the hardware's own (QEMU computes them exactly and gets other bits than this
    EPYC). Grappler rewrites x / sqrt(y) in a tf.function to x * rsqrt(y), and Keras' RMSprop divides by
    sqrt(v + eps): the A2C run (RMSprop) is the one run here that depends on it (Adam's x / (sqrt(v) + eps) is
    not rewritten). The fingerprint includes such a division, so a CPU that rounds it differently gets a key
    of its own.
  - Cost: none measurable. The 7 runs one after another (TF's start-up included): 61-72 s with the old pins (TF's
    oneDNN ops on, TF's default threads), 54-57 s with these; the spread between two passes is ~10 %.

Verified here, under QEMU 7.2 user-mode emulation (qemu-x86_64 -cpu Cooperlake-v2, Icelake-Server-v5, EPYC-Milan:
GenuineIntel and AuthenticAMD, cpuid reporting L2 512 KiB or 2 MiB and L3 16 or 32 MiB, vs this machine's 1 MiB
and 320 MiB), with these pins: matmuls (up to [64, 2000] x [2000, 64] and 300^3), a conv and Keras training steps
give the bits of this machine; the whole runs give this machine's digests under Cooperlake and EPYC-Milan for 6 of
the 7 runs, and A2C differs (rsqrt, above) by at most 2.6e-6 of a field's scale, within the trajectory tolerance.
Not verified: a real Xeon. The emulator runs no AVX-512 code and cannot show the hardware's rsqrtps/rcpps or
anything else it does not model, so on a Xeon at least A2C may well give other digests: then its run is checked
against the trajectory, and recording that machine (--record, there) makes the check exact.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import pathlib
import re
import subprocess
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
DIGESTS_FILE = REPO_ROOT / "tests" / "data" / "behaviour_digests.json"
RECORD_COMMAND = "python tests/behaviour_digests.py --record"

PINNED_ENV = {
    "TF_ENABLE_ONEDNN_OPTS": "0",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "OPENBLAS_CORETYPE": "Haswell",
    "OPENBLAS_NUM_THREADS": "1",
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
    "TF_CPP_MIN_LOG_LEVEL": "2",
}

# Trajectory tolerance, for a machine with no digests of its own: |actual - recorded| <= RTOL * scale + ATOL, the
# scale being the largest |value| of that metrics field in the recorded run, or the tensor's recorded norm. The
# runs computed with other kernels (oneDNN's SSE41 or AVX-512 sgemm, TF's oneDNN ops on, QEMU's exact rsqrt) kept
# every integer and came within 2.3e-3 (SAC's Adam slots; policy losses 1.6e-3, all else < 1e-4); a 1 % change of
# the learning rate moved every run by 2e-2 or more (DQN 0.7): 1e-2 lies between.
RTOL = 1e-2
ATOL = 1e-6
SIGNIFICANT_DIGITS = 7

_COMMON = ["--preset=none", "--seed=3", "--deterministic", "--export_base_path=", "--intra_op_threads=1",
           "--inter_op_threads=1"]
_CARTPOLE = ["--env=CartPole-v1", *_COMMON]
RUNS = {
    "dqn": ["--agent=dqn", *_CARTPOLE, "--hp=total_env_steps=2000", "--hp=hidden_sizes=16,16",
            "--hp=learning_starts=200", "--hp=gradient_steps_per_train=2", "--hp=batch_size=32", "--hp=replay_capacity=2000",
            "--hp=n_step_return=3", "--hp=dueling=true", "--hp=target_update_period_env_steps=100", "--hp=log_interval=500",
            "--hp=eval_interval=1000", "--hp=eval_episodes=2", "--hp=final_eval_episodes=3",
            "--hp=checkpoint_interval=1000"],
    "a2c": ["--agent=a2c", *_CARTPOLE, "--hp=total_env_steps=4000", "--hp=hidden_sizes=16,16",
            "--hp=log_interval=1000", "--hp=eval_interval=2000", "--hp=eval_episodes=2",
            "--hp=final_eval_episodes=3", "--hp=checkpoint_interval=2000"],
    "ppo": ["--agent=ppo", *_CARTPOLE, "--hp=total_env_steps=4000", "--hp=num_envs=4", "--hp=rollout_length=50",
            "--hp=batch_size=50", "--hp=n_epochs=2", "--hp=hidden_sizes=16,16", "--hp=log_interval=1000",
            "--hp=eval_interval=2000", "--hp=eval_episodes=2", "--hp=final_eval_episodes=3",
            "--hp=checkpoint_interval=2000"],
    # Prioritized replay: sum-tree sampling, importance weights, priorities from the TD errors.
    "dqn_per": ["--agent=dqn", *_CARTPOLE, "--hp=prioritized_replay=true", "--hp=total_env_steps=1500",
                "--hp=hidden_sizes=16,16", "--hp=learning_starts=200", "--hp=train_period_env_steps=2",
                "--hp=gradient_steps_per_train=1", "--hp=batch_size=32", "--hp=replay_capacity=1500",
                "--hp=target_update_period_env_steps=100", "--hp=log_interval=500", "--hp=eval_interval=750",
                "--hp=eval_episodes=2", "--hp=final_eval_episodes=2", "--hp=checkpoint_interval=750"],
    # Continuous actions, twin critics, learned temperature, normalized observations: 21 train calls x 25 steps.
    "sac": ["--agent=sac", "--env=Pendulum-v1", *_COMMON, "--hp=total_env_steps=1200", "--hp=hidden_sizes=16,16",
            "--hp=normalize_observations=true", "--hp=learning_rate=1e-3", "--hp=batch_size=32",
            "--hp=learning_starts=200", "--hp=train_period_env_steps=50", "--hp=gradient_steps_per_train=25",
            "--hp=replay_capacity=1200", "--hp=log_interval=400", "--hp=eval_interval=600", "--hp=eval_episodes=1",
            "--hp=final_eval_episodes=1", "--hp=checkpoint_interval=600"],
    # Gaussian policy with observation and reward normalization.
    "ppo_norm": ["--agent=ppo", "--env=Pendulum-v1", *_COMMON, "--hp=normalize_observations=true",
                 "--hp=normalize_rewards=true", "--hp=total_env_steps=2400", "--hp=num_envs=4",
                 "--hp=rollout_length=100", "--hp=batch_size=100", "--hp=n_epochs=2", "--hp=hidden_sizes=16,16",
                 "--hp=gamma=0.9", "--hp=log_interval=800", "--hp=eval_interval=1200", "--hp=eval_episodes=1",
                 "--hp=final_eval_episodes=1", "--hp=checkpoint_interval=1200"],
    # Pixels: uint8 10x5 frames through the minatar CNN (16 3x3 filters), shared by policy and value.
    "ppo_cnn": ["--agent=ppo", "--env=tfrl/Catch-v0", *_COMMON, "--hp=torso=minatar_cnn", "--hp=hidden_sizes=16",
                "--hp=total_env_steps=1024", "--hp=num_envs=4", "--hp=rollout_length=32", "--hp=batch_size=64",
                "--hp=n_epochs=2", "--hp=log_interval=256", "--hp=eval_interval=512", "--hp=eval_episodes=4",
                "--hp=final_eval_episodes=4", "--hp=checkpoint_interval=512"],
}


def pinned_env() -> dict[str, str]:
    env = dict(os.environ, **PINNED_ENV)
    env.pop("KERAS_BACKEND", None)
    return env


def launch(name: str, run_dir: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "train.py"), *RUNS[name],
                           f"--run_dir={run_dir}"], capture_output=True, text=True, cwd=REPO_ROOT,
                          env=pinned_env(), timeout=300)


# --- what a run gives ---------------------------------------------------------------------------

def newest_checkpoint(run_dir: pathlib.Path) -> pathlib.Path:
    """The prefix checkpoints/ckpt-N of the newest committed checkpoint (the highest N with a ckpt-N.json)."""
    numbers = [int(m[1]) for p in (run_dir / "checkpoints").iterdir() if (m := re.fullmatch(r"ckpt-(\d+)\.json", p.name))]
    if not numbers:
        raise FileNotFoundError(f"no checkpoints/ckpt-N.json in {run_dir}")
    return run_dir / "checkpoints" / f"ckpt-{max(numbers)}"


def checkpoint_tensors(run_dir: pathlib.Path) -> dict:
    """{name: NumPy array} of every tensor of the newest committed checkpoint (names without TF's suffix)."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(newest_checkpoint(run_dir)))
    return {name.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE"): reader.get_tensor(name)
            for name in sorted(reader.get_variable_to_shape_map()) if not name.startswith("_CHECKPOINTABLE_OBJECT_GRAPH")}


def metrics_records(run_dir: pathlib.Path) -> list[dict]:
    """metrics.jsonl's records without the fields that read the clock."""
    from tfrl.run.metrics import TIMING_FIELDS

    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING_FIELDS} for r in records]


def digest(run_dir: pathlib.Path) -> dict[str, str]:
    """{"checkpoint": sha256 over (name, bytes) of every newest-checkpoint tensor, "metrics": sha256 of the records
    without timing fields}."""
    tensors = hashlib.sha256()
    for name, value in checkpoint_tensors(run_dir).items():
        tensors.update(name.encode() + b"\0" + value.tobytes())
    records = json.dumps(metrics_records(run_dir), sort_keys=True).encode()
    return {"checkpoint": tensors.hexdigest(), "metrics": hashlib.sha256(records).hexdigest()}


def _rounded(value):
    if isinstance(value, float) and math.isfinite(value) and value != 0.0:
        return float(f"{value:.{SIGNIFICANT_DIGITS}g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def trajectory(run_dir: pathlib.Path) -> dict:
    """{"metrics": the records without timing fields, "checkpoint": {tensor: L2 norm, or the integer value of an
    integer scalar}}, floats rounded to SIGNIFICANT_DIGITS."""
    import numpy as np

    norms = {}
    for name, value in checkpoint_tensors(run_dir).items():
        if value.dtype.kind in "iu" and value.shape == ():
            norms[name] = int(value)
        elif value.dtype.kind == "f":
            norms[name] = float(np.linalg.norm(value.astype(np.float64).ravel()))
    return _rounded({"metrics": metrics_records(run_dir), "checkpoint": norms})


def _close(actual, recorded, scale: float) -> bool:
    """Strings, integers, booleans and None: equal. Floats: |actual - recorded| <= RTOL * scale + ATOL."""
    if isinstance(recorded, float) and not isinstance(actual, bool) and isinstance(actual, (int, float)):
        if math.isnan(recorded) or math.isnan(actual):
            return math.isnan(recorded) and math.isnan(actual)
        return abs(actual - recorded) <= RTOL * scale + ATOL
    return type(actual) is type(recorded) and actual == recorded


def _field_scales(records: list[dict]) -> dict[str, float]:
    """{field: the largest |value| it takes in the run's records}: a loss that crosses zero is compared on the
    scale of the run's losses, not of its value at that step."""
    scales: dict[str, float] = {}
    for record in records:
        for field, value in record.items():
            if isinstance(value, float) and math.isfinite(value):
                scales[field] = max(scales.get(field, 0.0), abs(value))
    return scales


def trajectory_difference(actual: dict, recorded: dict) -> str | None:
    """None if `actual` matches `recorded`, else where they first differ: metrics record i (its kind and env
    step) and field, or the checkpoint tensor. Strings, integers (kinds, env steps, counters, integer tensors):
    equal. Floats: within RTOL of the field's scale (the largest |value| of that metrics field in the recorded run;
    a tensor's own norm), plus ATOL."""
    actual_records, recorded_records = actual["metrics"], recorded["metrics"]
    scales = _field_scales(recorded_records)
    for i, (got, want) in enumerate(zip(actual_records, recorded_records)):
        where = f"metrics.jsonl record {i} (kind {want.get('kind')!r}, env_step {want.get('env_step')})"
        if sorted(got) != sorted(want):
            return f"{where}: fields {sorted(got)}, recorded {sorted(want)}"
        for field in want:
            if not _close(_rounded(got[field]), want[field], scales.get(field, 0.0)):
                return (f"{where}, field {field!r}: {_rounded(got[field])!r}, recorded {want[field]!r} "
                        f"(tolerance {RTOL * scales.get(field, 0.0) + ATOL:.2g})")
    if len(actual_records) != len(recorded_records):
        return f"metrics.jsonl has {len(actual_records)} records, recorded {len(recorded_records)}"
    got, want = actual["checkpoint"], recorded["checkpoint"]
    if sorted(got) != sorted(want):
        return f"checkpoint tensors {sorted(set(got) ^ set(want))} are in only one of this run and the recording"
    for name in want:
        if not _close(_rounded(got[name]), want[name], abs(want[name])):
            kind = "value" if isinstance(want[name], int) else "L2 norm"
            return f"checkpoint tensor {name!r}: {kind} {_rounded(got[name])!r}, recorded {want[name]!r}"
    return None


def largest_deviation(actual: dict, recorded: dict) -> tuple[float, str]:
    """(the largest |actual - recorded| / scale over the float fields and tensor norms, where): for choosing RTOL."""
    worst = (0.0, "")
    scales = _field_scales(recorded["metrics"])
    for i, (got, want) in enumerate(zip(actual["metrics"], recorded["metrics"])):
        for field, value in want.items():
            if isinstance(value, float) and isinstance(got.get(field), float) and scales.get(field):
                worst = max(worst, (abs(got[field] - value) / scales[field], f"record {i} {field}"))
    for name, value in recorded["checkpoint"].items():
        if isinstance(value, float) and value and isinstance(actual["checkpoint"].get(name), float):
            worst = max(worst, (abs(actual["checkpoint"][name] - value) / abs(value), f"tensor {name}"))
    return worst


# --- which machine ------------------------------------------------------------------------------

_FINGERPRINT_CODE = r"""
import hashlib, numpy as np, tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.experimental.enable_op_determinism()
rng = np.random.default_rng(0)
x, w = rng.normal(size=(64, 16)).astype(np.float32), rng.normal(size=(16, 16)).astype(np.float32)
a, b = rng.normal(size=(64, 2000)).astype(np.float32), rng.normal(size=(2000, 64)).astype(np.float32)
img, k = rng.normal(size=(8, 10, 5, 1)).astype(np.float32), rng.normal(size=(3, 3, 1, 16)).astype(np.float32)
with tf.GradientTape() as tape:
    kv = tf.Variable(k)
    conv = tf.nn.relu(tf.nn.conv2d(img, kv, 1, "VALID"))
    y = tf.reduce_sum(tf.tanh(conv))
h = hashlib.sha256()
outputs = (np.tanh(x @ w), np.exp(x) @ w, np.log(np.abs(x) + 1.0), np.sin(x.astype(np.float64)),
           tf.tanh(tf.matmul(x, w)).numpy(), tf.nn.log_softmax(tf.matmul(x, w)).numpy(), tf.matmul(a, b).numpy(),
           tf.nn.relu(tf.matmul(tf.exp(x), w)).numpy(), conv.numpy(), tape.gradient(y, kv).numpy(),
           tf.function(lambda u, v: u / tf.sqrt(v))(x, tf.abs(x) + 1.0).numpy())  # rsqrt, see the docstring
for out in outputs:
    h.update(np.ascontiguousarray(out).tobytes())
print(h.hexdigest()[:16])
"""


@functools.cache  # a subprocess of ~5 s; the machine does not change within one process
def fingerprint() -> str:
    """sha256 prefix of a few NumPy and TF ops under PINNED_ENV, one thread: equal on machines that compute alike."""
    out = subprocess.run([sys.executable, "-c", _FINGERPRINT_CODE], capture_output=True, text=True,
                         env=pinned_env(), timeout=120, check=True)
    return out.stdout.strip().splitlines()[-1]


def cpu_model() -> str:
    """The CPU's model name (lscpu's "Model name"), from /proc/cpuinfo; "unknown CPU" where there is none."""
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown CPU"
    match = re.search(r"^model name\s*:\s*(.*)$", text, re.MULTILINE)
    return " ".join(match[1].split()) if match else "unknown CPU"


def machine_key() -> str:
    return f"{cpu_model()} | {fingerprint()}"


def recorded() -> dict:
    """The JSON file: {"recorded_at", "recorded_on", "trajectories": {run: ...}, "machines": {key: {"recorded_at",
    "digests": {run: ...}}}}; {} if there is none."""
    return json.loads(DIGESTS_FILE.read_text()) if DIGESTS_FILE.exists() else {}


def _commit() -> str:
    out = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no", "--",
                            "tfrl", "scripts"], capture_output=True, text=True).stdout.strip()
    return out.stdout.strip() + (" (with uncommitted changes in tfrl/ or scripts/)" if dirty else "")


def _dumps(value, indent: str = "", in_list: bool = False) -> str:
    """JSON, indented, with each metrics record and each small object on one line (the file stays short)."""
    scalars = isinstance(value, (dict, list)) and not any(isinstance(v, (dict, list))
                                                          for v in (value.values() if isinstance(value, dict) else value))
    if not isinstance(value, (dict, list)) or (scalars and (in_list or len(value) <= 4)):
        return json.dumps(value, sort_keys=True)
    inner = indent + " "
    if isinstance(value, list):
        items = [inner + _dumps(v, inner, in_list=True) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + indent + "]"
    items = [f"{inner}{json.dumps(k)}: {_dumps(value[k], inner)}" for k in sorted(value)]
    return "{\n" + ",\n".join(items) + "\n" + indent + "}"


def _check_tfrl_origin() -> None:
    """The runs must import this checkout's tfrl (the venv's editable install may point at another checkout:
    set PYTHONPATH to this one)."""
    # As `python scripts/train.py` imports it: the script's folder, not the working directory, leads sys.path.
    code = "import sys; sys.path.pop(0); import tfrl; print(tfrl.__file__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT,
                         env=pinned_env(), timeout=60, check=True).stdout.strip()
    if not pathlib.Path(out).resolve().is_relative_to(REPO_ROOT):
        sys.exit(f"the runs would import tfrl from {out}, not from {REPO_ROOT}: set PYTHONPATH={REPO_ROOT}")


def main() -> None:
    import tempfile
    import time

    record = "--record" in sys.argv
    _check_tfrl_origin()
    key = machine_key()
    digests, trajectories = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in RUNS:
            run_dir = pathlib.Path(tmp) / name
            start = time.monotonic()
            completed = launch(name, run_dir)
            if completed.returncode != 0:
                sys.exit(f"{name}: train.py exited {completed.returncode}:\n{completed.stderr[-3000:]}")
            digests[name], trajectories[name] = digest(run_dir), trajectory(run_dir)
            print(f"{name}: {time.monotonic() - start:.1f} s", file=sys.stderr)
    data = recorded()
    stored, known = data.get("trajectories", {}), data.get("machines", {}).get(key, {}).get("digests", {})
    differences = {name: "not recorded" if name not in stored else trajectory_difference(trajectories[name],
                                                                                        stored[name])
                   for name in RUNS}
    print(f"this machine: {key} ({'recorded' if known else 'no digests recorded'})")
    for name in RUNS:
        exact = "" if name not in known else "; digests equal" if known[name] == digests[name] else "; digests DIFFER"
        print(f"  {name}: trajectory {differences[name] or 'within tolerance'}{exact}")
    if not record:
        return
    commit = _commit()
    machines = data.get("machines", {})
    if any(differences.values()):
        dropped = sorted(set(machines) - {key})
        if dropped:
            print(f"the trajectories changed beyond tolerance: dropped the digests of {dropped}, recorded for other "
                  "behaviour; those machines check the new trajectories until they are recorded again",
                  file=sys.stderr)
        machines = {}
    machines[key] = {"recorded_at": commit, "digests": digests}
    data = {"recorded_at": commit, "recorded_on": key, "machines": machines, "trajectories": trajectories,
            "tolerance": {"rtol": RTOL, "atol": ATOL, "significant_digits": SIGNIFICANT_DIGITS}}
    DIGESTS_FILE.write_text(_dumps(data) + "\n")
    print(f"recorded {key} at {commit} in {DIGESTS_FILE}", file=sys.stderr)


if __name__ == "__main__":
    main()

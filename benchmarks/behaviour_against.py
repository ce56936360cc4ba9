"""Did a change alter behaviour? Runs tests/behaviour_digests.py's RUNS with an older checkout and with this one,
and compares the newest checkpoint's tensors (by value: checkpoint keys may have been renamed) and the metrics
records (on the fields both have: a change may add a logged field), under the digests' pins.

    git worktree add /tmp/old <commit>
    python benchmarks/behaviour_against.py /tmp/old dqn a2c ppo dqn_per sac ppo_norm ppo_cnn
"""
import glob
import hashlib
import json
import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
import behaviour_digests as bd
import numpy as np

def run(repo, name, out):
    env = {**bd.pinned_env(), "PYTHONPATH": repo}
    args = bd.RUNS[name]
    p = subprocess.run([sys.executable, f"{repo}/scripts/train.py", *args, f"--run_dir={out}"], env=env,
                       capture_output=True, text=True, cwd=repo, timeout=600)
    if p.returncode:
        return None, p.stderr.strip().splitlines()[-1]
    return out, None

def tensors(run_dir):
    import tensorflow as tf
    ck = sorted(glob.glob(f"{run_dir}/checkpoints/ckpt-*.index"), key=lambda s: int(s.split("-")[-1].split(".")[0]))[-1][:-6]
    r = tf.train.load_checkpoint(ck)
    return sorted(hashlib.sha256(np.asarray(r.get_tensor(n)).tobytes()).hexdigest()[:16]
                  for n in r.get_variable_to_shape_map() if not n.startswith("_CHECKPOINTABLE") and "save_counter" not in n)

def records(run_dir):
    from tfrl.run.metrics import TIMING_FIELDS
    return [{k: v for k, v in json.loads(l).items() if k not in TIMING_FIELDS} for l in open(f"{run_dir}/metrics.jsonl")]

old, new = sys.argv[1], str(REPO)
out_root = tempfile.mkdtemp(prefix="behaviour-against-")
for name in sys.argv[2:]:
    a, err = run(old, name, f"{out_root}/{name}-old")
    if err: print(name, "old failed:", err); continue
    b, err = run(new, name, f"{out_root}/{name}-new")
    ta, tb = tensors(a), tensors(b)
    ra, rb = records(a), records(b)
    same_fields = all({k: x[k] for k in x if k in y} == {k: y[k] for k in y if k in x} for x, y in zip(ra, rb)) and len(ra) == len(rb)
    print(name, "tensors equal:", ta == tb, len(ta), len(tb), "| records equal on shared fields:", same_fields,
          "| fields only new:", sorted(set(rb[-1]) - set(ra[-1])), "only old:", sorted(set(ra[-1]) - set(rb[-1])))

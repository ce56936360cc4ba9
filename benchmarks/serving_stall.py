"""Benchmark: how long one large predict request, or a huge version directory, delays small requests
(tfrl-serve on loopback).

    python benchmarks/serving_stall.py --large_rows=800000
    python benchmarks/serving_stall.py --large_rows=10000
    python benchmarks/serving_stall.py --symlinked_version=/usr --seconds=20

Exports a DQN policy with CartPole's shapes (obs 4, 2 actions, 64x64 MLP) into a temporary base path, serves it in
this process, and runs two clients: one sends 1-row requests back to back for the whole test; the other sends one
request of --large_rows rows after a second. Prints the large request's status and time, and the small requests'
latency (p50, p99, max) while the large one was in flight and before it. Run it alone: anything else on the
machine skews the numbers.

--symlinked_version=DIR: instead of the large request, after a second `<base path>/50` appears as a symlink to DIR
(e.g. /usr: a large tree that is no SavedModel), and the small requests' latency is measured from then to the end,
with the time they spent stalled (the sum of latencies over 50 ms: the client sends back to back, so a stall of
the server shows as one slow request).
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import tempfile
import threading
import time

import numpy as np
from absl import app, flags

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tests"))

flags.DEFINE_integer("large_rows", 800_000, "Rows of the large request.")
flags.DEFINE_float("seconds", 6.0, "How long the small-request client runs.")
flags.DEFINE_integer("max_request_bytes", None, "The server's body limit; default: tfrl-serve's.")
flags.DEFINE_string("symlinked_version", None, "Measure a symlink <base>/50 -> this directory instead of a large "
                    "request.")
FLAGS = flags.FLAGS
STALL_MS = 50.0


def _percentile(values, q):
    return float(np.percentile(values, q)) if values else float("nan")


def main(argv):
    del argv
    from serving_helpers import Client, running_server  # noqa: E402
    from tfrl.models import export
    from tfrl.agents.dqn import policy as dqn_policy
    from tfrl.agents.dqn.config import DQNConfig
    from tfrl.envs import EnvInfo
    from tfrl.model_server.options import ServerOptions

    base = pathlib.Path(tempfile.mkdtemp())
    policy = dqn_policy.serving_policy(DQNConfig(hidden_sizes=(64, 64)), EnvInfo("CartPole-v1", (4,), 2))
    export.export_saved_model(policy, [4], base, "cartpole", {})
    body = json.dumps({"instances": np.random.default_rng(0).normal(size=(FLAGS.large_rows, 4)).round(4).tolist()})
    small = json.dumps({"instances": [[0.0, 0.1, 0.0, -0.1]]})
    limit = {} if FLAGS.max_request_bytes is None else {"max_request_bytes": FLAGS.max_request_bytes}
    options = ServerOptions(model_name="cartpole", model_base_path=base / "cartpole", **limit)
    latencies, large = [], {}
    with running_server(options) as (port, _):
        stop = threading.Event()

        def small_client():
            client = Client(port)
            while not stop.is_set():
                start = time.perf_counter()
                status, _ = client.predict("cartpole", small)
                latencies.append((start, time.perf_counter() - start, status))

        def symlinked_version():
            time.sleep(1.0)
            large.update(start=time.perf_counter(), status="-")
            os.symlink(FLAGS.symlinked_version, base / "cartpole" / "50")

        def large_client():
            time.sleep(1.0)
            client = Client(port, timeout_s=120)
            start = time.perf_counter()
            status, answer = client.predict("cartpole", body)
            large.update(start=start, end=time.perf_counter(), status=status,
                         error=answer.get("error") if isinstance(answer, dict) else None)

        second = symlinked_version if FLAGS.symlinked_version else large_client
        threads = [threading.Thread(target=small_client), threading.Thread(target=second)]
        for thread in threads:
            thread.start()
        time.sleep(FLAGS.seconds)
        threads[1].join()
        stop.set()
        threads[0].join()
    if FLAGS.symlinked_version:
        _print_symlink_stalls(latencies, large["start"])
        return
    during = [t * 1e3 for start, t, _ in latencies if large["start"] <= start + t and start <= large["end"]]
    before = [t * 1e3 for start, t, _ in latencies if start + t < large["start"]]
    print(f"large request: {FLAGS.large_rows} rows, {len(body) / 1e6:.1f} MB, status {large['status']}, "
          f"{large['end'] - large['start']:.2f} s{' (' + large['error'] + ')' if large.get('error') else ''}")
    print(f"small requests before it: n={len(before)} p50={_percentile(before, 50):.2f} ms "
          f"p99={_percentile(before, 99):.2f} ms")
    print(f"small requests during it: n={len(during)} p50={_percentile(during, 50):.2f} ms "
          f"p99={_percentile(during, 99):.2f} ms max={max(during, default=float('nan')):.1f} ms; "
          f"errors: {sum(s != 200 for _, _, s in latencies)}")


def _print_symlink_stalls(latencies, linked_at: float) -> None:
    after = [t * 1e3 for start, t, _ in latencies if start >= linked_at]
    stalled = sum(t for t in after if t > STALL_MS) / 1e3
    span = max((start + t for start, t, _ in latencies), default=linked_at) - linked_at
    print(f"{FLAGS.symlinked_version} linked as version 50: small requests after it n={len(after)} "
          f"p50={_percentile(after, 50):.2f} ms p99={_percentile(after, 99):.2f} ms "
          f"max={max(after, default=0):.1f} ms; "
          f"stalled (requests over {STALL_MS:g} ms) {stalled:.1f} s of {span:.1f} s; "
          f"errors: {sum(s != 200 for _, _, s in latencies)}")


if __name__ == "__main__":
    app.run(main)

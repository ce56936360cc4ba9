"""Benchmark: how long one large predict request delays small ones (tfrl-serve on loopback).

    python benchmarks/serving_stall.py --large_rows=800000
    python benchmarks/serving_stall.py --large_rows=10000

Exports a DQN policy with CartPole's shapes (obs 4, 2 actions, 64x64 MLP) into a temporary base path, serves it in
this process, and runs two clients: one sends 1-row requests back to back for the whole test; the other sends one
request of --large_rows rows after a second. Prints the large request's status and time, and the small requests'
latency (p50, p99, max) while the large one was in flight and before it. Run it alone: anything else on the
machine skews the numbers.
"""

from __future__ import annotations

import json
import pathlib
import statistics
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
FLAGS = flags.FLAGS


def _percentile(values, q):
    return float(np.percentile(values, q)) if values else float("nan")


def main(argv):
    del argv
    from serving_helpers import Client, running_server  # noqa: E402
    from tfrl import export
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

        def large_client():
            time.sleep(1.0)
            client = Client(port, timeout_s=120)
            start = time.perf_counter()
            status, answer = client.predict("cartpole", body)
            large.update(start=start, end=time.perf_counter(), status=status,
                         error=answer.get("error") if isinstance(answer, dict) else None)

        threads = [threading.Thread(target=small_client), threading.Thread(target=large_client)]
        for thread in threads:
            thread.start()
        time.sleep(FLAGS.seconds)
        threads[1].join()
        stop.set()
        threads[0].join()
    during = [t * 1e3 for start, t, _ in latencies if large["start"] <= start + t and start <= large["end"]]
    before = [t * 1e3 for start, t, _ in latencies if start + t < large["start"]]
    print(f"large request: {FLAGS.large_rows} rows, {len(body) / 1e6:.1f} MB, status {large['status']}, "
          f"{large['end'] - large['start']:.2f} s{' (' + large['error'] + ')' if large.get('error') else ''}")
    print(f"small requests before it: n={len(before)} p50={_percentile(before, 50):.2f} ms "
          f"p99={_percentile(before, 99):.2f} ms")
    print(f"small requests during it: n={len(during)} p50={_percentile(during, 50):.2f} ms "
          f"p99={_percentile(during, 99):.2f} ms max={max(during, default=float('nan')):.1f} ms; "
          f"errors: {sum(s != 200 for _, _, s in latencies)}")


if __name__ == "__main__":
    app.run(main)

"""Load generator for tfrl-serve on loopback: one client's latency, and 64 clients' throughput with and without batching.

    python benchmarks/serving_load.py                       # exports a LunarLander-sized MLP, starts its own servers
    python benchmarks/serving_load.py --model_base_path=saved_models/lunar --model_name=lunar

It starts two servers (scripts/serve.py subprocesses, each with its own GIL, on
free loopback ports), one with dynamic batching and one without, and drives
them from this process:

1. latency: one keep-alive connection to the batching server sending one
   observation per request, sequentially (--latency_requests after a warm-up,
   60 s at most): p50/p90/p99 in ms;
2. throughput: --clients connections, each sending one observation per request
   and waiting for the answer before the next (a closed loop), for
   --duration_seconds, alternating between the two servers for --rounds rounds
   so that both see the same background load; the medians and their ratio.

The client is meant to be cheap, because it shares the machine's cores with the
server: uvloop (when installed) and asyncio streams with the request bytes made
once, answers read by Content-Length and their status line checked. Every
number is bounded in requests and in time. Prints one JSON line per measurement
and a summary; the server's own batch sizes come from its metrics endpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
OBS_SIZE = 8  # LunarLander's observation


def export_model(base_path: pathlib.Path) -> pathlib.Path:
    """A LunarLander-sized DQN policy (8 -> 64 -> 64 -> 4, action + q_values) through tfrl.models.export."""
    code = f"""
import pathlib, keras, tensorflow as tf
from tfrl.models import export
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input(({OBS_SIZE},)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(64, activation="relu"), keras.layers.Dense(4)])
def outputs(obs):
    q_values = model(obs)
    return {{"action": tf.argmax(q_values, axis=-1), "q_values": q_values}}
export.export_saved_model(export.ServingPolicy(model, outputs, {{}}), ({OBS_SIZE},), pathlib.Path({str(base_path)!r}),
                          "lunar", {{"agent": "benchmark"}})
"""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=600)
    return base_path / "lunar"


class Server:
    """scripts/serve.py in a subprocess on a free loopback port."""

    def __init__(self, model_name: str, model_base_path: pathlib.Path, extra_flags: list[str]):
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2")
        self.process = subprocess.Popen(
            [sys.executable, str(REPO_ROOT / "scripts" / "serve.py"), f"--model_name={model_name}",
             f"--model_base_path={model_base_path}", "--rest_api_port=0", "--file_system_poll_wait_seconds=0",
             *extra_flags], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        line = self.process.stdout.readline()  # "serving model NAME (version N) at http://HOST:PORT/..."
        match = re.search(r"http://([\d.]+):(\d+)", line)
        if not match:
            self.process.kill()
            raise RuntimeError(f"the server did not start: {line!r}")
        self.host, self.port = match[1], int(match[2])

    def cpu_seconds(self) -> float:
        """User + system CPU time of the server process so far (Linux /proc)."""
        fields = pathlib.Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


class Connection:
    """One keep-alive HTTP/1.1 connection sending the same prepared request."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes):
        self.reader, self.writer, self.request = reader, writer, request

    @classmethod
    async def open(cls, host: str, port: int, request: bytes) -> "Connection":
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, request)

    async def call(self) -> tuple[int, bytes]:
        self.writer.write(self.request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = int(re.search(rb"(?i)content-length: *(\d+)", head)[1])
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


def predict_request(host: str, port: int, model_name: str, observation: list[float]) -> bytes:
    body = json.dumps({"instances": [observation]}).encode()
    return (f"POST /v1/models/{model_name}:predict HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


async def measure_latency(server: Server, model_name: str, requests: int, max_seconds: float) -> dict:
    request = predict_request(server.host, server.port, model_name, [0.1] * OBS_SIZE)
    connection = await Connection.open(server.host, server.port, request)
    for _ in range(200):  # warm-up: first calls, allocator, caches
        await connection.call()
    latencies_ms, errors = [], 0
    deadline = time.perf_counter() + max_seconds
    while len(latencies_ms) < requests and time.perf_counter() < deadline:
        start = time.perf_counter()
        status, body = await connection.call()
        latencies_ms.append((time.perf_counter() - start) * 1e3)
        errors += status != 200 or b'"predictions"' not in body
    connection.close()
    cuts = statistics.quantiles(latencies_ms, n=100)
    return {"measure": "latency_1_client", "requests": len(latencies_ms), "errors": errors,
            "p50_ms": round(cuts[49], 3), "p90_ms": round(cuts[89], 3), "p99_ms": round(cuts[98], 3),
            "mean_ms": round(statistics.fmean(latencies_ms), 3)}


async def measure_throughput(server: Server, model_name: str, clients: int, seconds: float,
                             max_requests_per_client: int) -> dict:
    connections = [await Connection.open(server.host, server.port, predict_request(
        server.host, server.port, model_name, [0.01 * i] * OBS_SIZE)) for i in range(clients)]
    counts, errors = [0] * clients, [0]
    for connection in connections:  # warm-up: each connection once
        await connection.call()
    stop_at = time.perf_counter() + seconds

    async def client(i: int) -> None:
        connection = connections[i]
        while time.perf_counter() < stop_at and counts[i] < max_requests_per_client:
            status, body = await connection.call()
            counts[i] += 1
            errors[0] += status != 200

    rows_before, calls_before = await batch_totals(server)
    start, server_cpu, client_cpu = time.perf_counter(), server.cpu_seconds(), _own_cpu_seconds()
    await asyncio.gather(*(client(i) for i in range(clients)))
    elapsed = time.perf_counter() - start
    server_cpu, client_cpu = server.cpu_seconds() - server_cpu, _own_cpu_seconds() - client_cpu
    rows, calls = await batch_totals(server)
    for connection in connections:
        connection.close()
    requests = sum(counts)
    return {"measure": "throughput", "clients": clients, "seconds": round(elapsed, 2), "requests": requests,
            "errors": errors[0], "predictions_per_s": round(requests / elapsed, 1),
            # CPU time per request, in µs: where the two shared cores went
            "server_cpu_us_per_request": round(server_cpu / requests * 1e6, 1),
            "client_cpu_us_per_request": round(client_cpu / requests * 1e6, 1),
            "mean_batch_size": round((rows - rows_before) / max(calls - calls_before, 1), 2)}  # rows per model call


def _own_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


async def batch_totals(server: Server) -> tuple[float, float]:
    """(rows, model calls) so far, from the server's metrics endpoint."""
    connection = await Connection.open(server.host, server.port, (
        f"GET /monitoring/prometheus/metrics HTTP/1.1\r\nHost: {server.host}\r\n\r\n").encode())
    _, body = await connection.call()
    connection.close()
    totals = dict(re.findall(r'^:tfrl:serving:batch_size_(sum|count)\{[^}]*\} (\S+)$', body.decode(), re.M))
    return float(totals.get("sum", 0)), float(totals.get("count", 0))


def load_average() -> str:
    """The 1, 5 and 15 minute load averages (what `uptime` prints): how busy the shared machine was."""
    return " ".join(pathlib.Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_name", default="lunar")
    parser.add_argument("--model_base_path", default=None, help="default: export a LunarLander-sized MLP")
    parser.add_argument("--latency_requests", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--duration_seconds", type=float, default=4.0, help="of each throughput window")
    parser.add_argument("--rounds", type=int, default=3,
                        help="throughput windows per mode, alternating batching / no batching, so that both see "
                             "the same background load")
    parser.add_argument("--max_batch_size", type=int, default=128)
    parser.add_argument("--batch_timeout_micros", type=int, default=0)
    parser.add_argument("--num_batch_threads", type=int, default=1)
    parser.add_argument("--no_batching_threads", type=int, default=None,
                        help="--num_batch_threads of the no-batching server (default: --num_batch_threads)")
    args = parser.parse_args()
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass

    print(json.dumps({"load_average_at_start": load_average()}), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        base_path = pathlib.Path(args.model_base_path) if args.model_base_path else export_model(pathlib.Path(tmp))
        modes = {
            "batching": ["--enable_batching", f"--max_batch_size={args.max_batch_size}",
                         f"--batch_timeout_micros={args.batch_timeout_micros}",
                         f"--num_batch_threads={args.num_batch_threads}"],
            "no_batching": ["--noenable_batching",
                            f"--num_batch_threads={args.no_batching_threads or args.num_batch_threads}"],
        }
        servers = {mode: Server(args.model_name, base_path, flags) for mode, flags in modes.items()}
        try:
            latency = asyncio.run(measure_latency(servers["batching"], args.model_name, args.latency_requests, 60.0))
            print(json.dumps({"mode": "batching", "flags": modes["batching"], **latency}), flush=True)
            rates = {mode: [] for mode in modes}
            for _ in range(args.rounds):
                for mode, server in servers.items():
                    result = asyncio.run(measure_throughput(server, args.model_name, args.clients,
                                                            args.duration_seconds, 100_000))
                    print(json.dumps({"mode": mode, "flags": modes[mode], **result}), flush=True)
                    rates[mode].append(result["predictions_per_s"])
        finally:
            for server in servers.values():
                server.stop()
    medians = {mode: statistics.median(values) for mode, values in rates.items()}
    print(json.dumps({"load_average_at_end": load_average()}), flush=True)
    print(f"one client: p50 {latency['p50_ms']} ms, p99 {latency['p99_ms']} ms ({latency['requests']} requests)")
    print(f"{args.clients} clients, median of {args.rounds} windows of {args.duration_seconds:g} s: batching "
          f"{medians['batching']:.0f} predictions/s, no batching {medians['no_batching']:.0f} predictions/s: "
          f"{medians['batching'] / medians['no_batching']:.2f}x")


if __name__ == "__main__":
    main()

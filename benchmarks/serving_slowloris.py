"""Attack: a bounded slowloris against tfrl-serve on loopback, the server limited to 1024 open files.

    python benchmarks/serving_slowloris.py --connections=1100 --seconds=20
    python benchmarks/serving_slowloris.py --connections=1000 --seconds=25 --reconnect
    python benchmarks/serving_slowloris.py --slow_body --connections=520 --seconds=15 [--reconnect]

Exports a small DQN policy (CartPole's shapes), starts scripts/serve.py in a child process whose open-file
limit is 1024 (a common default), then opens --connections connections that send a request line and one header
and then nothing more, keeping them open. Meanwhile one client sends a valid 1-row request every 100 ms, on a
fresh connection each. Prints how many slow connections the server closed and when, how many valid requests
succeeded or failed (and when the first success came), and the server's log lines about it.

--reconnect: the slow connections are held by an attacker process that opens a new one (request line and one
header again) as soon as the server closes one, so the server never sees fewer than --connections slow clients
for long; it prints how many times the attacker reconnected.

--slow_body: the slow connections send complete headers announcing a body of 100,000 bytes, then one byte of it
(and one more every 3 s without --reconnect), instead of half their headers.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import os
import pathlib
import resource
import selectors
import socket
import subprocess
import sys
import tempfile
import time

from absl import app, flags

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
flags.DEFINE_integer("connections", 1100, "Slow-header connections to open.")
flags.DEFINE_float("seconds", 20.0, "How long the valid client keeps asking.")
flags.DEFINE_bool("reconnect", False, "The slow clients reopen a connection as soon as the server closes one "
                  "(from an attacker process).")
flags.DEFINE_string("serve_args", "", "Extra flags for scripts/serve.py, space separated.")
flags.DEFINE_bool("slow_body", False, "The slow connections send complete headers (Content-Length: 100000) and "
                  "then trickle the body, instead of half their headers.")
FLAGS = flags.FLAGS


def _export(base: pathlib.Path) -> pathlib.Path:
    from tfrl.models import export
    from tfrl.agents.dqn import policy as dqn_policy
    from tfrl.agents.dqn.config import DQNConfig
    from tfrl.envs import EnvInfo

    policy = dqn_policy.serving_policy(DQNConfig(hidden_sizes=(16,)), EnvInfo("CartPole-v1", (4,), 2))
    export.export_saved_model(policy, [4], base, "cartpole", {})
    return base / "cartpole"


def _start_server(model_path: pathlib.Path, log_path: pathlib.Path) -> tuple[subprocess.Popen, int]:
    def limit_files():
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

    log = open(log_path, "w")
    process = subprocess.Popen([sys.executable, str(REPO_ROOT / "scripts" / "serve.py"), "--model_name=cartpole",
                                f"--model_base_path={model_path}", "--rest_api_port=0", *FLAGS.serve_args.split()],
                               stdout=subprocess.PIPE, stderr=log, text=True, preexec_fn=limit_files,
                               env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    line = process.stdout.readline()  # "serving model cartpole (version 1) at http://127.0.0.1:PORT/..."
    return process, int(line.split("http://127.0.0.1:")[1].split("/")[0])


def _valid_request(port: int) -> bool:
    """One valid predict request on a fresh connection; True if answered 200 within 2 s."""
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2.0)
        connection.request("POST", "/v1/models/cartpole:predict", json.dumps({"instances": [[0.0, 0.1, 0.0, 0.0]]}))
        ok = connection.getresponse().status == 200
        connection.close()
        return ok
    except (OSError, http.client.HTTPException):
        return False


_SLOW_START = b"POST /v1/models/cartpole:predict HTTP/1.1\r\nHost: x\r\n"  # and never the end of the headers
_SLOW_BODY = _SLOW_START + b"Content-Length: 100000\r\n\r\n{"  # complete headers, one byte of the body


def _slow_start() -> bytes:
    return _SLOW_BODY if FLAGS.slow_body else _SLOW_START


def _open_slow(port: int) -> socket.socket | None:
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=1.0)
        sock.sendall(_slow_start())
    except OSError:  # the accept queue is full or the server closed it at once: the attacker tries again
        return None
    sock.setblocking(False)
    return sock


def _reconnecting_attacker(port: int, connections: int, ready, stop, reconnects) -> None:
    """Holds `connections` slow connections; each one the server closes is reopened at once."""
    selector = selectors.DefaultSelector()
    missing = connections
    while not stop.is_set():
        for _ in range(missing):
            sock = _open_slow(port)
            if sock is not None:
                selector.register(sock, selectors.EVENT_READ)
                missing -= 1
        ready.set()
        for key, _ in selector.select(timeout=0.05):
            try:
                if key.fileobj.recv(4096):
                    continue  # an error answer (400/408): the close follows
            except BlockingIOError:
                continue
            except OSError:
                pass
            selector.unregister(key.fileobj)
            key.fileobj.close()
            missing += 1
            reconnects.value += 1


def _valid_requests(port: int, start: float) -> list[tuple[float, bool]]:
    """One valid request every 100 ms, each on a fresh connection, until --seconds after start."""
    results = []
    while time.monotonic() - start < FLAGS.seconds:
        sent = time.monotonic()
        results.append((sent - start, _valid_request(port), time.monotonic() - sent))
        time.sleep(0.1)
    return results


def _print_valid(results) -> None:
    ok = [t for t, success, _ in results if success]
    latencies_ms = sorted(latency * 1e3 for _, success, latency in results if success)
    median = latencies_ms[len(latencies_ms) // 2] if latencies_ms else float("nan")
    print(f"valid requests: {len(ok)} of {len(results)} answered 200; first success at "
          f"{min(ok, default=float('nan')):.1f} s; failures: {len(results) - len(ok)}; answered in median "
          f"{median:.0f} ms, max {max(latencies_ms, default=float('nan')):.0f} ms")


def _attack_with_reconnects(port: int) -> None:
    context = multiprocessing.get_context("fork")
    ready, stop, reconnects = context.Event(), context.Event(), context.Value("l", 0, lock=False)
    attacker = context.Process(target=_reconnecting_attacker, args=(port, FLAGS.connections, ready, stop,
                                                                     reconnects))
    start = time.monotonic()
    attacker.start()
    try:
        ready.wait(60)
        opened = time.monotonic() - start
        results = _valid_requests(port, time.monotonic())
    finally:
        stop.set()
        attacker.join(30)
    print(f"{FLAGS.connections} slow connections opened in {opened:.2f} s and reopened {reconnects.value} times "
          f"after the server closed them")
    _print_valid(results)


def main(argv):
    del argv
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    work = pathlib.Path(tempfile.mkdtemp())
    process, port = _start_server(_export(work / "models"), work / "server.log")
    if FLAGS.reconnect:
        try:
            _attack_with_reconnects(port)
        finally:
            process.terminate()
            process.wait(timeout=30)
        _print_server_log(work / "server.log")
        return
    try:
        start = time.monotonic()
        slow = []
        for _ in range(FLAGS.connections):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(_slow_start())
            sock.setblocking(False)
            slow.append(sock)
        opened = time.monotonic() - start
        results, closed_at, trickled_at = [], {}, time.monotonic()
        while time.monotonic() - start < FLAGS.seconds:
            if FLAGS.slow_body and time.monotonic() - trickled_at >= 3.0:  # one more body byte every 3 s
                trickled_at = time.monotonic()
                for i, sock in enumerate(slow):
                    if i not in closed_at:
                        try:
                            sock.send(b" ")
                        except OSError:
                            closed_at[i] = time.monotonic() - start
            sent = time.monotonic()
            results.append((sent - start, _valid_request(port), time.monotonic() - sent))
            for i, sock in enumerate(slow):
                if i in closed_at:
                    continue
                try:
                    if sock.recv(1) == b"":
                        closed_at[i] = time.monotonic() - start
                except BlockingIOError:
                    pass
                except OSError:
                    closed_at[i] = time.monotonic() - start
            time.sleep(0.1)
        print(f"{FLAGS.connections} slow connections opened in {opened:.2f} s; the server closed {len(closed_at)} of "
              f"them (the last at {max(closed_at.values(), default=float('nan')):.1f} s)")
        _print_valid(results)
    finally:
        process.terminate()
        process.wait(timeout=30)
        for sock in slow:
            sock.close()
    _print_server_log(work / "server.log")


def _print_server_log(path: pathlib.Path) -> None:
    log = path.read_text().splitlines()
    print("server log:", *[line[-160:] for line in log if "connection" in line or "Too many" in line][:6], sep="\n  ")


if __name__ == "__main__":
    app.run(main)

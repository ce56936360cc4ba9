"""Attack: a bounded slowloris against tfrl-serve on loopback, the server limited to 1024 open files.

    python benchmarks/serving_slowloris.py --connections=1100 --seconds=20

Exports a small DQN policy (CartPole's shapes), starts scripts/serve.py in a child process whose open-file
limit is 1024 (a common default), then opens --connections connections that send a request line and one header
and then nothing more, keeping them open. Meanwhile one client sends a valid 1-row request every 100 ms, on a
fresh connection each. Prints how many slow connections the server closed and when, how many valid requests
succeeded or failed (and when the first success came), and the server's log lines about it.
"""

from __future__ import annotations

import http.client
import json
import os
import pathlib
import resource
import socket
import subprocess
import sys
import tempfile
import time

from absl import app, flags

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
flags.DEFINE_integer("connections", 1100, "Slow-header connections to open.")
flags.DEFINE_float("seconds", 20.0, "How long the valid client keeps asking.")
flags.DEFINE_string("serve_args", "", "Extra flags for scripts/serve.py, space separated.")
FLAGS = flags.FLAGS


def _export(base: pathlib.Path) -> pathlib.Path:
    from tfrl import export
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
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2.0)
        connection.request("POST", "/v1/models/cartpole:predict", json.dumps({"instances": [[0.0, 0.1, 0.0, 0.0]]}))
        ok = connection.getresponse().status == 200
        connection.close()
        return ok
    except (OSError, http.client.HTTPException):
        return False


def main(argv):
    del argv
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    work = pathlib.Path(tempfile.mkdtemp())
    process, port = _start_server(_export(work / "models"), work / "server.log")
    try:
        start = time.monotonic()
        slow = []
        for _ in range(FLAGS.connections):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(b"POST /v1/models/cartpole:predict HTTP/1.1\r\nHost: x\r\n")
            sock.setblocking(False)
            slow.append(sock)
        opened = time.monotonic() - start
        results, closed_at = [], {}
        while time.monotonic() - start < FLAGS.seconds:
            results.append((time.monotonic() - start, _valid_request(port)))
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
        ok = [t for t, success in results if success]
        print(f"{FLAGS.connections} slow connections opened in {opened:.2f} s; the server closed {len(closed_at)} of "
              f"them (the last at {max(closed_at.values(), default=float('nan')):.1f} s)")
        print(f"valid requests: {len(ok)} of {len(results)} answered 200; first success at "
              f"{min(ok, default=float('nan')):.1f} s; failures: {len(results) - len(ok)}")
    finally:
        process.terminate()
        process.wait(timeout=30)
        for sock in slow:
            sock.close()
    log = (work / "server.log").read_text().splitlines()
    print("server log:", *[line[-160:] for line in log if "connection" in line or "Too many" in line][:6], sep="\n  ")


if __name__ == "__main__":
    app.run(main)

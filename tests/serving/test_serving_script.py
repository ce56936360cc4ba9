"""scripts/serve.py as a user runs it: usage errors (exit 2, one line) and a graceful SIGTERM with a request in flight."""

import http.client
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from tfrl.agents.dqn import networks as dqn_networks, policy as dqn_policy
from tfrl.agents.dqn.config import DQNConfig
from tfrl.envs import EnvInfo
from tfrl.models import export

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVE = str(REPO_ROOT / "scripts" / "serve.py")
ENV = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2")


def _serve(*args, cwd) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, SERVE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=ENV, cwd=cwd)


def _wait_for_metric(port: int, line: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("GET", "/monitoring/prometheus/metrics")
        if line in connection.getresponse().read().decode().splitlines():
            return
        time.sleep(0.05)
    pytest.fail(f"no metrics line {line!r} after {timeout_s} s")


def _export_cartpole_policy(base_path: pathlib.Path) -> pathlib.Path:
    info = EnvInfo(env_id="CartPole-v1", obs_shape=(4,), num_actions=2)
    config = DQNConfig(hidden_sizes=(8,))
    q_network = dqn_networks.q_network(info.obs_shape, info.num_actions, config.hidden_sizes)
    return export.export_saved_model(dqn_policy.serving_policy(config, info, q_network), info.obs_shape, base_path,
                                     "cartpole", {"agent": "dqn", "env_id": "CartPole-v1"})


def test_sigterm_lets_the_request_in_flight_finish_and_exits_0(tmp_path):
    pytest.importorskip("uvicorn", reason="the serve extra (uvicorn) is not installed: pip install -e '.[serve]'")
    version_dir = _export_cartpole_policy(tmp_path / "saved_models")
    broken = tmp_path / "broken"
    (broken / "1").mkdir(parents=True)
    (broken / "1" / "saved_model.pb").write_bytes(b"not a SavedModel")
    # A batch waits up to 6 s for more requests: a lone request stays in flight that long.
    server = _serve("--model_name=cartpole", f"--model_base_path={version_dir.parent}", "--rest_api_port=0",
                    "--batch_timeout_micros=6000000", cwd=tmp_path)
    broken_server = _serve("--model_name=b", f"--model_base_path={broken}", "--rest_api_port=0", cwd=tmp_path)
    try:
        line = server.stdout.readline()
        match = re.fullmatch(r"serving model cartpole \(version 1\) at http://127\.0\.0\.1:(\d+)/v1/models/cartpole\n",
                             line)
        assert match, (line, server.stderr.read() if server.poll() is not None else "")
        port = int(match[1])
        observations = [[0.1, -0.2, 0.03, 0.4], [-1.0, 0.5, -0.2, 0.0]]
        answer = {}

        def predict():
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            connection.request("POST", "/v1/models/cartpole:predict", json.dumps({"instances": observations}))
            answer["sent_at"] = time.monotonic()
            response = connection.getresponse()
            answer["status"], answer["body"] = response.status, json.loads(response.read())
            answer["answered_at"] = time.monotonic()

        thread = threading.Thread(target=predict)
        thread.start()
        _wait_for_metric(port, ':tfrl:serving:predicts_in_flight{model_name="cartpole"} 1')  # in the server's batch
        server.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:  # the listening socket closes at once: new connections are refused
            try:
                http.client.HTTPConnection("127.0.0.1", port, timeout=5).request("GET", "/v1/models/cartpole")
            except ConnectionRefusedError:
                refused_at = time.monotonic()
                break
            time.sleep(0.05)
        else:
            pytest.fail("the server still accepts connections 4 s after SIGTERM")
        thread.join(30)
        stdout, stderr = server.communicate(timeout=60)
    finally:
        for process in (server, broken_server):
            if process.poll() is None:
                process.kill()

    assert answer["status"] == 200, answer
    assert answer["answered_at"] > refused_at  # finished after the server had stopped accepting connections
    assert answer["answered_at"] - answer["sent_at"] > 5.0  # when its batch timed out, not cut short by SIGTERM
    signature = tf.saved_model.load(str(version_dir)).signatures["serving_default"]
    expected = signature(observation=tf.constant(observations, tf.float32))
    assert [row["action"] for row in answer["body"]["predictions"]] == expected["action"].numpy().tolist()
    np.testing.assert_allclose([row["q_values"] for row in answer["body"]["predictions"]],
                               expected["q_values"].numpy(), rtol=1e-6)
    assert server.returncode == 0, stderr[-3000:]
    assert "stopped by SIGTERM (graceful shutdown)" in stdout

    _, broken_stderr = broken_server.communicate(timeout=120)
    assert broken_server.returncode == 2, broken_stderr[-3000:]
    last = broken_stderr.strip().splitlines()[-1]
    assert last.startswith(f"serve.py: error: no version under {broken} loads; version 1: failed to load"), last


def test_usage_errors_are_one_line_and_exit_2(tmp_path):
    cases = [
        ([], "serve.py: error: --model_name and --model_base_path are required"),
        (["--model_name=m", "--model_base_path=does/not/exist"],
         "serve.py: error: --model_base_path: directory does/not/exist does not exist"),
        (["--model_name=m", f"--model_base_path={tmp_path}", "--max_batch_size=0"],
         "serve.py: error: --max_batch_size must be >= 1, got 0"),
        (["--model_name=m", f"--model_base_path={tmp_path}", "--rest_api_port=70000"],
         "serve.py: error: --rest_api_port must be in [0, 65535], got 70000"),
        (["--model_name=m", f"--model_base_path={tmp_path}", "--version_labels=stable:1"],
         "serve.py: error: --version_labels: expected LABEL=VERSION"),
        (["--model_name=a/b", f"--model_base_path={tmp_path}"], "serve.py: error: --model_name must be"),
        (["--batch_timeout_micros=soon"], "serve.py: error: flag --batch_timeout_micros=soon"),
        (["--no_such_flag=1"], "serve.py: error: Unknown command line flag 'no_such_flag'"),
    ]
    processes = [_serve(*args, cwd=tmp_path) for args, _ in cases]
    # The tfrl-serve console script's entry point (pyproject [project.scripts]) is the same program.
    console_script = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.argv[0] = 'tfrl-serve'; from tfrl.commands.serve import run; run()",
         "--model_name=m"], stderr=subprocess.PIPE, text=True, env=ENV, cwd=tmp_path)
    cases.append((["(console script)", "--model_name=m"], "tfrl-serve: error: --model_name and --model_base_path "
                                                          "are required"))
    for process, (args, expected) in zip([*processes, console_script], cases):
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 2, (args, stderr[-2000:])
        assert "Traceback" not in stderr
        assert stderr.strip().splitlines()[-1].startswith(expected), (args, stderr[-1000:])

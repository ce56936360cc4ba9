"""tfrl-serve against slow bodies: connections that send complete headers and then trickle the body.

They used to count as answering requests: never closed to make room, so 512 of them (--max_connections) shut every
new client out until --body_timeout_seconds, and for ever if the attacker reconnected. Now a connection waits (and
makes room when needed, oldest first) until its whole body is in, and a body must arrive within
--header_timeout_seconds of the headers plus its Content-Length at --min_body_bytes_per_second.
"""

import http.client
import json
import socket
import threading
import time

import pytest

pytest.importorskip("uvicorn", reason="the serve extra (uvicorn) is not installed: pip install -e '.[serve]'")
from serving_helpers import copy_version_into_place, hold_reconnecting, metric_value, running_server, save_half_model
from tfrl.model_server.options import ServerOptions

BODY = json.dumps({"instances": [[1.0, 2.0]]}).encode()
# Complete headers announcing a 100 kB body, then one byte of it.
SLOW_BODY = b"POST /v1/models/half:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{"


@pytest.fixture
def base_path(tmp_path):
    path = tmp_path / "half"
    path.mkdir()
    copy_version_into_place(save_half_model(tmp_path / "source" / "1"), path, 1)
    return path


def _options(base_path, **overrides):
    return ServerOptions(model_name="half", model_base_path=base_path, file_system_poll_wait_seconds=0.1, **overrides)


def _slow_body(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(SLOW_BODY)
    return sock


def _answered_within(port: int, seconds: float) -> bool:
    start = time.monotonic()
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=seconds)
        connection.request("POST", "/v1/models/half:predict", BODY)
        ok = connection.getresponse().status == 200
        connection.close()
    except (OSError, http.client.HTTPException):
        return False
    return ok and time.monotonic() - start <= seconds


def test_slow_bodies_make_room_for_a_good_client_who_is_answered_within_a_second(base_path):
    """30 slow bodies against max_connections=20, timers long enough not to matter: room is made."""
    options = _options(base_path, max_connections=20, header_timeout_seconds=30.0, body_timeout_seconds=60.0)
    with running_server(options) as (port, _):
        attack = [_slow_body(port) for _ in range(30)]
        time.sleep(0.3)
        answered = [_answered_within(port, 1.0) for _ in range(10)]
        for sock in attack:
            sock.close()
    assert answered == [True] * 10


def test_reconnecting_slow_bodies_leave_room_for_a_good_client(base_path):
    options = _options(base_path, max_connections=20, header_timeout_seconds=30.0, body_timeout_seconds=60.0)
    with running_server(options) as (port, _):
        stop = threading.Event()
        attacker = threading.Thread(target=hold_reconnecting, args=(lambda: _slow_body(port), 40, stop))
        attacker.start()
        try:
            time.sleep(0.5)
            answered = [_answered_within(port, 1.0) for _ in range(20)]
        finally:
            stop.set()
            attacker.join(10)
    assert sum(answered) >= 18, answered


def test_a_body_slower_than_the_minimum_rate_is_cut_off(base_path):
    # 1 s after the headers plus 100 kB at 100 kB/s: closed about 2 s after it connected, long before the 30 s
    # body timeout; a body sent at once passes.
    options = _options(base_path, header_timeout_seconds=1.0, min_body_bytes_per_second=100_000.0)
    with running_server(options) as (port, app):
        start = time.monotonic()
        sock = _slow_body(port)
        sock.settimeout(5.0)
        try:
            answer = sock.recv(4096)  # the server closes: b"" (nothing is answered to a half-sent body)
        except ConnectionResetError:
            answer = b""
        elapsed = time.monotonic() - start
        sock.close()
        assert answer == b"" and 1.5 <= elapsed <= 3.5, (answer, elapsed)
        assert _answered_within(port, 1.0)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5.0)
        connection.request("GET", "/monitoring/prometheus/metrics")
        response = connection.getresponse()
        status, metrics = response.status, response.read().decode()
        connection.close()
    assert status == 200
    assert metric_value(metrics, ':tfrl:serving:connections_closed{reason="body_timeout"}') == 1

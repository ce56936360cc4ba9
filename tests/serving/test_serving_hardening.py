"""tfrl-serve against hostile or clumsy clients and file systems: Unicode digits as versions, slow headers and
bodies, more connections than it allows, requests with too many rows, large answers, and a version directory
copied in non-atomically."""

import shutil
import socket
import time

import numpy as np
import pytest

from serving_helpers import Client, copy_version_into_place, metric_value, running_server, save_half_model
from tfrl.errors import UsageError
from tfrl.model_server.options import ServerOptions, parse_version_labels

POLL_S = 0.1


@pytest.fixture(scope="module")
def half_versions(tmp_path_factory):
    source = tmp_path_factory.mktemp("half_versions")
    return {version: save_half_model(source / str(version)) for version in (1, 2)}


def _wait_until(condition, timeout_s: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _options(base_path, **overrides):
    return ServerOptions(model_name="half", model_base_path=base_path, file_system_poll_wait_seconds=POLL_S,
                         **overrides)


def test_versions_are_ascii_digits_in_urls_on_disk_and_in_labels(tmp_path, half_versions):
    base_path = tmp_path / "half"
    base_path.mkdir()
    (base_path / "²").mkdir()  # int("²") raises; it must not stop the start-up nor the scans
    copy_version_into_place(half_versions[1], base_path, 1)
    with running_server(_options(base_path)) as (port, app):
        client = Client(port)
        for version in ("%C2%B2", "%D9%A1"):  # superscript two; Arabic-Indic one (int() would read it as 1)
            status, body = client.get(f"/v1/models/half/versions/{version}")
            assert status == 400 and "failed to convert version" in body["error"], (version, body)
            assert client.predict("half", {"instances": [[1.0, 2.0]]}, f"/versions/{version}")[0] == 400
        (base_path / "٣").mkdir()  # created while serving
        copy_version_into_place(half_versions[2], base_path, 2)
        _wait_until(lambda: client.predict("half", {"instances": [[1.0, 2.0]]})[1] == {"predictions": [[3.5, 4.0]]},
                    what="version 2 loaded despite the non-ASCII directories")
    with pytest.raises(UsageError, match="--version_labels: expected LABEL=VERSION"):
        parse_version_labels("stable=²")


def test_slow_headers_are_cut_off_and_connections_beyond_the_limit_closed(tmp_path, half_versions):
    """A bounded slowloris on loopback: 30 connections that trickle their headers, against max_connections=20
    and a 1 s header timeout. The server stays answerable once the slow ones are gone."""
    base_path = tmp_path / "half"
    base_path.mkdir()
    copy_version_into_place(half_versions[1], base_path, 1)
    with running_server(_options(base_path, max_connections=20, header_timeout_seconds=1.0)) as (port, app):
        slow = []
        for _ in range(30):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(b"POST /v1/models/half:predict HTTP/1.1\r\nHost: x\r\n")  # and never the end of it
            sock.settimeout(5.0)
            slow.append(sock)
        start = time.monotonic()
        closed_at = []
        for sock in slow:
            try:
                data = sock.recv(1024)
            except ConnectionResetError:  # closed with our unread bytes in its buffer: a reset
                data = b""
            except socket.timeout:
                data = None
            closed_at.append((time.monotonic() - start, data))
            sock.close()
        assert all(data == b"" for _, data in closed_at), closed_at  # every one closed by the server
        assert max(t for t, _ in closed_at) < 3.0  # by the header timeout (1 s), not the client's 5 s
        client = Client(port)
        assert client.predict("half", {"instances": [[1.0, 2.0]]}) == (200, {"predictions": [[2.5, 3.0]]})
        metrics = client.get("/monitoring/prometheus/metrics")[1]
        refused = metric_value(metrics, ':tfrl:serving:connections_closed{reason="max_connections"}')
        timed_out = metric_value(metrics, ':tfrl:serving:connections_closed{reason="header_timeout"}')
        assert refused >= 10 and refused + timed_out == 30, (refused, timed_out)


def test_a_body_slower_than_the_timeout_is_a_408(tmp_path, half_versions):
    base_path = tmp_path / "half"
    base_path.mkdir()
    copy_version_into_place(half_versions[1], base_path, 1)
    with running_server(_options(base_path, body_timeout_seconds=0.5)) as (port, app):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"POST /v1/models/half:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"inst")
        sock.settimeout(5.0)
        start, answer = time.monotonic(), b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408 ") and 0.4 < time.monotonic() - start < 3.0, answer
        sock.close()


def test_too_many_rows_are_a_400_and_large_answers_are_complete(tmp_path, half_versions):
    base_path = tmp_path / "half"
    base_path.mkdir()
    copy_version_into_place(half_versions[1], base_path, 1)
    with running_server(_options(base_path, max_rows_per_request=1000)) as (port, app):
        client = Client(port)
        status, body = client.predict("half", {"instances": [[1.0, 2.0]] * 1001})
        assert status == 400 and body["error"] == ("the request carries 1001 rows, more than "
                                                   "--max_rows_per_request=1000: split it into smaller requests")
        assert client.predict("half", {"inputs": {"x": [[1.0, 2.0]] * 1001}})[0] == 400
        # 1000 rows of a several-output signature: answered in pieces of 256 rows, the same JSON as one piece.
        x = np.random.default_rng(0).normal(size=(1000, 2)).astype(np.float32)
        k = np.arange(1000, dtype=np.int32)
        status, body = client.predict("half", {"signature_name": "scale_and_count",
                                               "instances": [{"x": row.tolist(), "k": int(n)} for row, n in zip(x, k)]})
        assert status == 200 and len(body["predictions"]) == 1000
        np.testing.assert_allclose([p["scaled"] for p in body["predictions"]], x * k[:, None], rtol=1e-6)
        assert [p["k_squared"] for p in body["predictions"]] == (k * k).tolist()


def test_a_version_copied_in_slowly_is_loaded_once_its_files_are_complete(tmp_path, half_versions):
    base_path = tmp_path / "half"
    base_path.mkdir()
    copy_version_into_place(half_versions[1], base_path, 1)
    with running_server(_options(base_path, max_num_load_retries=0)) as (port, app):
        client = Client(port)
        target = base_path / "2"
        target.mkdir()  # a non-atomic copy: the directory first, then its files, one by one
        shutil.copy(half_versions[2] / "saved_model.pb", target / "saved_model.pb")
        _wait_until(lambda: app.manager.load_errors().get(2) is not None, what="version 2 failing while incomplete")
        time.sleep(3 * POLL_S)  # no more retries (max_num_load_retries=0) while the files stay as they are
        assert app.manager.latest == 1
        shutil.copytree(half_versions[2] / "variables", target / "variables")
        for name in ("assets", "fingerprint.pb"):
            source = half_versions[2] / name
            if source.is_dir():
                shutil.copytree(source, target / name)
            elif source.exists():
                shutil.copy(source, target / name)
        _wait_until(lambda: client.predict("half", {"instances": [[1.0, 2.0]]})[1] == {"predictions": [[3.5, 4.0]]},
                    what="version 2 loaded once complete")

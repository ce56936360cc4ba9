"""tfrl-serve against the attacks of issue 28: a slowloris that reconnects, one client host taking the connection
budget, a version directory that is a symlink to /usr or fails to load, and --model_base_path one level off."""

import asyncio
import http.client
import json
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("uvicorn", reason="the serve extra (uvicorn) is not installed: pip install -e '.[serve]'")
from serving_helpers import Client, copy_version_into_place, hold_reconnecting, running_server, save_half_model
from tfrl.model_server import versions
from tfrl.model_server.batching import ModelThreads
from tfrl.model_server.metrics import ServerMetrics
from tfrl.model_server.options import ServerOptions

POLL_S = 0.1
SLOW_START = b"POST /v1/models/half:predict HTTP/1.1\r\nHost: x\r\n"  # and never the end of the headers
BODY = json.dumps({"instances": [[1.0, 2.0]]}).encode()
REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def half_versions(tmp_path_factory):
    source = tmp_path_factory.mktemp("half_versions")
    return {version: save_half_model(source / str(version)) for version in (1,)}


@pytest.fixture
def base_path(tmp_path, half_versions):
    path = tmp_path / "half"
    path.mkdir()
    copy_version_into_place(half_versions[1], path, 1)
    return path


def _options(base_path, **overrides):
    return ServerOptions(model_name="half", model_base_path=base_path, file_system_poll_wait_seconds=POLL_S,
                         **overrides)


def _slow_connection(port: int, source_ip: str = "127.0.0.1") -> socket.socket:
    """A connection from source_ip (any 127.x.y.z on loopback) that sends half a request's headers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((source_ip, 0))
    sock.connect(("127.0.0.1", port))
    sock.sendall(SLOW_START)
    return sock


def _closed_by_server(sock: socket.socket, timeout_s: float) -> bool:
    sock.settimeout(timeout_s)
    try:
        return sock.recv(4096) == b""
    except ConnectionResetError:  # closed with our unread bytes in its buffer: a reset
        return True
    except socket.timeout:
        return False


def _valid_request(port: int) -> bool:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2.0)
        connection.request("POST", "/v1/models/half:predict", BODY)
        ok = connection.getresponse().status == 200
        connection.close()
        return ok
    except (OSError, http.client.HTTPException):
        return False


def test_a_reconnecting_slowloris_leaves_room_for_a_good_client(base_path):
    """40 slow connections reopened as soon as closed, against max_connections=20 and a long header timeout: the
    good client (fresh connection each time, same IP) is still answered, because the slow connections make room
    rather than the new ones being refused."""
    with running_server(_options(base_path, max_connections=20, header_timeout_seconds=10.0)) as (port, app):
        stop = threading.Event()
        attacker = threading.Thread(target=hold_reconnecting, args=(lambda: _slow_connection(port), 40, stop))
        attacker.start()
        try:
            time.sleep(0.5)  # the budget full of slow connections
            answered = [_valid_request(port) for _ in range(20)]
        finally:
            stop.set()
            attacker.join(10)
    assert sum(answered) >= 18, answered


def test_one_host_over_its_pending_cap_loses_its_connections_first(base_path):
    """An attacker host (127.0.0.2) fills max_connections=100 with slow connections, beyond the per-client cap
    (64); a slow but honest client (127.0.0.3) connects and sends its headers in two parts while the attacker
    opens 120 more: the attacker's connections make the room, the honest one is answered."""
    with running_server(_options(base_path, max_connections=100)) as (port, app):
        attack = [_slow_connection(port, "127.0.0.2") for _ in range(100)]
        time.sleep(0.3)
        honest = _slow_connection(port, "127.0.0.3")
        time.sleep(0.1)
        attack += [_slow_connection(port, "127.0.0.2") for _ in range(120)]
        time.sleep(0.2)
        honest.settimeout(5.0)
        try:
            honest.sendall(b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY))
            answer = honest.recv(4096)
        except OSError as error:
            answer = repr(error).encode()
        for sock in [*attack, honest]:
            sock.close()
    assert answer.startswith(b"HTTP/1.1 200 "), answer


def test_a_host_over_its_pending_cap_and_slow_headers_are_cut_off_by_default(base_path):
    """Defaults: a host's connections without complete headers beyond 64 are closed (once they had 0.25 s) when it
    opens another; the rest are closed by the 2 s header timeout (it was 10 s)."""
    with running_server(_options(base_path)) as (port, app):
        opened_at = time.monotonic()
        attack = [_slow_connection(port, "127.0.0.2") for _ in range(70)]
        time.sleep(0.4)
        attack.append(_slow_connection(port, "127.0.0.2"))
        time.sleep(0.3)
        closed_early = [_closed_by_server(sock, 0.01) for sock in attack]
        assert closed_early == [True] * 7 + [False] * 64, closed_early
        assert all(_closed_by_server(sock, max(0.01, opened_at + 3.0 - time.monotonic())) for sock in attack[7:])
        for sock in attack:
            sock.close()
        assert _valid_request(port)


def _manager(base_path, loader, **overrides) -> versions.VersionManager:
    options = ServerOptions(model_name="half", model_base_path=base_path, file_system_poll_wait_seconds=1.0,
                            **overrides)
    return versions.VersionManager(options, ModelThreads(1), ServerMetrics(), loader=loader)


def test_a_version_symlinked_outside_the_base_path_is_refused_once_and_never_read(tmp_path, base_path, caplog):
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "file").write_text("x")
    (base_path / "50").symlink_to(outside)
    (base_path / "2").symlink_to(base_path / "1")  # a symlink inside the base path is a version
    loaded = []

    def loader(path):
        loaded.append(path.name)
        return versions.load_saved_model(path)

    manager = _manager(base_path, loader)

    async def scans():
        for _ in range(3):
            await manager.scan()
        await manager.stop()

    with caplog.at_level("WARNING"):
        asyncio.run(scans())
    assert loaded == ["2"] and manager.latest == 2
    assert "50" not in json.dumps(manager.status_json())
    refusals = [r.getMessage() for r in caplog.records if "outside --model_base_path" in r.getMessage()]
    assert refusals == [f"ignoring {base_path / '50'}: a symlink to {outside}, outside --model_base_path {base_path} "
                        "(a version directory must be inside the base path)"], refusals


def test_the_scan_reads_the_file_system_off_the_event_loop(base_path, monkeypatch):
    """A slow file system (each listing and each look at a failed version takes 0.3 s) delays scans, not
    requests."""
    (base_path / "3").mkdir()
    (base_path / "3" / "saved_model.pb").write_bytes(b"not a SavedModel")  # fails: looked at again by each scan
    for name in ("version_numbers", "files_fingerprint"):
        original = getattr(versions, name)
        monkeypatch.setattr(versions, name, lambda path, _original=original: (time.sleep(0.3), _original(path))[1])
    with running_server(_options(base_path)) as (port, app):
        client, latencies = Client(port), []
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            start = time.perf_counter()
            assert client.predict("half", {"instances": [[1.0, 2.0]]})[0] == 200
            latencies.append(time.perf_counter() - start)
    assert max(latencies) < 0.15, sorted(latencies)[-5:]


def test_a_failed_version_is_retried_after_growing_delays_and_when_its_files_change(tmp_path, monkeypatch):
    base_path = tmp_path / "half"
    (base_path / "7").mkdir(parents=True)
    (base_path / "7" / "saved_model.pb").write_bytes(b"not a SavedModel")
    clock, attempts = [0.0], []
    monkeypatch.setattr(versions, "_now", lambda: clock[0], raising=False)

    def failing_loader(path):
        attempts.append(clock[0])
        raise ValueError("broken")

    manager = _manager(base_path, failing_loader, max_num_load_retries=5)

    async def one_scan_a_second():
        for second in range(40):
            clock[0] = float(second)
            if second == 20:
                (base_path / "7" / "variables").mkdir()  # the files change: tried at once, retries back
            await manager.scan()
        await manager.stop()

    asyncio.run(one_scan_a_second())
    # 1, 2, 4, 8 s between tries (poll period 1 s), not one try per scan; 16 s after the 5th came the change.
    assert attempts == [0, 1, 3, 7, 15, 20, 21, 23, 27, 35], attempts


def _serve(*args, cwd) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.Popen([sys.executable, str(REPO_ROOT / "scripts" / "serve.py"), "--model_name=m",
                             "--rest_api_port=0", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=cwd)


def test_a_base_path_one_level_off_is_one_line_naming_the_right_one(tmp_path):
    run = tmp_path / "run"
    for model in ("dqn-CartPole-v1", "ppo-CartPole-v1"):
        (run / "saved_models" / model / "1").mkdir(parents=True)
        (run / "saved_models" / model / "1" / "saved_model.pb").write_bytes(b"")
    (run / "config.json").write_text("{}")
    (tmp_path / "fresh_run").mkdir()
    (tmp_path / "fresh_run" / "config.json").write_text("{}")
    models = "run/saved_models/dqn-CartPole-v1 (or run/saved_models/ppo-CartPole-v1)"
    cases = [
        ("run/saved_models/dqn-CartPole-v1/1", "--model_base_path run/saved_models/dqn-CartPole-v1/1 is a SavedModel "
         "version directory: use its parent, --model_base_path=run/saved_models/dqn-CartPole-v1"),
        ("run", f"--model_base_path run is a tfrl run directory: serve one of its models, --model_base_path={models}"),
        ("run/saved_models", "--model_base_path run/saved_models holds model directories, not versions: use "
                             f"--model_base_path={models}"),
        ("fresh_run", "--model_base_path fresh_run is a tfrl run directory without exported models"),
    ]
    (tmp_path / "empty").mkdir()
    waiting = _serve("--model_base_path=empty", cwd=tmp_path)
    processes = [_serve(f"--model_base_path={path}", cwd=tmp_path) for path, _ in cases]
    try:
        for process, (path, expected) in zip(processes, cases):
            _, stderr = process.communicate(timeout=120)
            assert process.returncode == 2, (path, stderr[-2000:])
            assert "Traceback" not in stderr
            assert stderr.strip().splitlines()[-1].startswith(f"serve.py: error: {expected}"), (path, stderr[-1000:])
        line = waiting.stdout.readline()  # an empty base path may get versions later: it serves and waits
        assert line.startswith("serving model m (version None)"), (line, waiting.stderr.read())
        waiting.terminate()  # at once: a SIGTERM before uvicorn's own handlers are in stops it too
        stdout, stderr = waiting.communicate(timeout=60)
    finally:
        for process in [waiting, *processes]:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert waiting.returncode == 0 and "stopped by SIGTERM" in stdout, (waiting.returncode, stderr[-2000:])
    assert "no version under empty yet: waiting for an integer version directory such as empty/1/saved_model.pb" \
        in stderr, stderr[-2000:]

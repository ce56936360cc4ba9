"""Version loading and dynamic batching, over real HTTP on loopback with real SavedModels.

Version v of the "half" model answers y = 0.5 * x + (v + 1) (tests/serving_helpers.py), so every answer
tells which version computed it.
"""

import asyncio
import threading
import time

import numpy as np
import pytest

pytest.importorskip("uvicorn", reason="the serve extra (uvicorn) is not installed: pip install -e '.[serve]'")
from serving_helpers import Client, copy_version_into_place, metric_value, running_server, save_half_model
from tfrl.model_server.batching import Batcher, ModelThreads
from tfrl.model_server.options import BatchingOptions, ServerOptions

POLL_S = 0.1


@pytest.fixture(scope="module")
def half_versions(tmp_path_factory):
    """Saved "half" versions 1 and 2, to be copied into base paths."""
    source = tmp_path_factory.mktemp("half_versions")
    return {version: save_half_model(source / str(version)) for version in (1, 2)}


def _wait_until(condition, timeout_s: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _version_of(prediction) -> int:
    """The version whose offset (v + 1) gives this prediction of x = [1, 2]: y = [0.5 + v + 1, 1 + v + 1]."""
    return int(round(prediction[0][0] - 1.5))


def test_hot_swap_under_concurrent_load_fails_no_request(tmp_path, half_versions):
    base_path = tmp_path / "half"
    base_path.mkdir()
    copy_version_into_place(half_versions[1], base_path, 1)
    options = ServerOptions(model_name="half", model_base_path=base_path, file_system_poll_wait_seconds=POLL_S)
    with running_server(options) as (port, app):
        stop = threading.Event()
        seen: list[list[tuple[int, int]]] = [[] for _ in range(4)]  # per client: (status, version) in order

        def client_loop(i):
            client = Client(port)
            deadline = time.monotonic() + 30
            while not stop.is_set() and time.monotonic() < deadline and len(seen[i]) < 5000:
                status, body = client.predict("half", {"instances": [[1.0, 2.0]]})
                seen[i].append((status, _version_of(body["predictions"]) if status == 200 else -1))
            client.close()

        threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        _wait_until(lambda: all(len(s) >= 20 for s in seen), what="requests on version 1")
        copy_version_into_place(half_versions[2], base_path, 2)
        _wait_until(lambda: all(s and s[-1][1] == 2 for s in seen), what="every client on version 2")
        counts = [len(s) for s in seen]
        _wait_until(lambda: all(len(s) >= c + 20 for s, c in zip(seen, counts)), what="requests after the swap")
        stop.set()
        for thread in threads:
            thread.join(40)

        for answers in seen:
            assert all(status == 200 for status, _ in answers), [a for a in answers if a[0] != 200][:5]
            versions = [version for _, version in answers]
            assert set(versions) == {1, 2}
            assert versions == sorted(versions)  # a client never goes back to version 1 after the swap
        client = Client(port)
        _wait_until(lambda: client.get("/v1/models/half")[1]["model_version_status"][-1]["state"] == "END",
                    what="version 1 unloaded")
        assert [(s["version"], s["state"]) for s in client.get("/v1/models/half")[1]["model_version_status"]] == [
            ("2", "AVAILABLE"), ("1", "END")]
        assert client.predict("half", {"instances": [[1.0, 2.0]]}, "/versions/1")[0] == 404


def test_a_broken_new_version_is_reported_and_the_old_one_keeps_serving(tmp_path, half_versions):
    base_path = tmp_path / "half"
    base_path.mkdir()
    copy_version_into_place(half_versions[1], base_path, 1)
    options = ServerOptions(model_name="half", model_base_path=base_path, file_system_poll_wait_seconds=POLL_S,
                            max_num_load_retries=0)
    with running_server(options) as (port, app):
        client = Client(port)
        broken = base_path.parent / "broken"
        broken.mkdir()
        (broken / "saved_model.pb").write_bytes(b"this is not a SavedModel")
        broken.rename(base_path / "3")
        statuses = lambda: client.get("/v1/models/half")[1]["model_version_status"]  # noqa: E731
        # Version 3 shows as LOADING while its load runs, and END once it has failed.
        _wait_until(lambda: [s["state"] for s in statuses()] == ["END", "AVAILABLE"], what="version 3 tried")
        status, body = client.get("/v1/models/half")
        three, one = body["model_version_status"]
        assert status == 200 and one == {"version": "1", "state": "AVAILABLE",
                                         "status": {"error_code": "OK", "error_message": ""}}
        assert three["version"] == "3" and three["state"] == "END"
        assert three["status"]["error_code"] != "OK" and "failed to load" in three["status"]["error_message"]
        time.sleep(3 * POLL_S)  # later scans: no retry (max_num_load_retries=0), version 1 stays
        assert client.predict("half", {"instances": [[1.0, 2.0]]}) == (200, {"predictions": [[2.5, 3.0]]})
        assert client.predict("half", {"instances": [[1.0, 2.0]]}, "/versions/3")[0] == 404
        copy_version_into_place(half_versions[2], base_path, 2)  # lower than the broken 3, but it loads
        _wait_until(lambda: client.predict("half", {"instances": [[1.0, 2.0]]})[1] == {"predictions": [[3.5, 4.0]]},
                    what="version 2 serving")


def test_not_ready_until_a_first_version_appears(tmp_path, half_versions):
    base_path = tmp_path / "half"
    base_path.mkdir()
    with running_server(ServerOptions(model_name="half", model_base_path=base_path,
                                      file_system_poll_wait_seconds=POLL_S)) as (port, app):
        client = Client(port)
        status, body = client.predict("half", {"instances": [[1.0, 2.0]]})
        assert status == 503 and "model half has no version loaded yet" in body["error"]
        assert client.get("/v1/models/half") == (404, {"error": "Could not find any versions of model half"})
        copy_version_into_place(half_versions[1], base_path, 1)
        _wait_until(lambda: client.predict("half", {"instances": [[1.0, 2.0]]})[0] == 200, what="version 1")
        assert client.predict("half", {"instances": [[1.0, 2.0]]}) == (200, {"predictions": [[2.5, 3.0]]})


def _concurrent_predictions(port: int, n: int) -> list:
    """n requests sent at once from n threads, request i with x = [[i, 2i]]; their (status, body)."""
    results = [None] * n
    barrier = threading.Barrier(n)

    def one(i):
        client = Client(port)
        barrier.wait(timeout=20)
        results[i] = client.predict("half", {"instances": [[float(i), 2.0 * i]]})
        client.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


@pytest.mark.parametrize("enabled", [True, False])
def test_dynamic_batching_merges_concurrent_requests_into_one_model_call(tmp_path, half_versions, enabled):
    base_path = tmp_path / "half"
    base_path.mkdir()
    copy_version_into_place(half_versions[1], base_path, 1)
    # A batch waits (up to 20 s) until it holds 16 rows: the 16 concurrent requests make exactly one model call.
    batching = BatchingOptions(enabled=enabled, max_batch_size=16, batch_timeout_micros=20_000_000)
    with running_server(ServerOptions(model_name="half", model_base_path=base_path, batching=batching,
                                      file_system_poll_wait_seconds=0)) as (port, app):
        results = _concurrent_predictions(port, 16)
        for i, (status, body) in enumerate(results):  # each request got its own row back: 0.5 * [i, 2i] + 2
            assert status == 200 and body == {"predictions": [[0.5 * i + 2, i + 2.0]]}, (i, body)
        metrics = Client(port).get("/monitoring/prometheus/metrics")[1]
        labels = '{model_name="half",signature="serving_default"}'
        calls = metric_value(metrics, ":tfrl:serving:model_calls" + labels)
        rows = metric_value(metrics, ":tfrl:serving:batch_size_sum" + labels)
        assert rows == 16
        assert calls == (1 if enabled else 16)


def test_batcher_splits_outputs_back_and_isolates_a_failing_request():
    """The batcher alone, with a model call that records its batch sizes and rejects negative inputs."""
    batch_sizes = []

    def call(inputs):
        x = inputs["x"]
        batch_sizes.append(len(x))
        if (x < 0).any():
            raise ValueError("negative input")
        return {"double": 2 * x, "first": x[:, 0]}

    async def scenario():
        threads = ModelThreads(1)
        batcher = Batcher(call, BatchingOptions(max_batch_size=4, batch_timeout_micros=10_000_000), threads)
        inputs = [np.array([[1.0, 10.0]]), np.array([[2.0, 20.0], [3.0, 30.0]]), np.array([[-1.0, 0.0]]),
                  np.array([[5.0, 50.0]] * 6)]  # 1 + 2 + 1 rows fill a batch of 4; the 6-row one runs alone
        results = await asyncio.gather(*(batcher.submit({"x": x}, len(x)) for x in inputs), return_exceptions=True)
        threads.shutdown()
        return results

    first, second, negative, big = asyncio.run(scenario())
    np.testing.assert_array_equal(first["double"], [[2.0, 20.0]])
    np.testing.assert_array_equal(second["double"], [[4.0, 40.0], [6.0, 60.0]])
    np.testing.assert_array_equal(second["first"], [2.0, 3.0])
    assert isinstance(negative, ValueError)  # only the faulty request failed
    np.testing.assert_array_equal(big["first"], [5.0] * 6)
    # merged call of 4 rows (failed), then each of its 3 requests alone (1, 2, 1), then the 6-row request alone
    assert batch_sizes == [4, 1, 2, 1, 6]

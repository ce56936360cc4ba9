"""What the tests of tfrl.model_server share: small SavedModels, a server on a loopback port, an HTTP client.

The "half" SavedModel (a tf.Module saved with tf.saved_model.save) has outputs
simple enough to compute by hand, in the spirit of TF Serving's own
half_plus_two test model. Version v computes, with offset = v + 1:

    serving_default  x float32 [-1, 2]                  -> y = 0.5 * x + offset          (one output)
    scale_and_count  x float32 [-1, 2], k int32 [-1]    -> scaled = x * k, total = sum(x) + k, k_squared = k * k
    strings          text string [-1]                   -> length (int32), echo_bytes (the bytes back)
    flip             flags bool [-1, 3]                  -> flipped = not flags                (one output)
"""

from __future__ import annotations

import contextlib
import http.client
import json
import pathlib
import shutil
import threading
import time

import tensorflow as tf

from tfrl.model_server import server
from tfrl.model_server.options import ServerOptions


class _Half(tf.Module):
    def __init__(self, offset: float):
        super().__init__()
        self.scale = tf.Variable(0.5)
        self.offset = tf.Variable(offset)

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
    def half_plus(self, x):
        return {"y": self.scale * x + self.offset}

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x"),
                                  tf.TensorSpec([None], tf.int32, name="k")])
    def scale_and_count(self, x, k):
        k_float = tf.cast(k, tf.float32)
        return {"scaled": x * k_float[:, None], "total": tf.reduce_sum(x, axis=-1) + k_float, "k_squared": k * k}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def strings(self, text):
        return {"length": tf.strings.length(text), "echo_bytes": text}

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.bool, name="flags")])
    def flip(self, flags):
        return {"flipped": tf.logical_not(flags)}


def save_half_model(version_dir: pathlib.Path) -> pathlib.Path:
    """The "half" SavedModel of version int(version_dir.name), offset = version + 1."""
    module = _Half(float(int(version_dir.name) + 1))
    tf.saved_model.save(module, str(version_dir), signatures={
        "serving_default": module.half_plus, "scale_and_count": module.scale_and_count,
        "strings": module.strings, "flip": module.flip})
    return version_dir


def copy_version_into_place(source: pathlib.Path, base_path: pathlib.Path, version: int) -> pathlib.Path:
    """Copies a version directory beside the base path, then renames it in: it appears complete or not at all."""
    staging = base_path.parent / f".staging-{base_path.name}-{version}"
    shutil.copytree(source, staging)
    target = base_path / str(version)
    staging.rename(target)
    return target


@contextlib.contextmanager
def running_server(options: ServerOptions, timeout_s: float = 30.0):
    """A model server on 127.0.0.1:<free port> in a background thread; yields (port, app)."""
    app = server.create_app(options)
    sock = server.listen("127.0.0.1", 0)
    port = sock.getsockname()[1]
    uvicorn_server = server.uvicorn_server(app, graceful_shutdown_timeout_s=10)
    thread = threading.Thread(target=uvicorn_server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not uvicorn_server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield port, app
    finally:
        uvicorn_server.should_exit = True
        thread.join(timeout_s)
        sock.close()


class Client:
    """A keep-alive HTTP/1.1 client of one server; each call returns (status, parsed JSON or text)."""

    def __init__(self, port: int, timeout_s: float = 30.0):
        self.port, self.timeout_s = port, timeout_s
        self._connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)

    def request(self, method: str, path: str, body: bytes | str | dict | None = None,
                headers: dict | None = None) -> tuple[int, object]:
        if isinstance(body, dict):
            body = json.dumps(body)
        try:
            self._connection.request(method, path, body=body, headers=headers or {})
            response = self._connection.getresponse()
            status, data = response.status, response.read()
            if response.will_close:
                self._reconnect()
        except (http.client.HTTPException, ConnectionError):
            self._reconnect()
            raise
        text = data.decode()
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def get(self, path: str):
        return self.request("GET", path)

    def predict(self, model: str, body, suffix: str = ""):
        return self.request("POST", f"/v1/models/{model}{suffix}:predict", body)

    def _reconnect(self) -> None:
        self._connection.close()
        self._connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout_s)

    def close(self) -> None:
        self._connection.close()


def metric_value(exposition: str, line_prefix: str) -> float:
    """The value of the one exposition line starting with line_prefix (metric name and labels); 0 if absent."""
    values = [float(line.rsplit(" ", 1)[1]) for line in exposition.splitlines() if line.startswith(line_prefix)]
    assert len(values) <= 1, (line_prefix, values)
    return values[0] if values else 0.0


def hold_reconnecting(open_connection, connections: int, stop) -> None:
    """An attacker: holds `connections` sockets made by open_connection(), reopening each one the server closes at
    once, until stop (a threading.Event) is set."""
    import selectors

    selector, missing = selectors.DefaultSelector(), connections
    while not stop.is_set():
        for _ in range(missing):
            try:
                selector.register(open_connection(), selectors.EVENT_READ)
                missing -= 1
            except OSError:
                break
        for key, _ in selector.select(timeout=0.02):
            try:
                if key.fileobj.recv(4096):
                    continue
            except OSError:
                pass
            selector.unregister(key.fileobj)
            key.fileobj.close()
            missing += 1
    for key in list(selector.get_map().values()):
        key.fileobj.close()

"""Putting the server together: the app, its first scan of the base path, a listening socket, uvicorn.

scripts/serve.py, the tests and benchmarks/serving_load.py all start servers this way.
"""

from __future__ import annotations

import asyncio
import socket
import time

import uvicorn
from absl import logging

from tfrl.model_server.app import ModelServerApp
from tfrl.model_server.batching import ModelThreads
from tfrl.model_server.metrics import ServerMetrics
from tfrl.model_server.options import ServerOptions
from tfrl.model_server.versions import VersionManager


def create_app(options: ServerOptions) -> ModelServerApp:
    """The app, with the base path scanned once (the latest version loaded) before it serves anything."""
    options.check()
    threads = ModelThreads(options.batching.num_batch_threads)
    metrics = ServerMetrics()
    manager = VersionManager(options, threads, metrics)
    # A loop of its own for the first scan: uvicorn runs the app in another. Nothing made here binds to it.
    asyncio.run(manager.scan())
    return ModelServerApp(manager, threads, metrics)


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0: any free port; see .getsockname())."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def uvicorn_server(app: ModelServerApp, graceful_shutdown_timeout_s: float | None = None) -> uvicorn.Server:
    """uvicorn on the app: httptools and uvloop when installed, lifespan events on, no access log (the app logs).

    On SIGTERM or SIGINT uvicorn stops accepting connections, lets in-flight requests finish (up to
    graceful_shutdown_timeout_s; None: no limit), closes idle keep-alive connections, then runs the
    lifespan shutdown (polling stopped, model threads joined). Connections are bounded (max_connections, a
    header timeout) by the protocol guarded_protocol() makes."""
    options = app.manager.options
    config = uvicorn.Config(app, lifespan="on", access_log=False, log_level="warning", server_header=False,
                            proxy_headers=False, timeout_graceful_shutdown=graceful_shutdown_timeout_s,
                            http=guarded_protocol(options.max_connections, options.header_timeout_seconds,
                                                  app.metrics))
    return uvicorn.Server(config)


def guarded_protocol(max_connections: int, header_timeout_s: float, metrics: ServerMetrics):
    """uvicorn's httptools protocol, bounded against slow or idle clients (uvicorn times out idle keep-alive
    connections, but not a client that sends its headers slowly, nor the number of connections):

      - a connection beyond max_connections is closed as soon as it is accepted;
      - a request's headers must arrive within header_timeout_s of the connection or of the request's first
        byte, else the connection is closed.
    Each is logged (at most once every 10 s, with counts) and counted in the metrics."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedProtocol(HttpToolsProtocol):
        _header_timer = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                _refused.note(f"{len(self.connections) - 1} connections are open (--max_connections="
                              f"{max_connections}): closing new ones")
                metrics.connection_refused("max_connections")
                transport.close()
                return
            self._arm_header_timer()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm_header_timer()

        def on_headers_complete(self) -> None:
            self._cancel_header_timer()
            super().on_headers_complete()

        def connection_lost(self, exc) -> None:
            self._cancel_header_timer()
            super().connection_lost(exc)

        def _arm_header_timer(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(header_timeout_s, self._headers_too_slow)

        def _cancel_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                _timed_out.note(f"a client sent no complete request headers within {header_timeout_s:g} s "
                                "(--header_timeout_seconds): closing its connection")
                metrics.connection_refused("header_timeout")
                self.transport.close()

    return GuardedProtocol


class _RateLimitedWarning:
    """A warning logged at most once every `period_s`, with how many times it happened in between."""

    def __init__(self, period_s: float = 10.0):
        self._period_s, self._last, self._count = period_s, -float("inf"), 0

    def note(self, message: str) -> None:
        self._count += 1
        now = time.monotonic()
        if now - self._last >= self._period_s:
            logging.warning("%s (%d times since the last such warning)", message, self._count)
            self._last, self._count = now, 0


_refused = _RateLimitedWarning()
_timed_out = _RateLimitedWarning()

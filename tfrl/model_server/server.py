"""Putting the server together: the app, its first scan of the base path, a listening socket, uvicorn.

scripts/serve.py, the tests and benchmarks/serving_load.py all start servers this way.
"""

from __future__ import annotations

import asyncio
import socket

import uvicorn

from tfrl.model_server.app import ModelServerApp
from tfrl.model_server.batching import ModelThreads
from tfrl.model_server.connections import guarded_protocol
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
    lifespan shutdown (polling stopped, model threads joined). Connections are bounded (max_connections, per
    client, header and body timeouts) by the protocol connections.guarded_protocol() makes."""
    options = app.manager.options
    config = uvicorn.Config(app, lifespan="on", access_log=False, log_level="warning", server_header=False,
                            proxy_headers=False, timeout_graceful_shutdown=graceful_shutdown_timeout_s,
                            http=guarded_protocol(options.max_connections,
                                                  options.max_pending_connections_per_client,
                                                  options.header_timeout_seconds, app.metrics,
                                                  options.min_body_bytes_per_second))
    return uvicorn.Server(config)

"""Client connections, bounded against slow or many clients (slowloris), inside uvicorn's httptools protocol.

uvicorn closes idle keep-alive connections (timeout_keep_alive, 5 s) but bounds neither a client that sends its
headers slowly nor the number of connections; its limit_concurrency answers 503 once that many connections are
open, which slow clients reach first, so the well-behaved ones get the 503s. Hence GuardedProtocol, the protocol
class uvicorn is given (its `http=` setting), and one ConnectionBudget per server:

  - a request's headers must arrive within header_timeout_s of the connection or of the request's first byte, and
    its body within header_timeout_s of the headers plus its Content-Length at min_body_bytes_per_s;
  - a connection counts as waiting (for its request) until the whole body is in, not only the headers: a flood of
    connections that send complete headers and then trickle their bodies is made room from like one that
    trickles its headers (it was counted as answering requests, never closed, and stalled the server);
  - beyond max_connections open connections, room is made rather than the new connection refused: the connection
    waiting longest for its request is closed (one of a client over its cap below first), else the longest idle
    keep-alive one; the new one is closed only when every other connection is answering a request. A flood of new
    connections (an attacker reopening each one as soon as it is closed) so rotates the pending ones out oldest
    first, and a well-behaved client, whose headers follow its connection at once, is busy (safe) long before
    max_connections newer ones arrive;
  - one client IP may hold at most max_pending_per_client connections without a complete request: when room
    is needed its pending connections go first, so one attacker host cannot take the budget from the others; and
    when it opens another connection, its oldest pending ones beyond the cap are closed, those that had
    EVICTION_GRACE_S to send their request. The grace keeps the cap from closing a good client that shares its
    IP with an attacker (NAT, or loopback in the benchmark) before its headers are read.

Closings are logged (at most once every 10 s per reason, with counts) and counted in
:tfrl:serving:connections_closed{reason}. Measured: docs/reliability.md (benchmarks/serving_slowloris.py).
"""

from __future__ import annotations

import time
from typing import Callable

from absl import logging

from tfrl.model_server.metrics import ServerMetrics

EVICTION_GRACE_S = 0.25
"""How long a connection may wait for its headers before the per-client cap can close it: clients send their
request right after the TCP handshake, so its headers are read well within this, even with the event loop busy
with a flood of connections."""


class ConnectionBudget:
    """Which open connections wait for their request (headers and body; oldest first, overall and per client IP)
    and which are idle between keep-alive requests (longest idle first): what to close when a limit is reached.
    Event loop only."""

    def __init__(self, max_connections: int, max_pending_per_client: int, metrics: ServerMetrics):
        self.max_connections = max_connections
        self.max_pending_per_client = max_pending_per_client
        self._metrics = metrics
        self._open: set = set()
        self._pending: dict = {}  # connection -> loop time it began waiting for headers; insertion order = age
        self._pending_by_client: dict[str, dict] = {}
        self._over_cap: dict[str, None] = {}  # clients with more than max_pending_per_client pending connections
        self._idle: dict = {}  # connection -> None; insertion order = idle since

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def admit(self, connection) -> bool:
        """A new connection: counted as waiting for its headers, after room is made for it. False: it must be closed
        (every other connection is answering a request)."""
        self._open.add(connection)
        self.waiting_for_headers(connection)
        self._close_pending_beyond_cap(connection.client_ip, connection.loop.time())
        if len(self._open) <= self.max_connections:
            return True
        victim = self._victim_to_make_room(connection)
        if victim is not None:
            self._close(victim, "max_connections", lambda: (
                f"{len(self._open)} connections are open (--max_connections={self.max_connections}): closing the one "
                "waiting longest for its request (from a client over --max_pending_connections_per_client first), "
                "else the longest idle"))
            return True
        self.forget(connection)
        self._metrics.connection_refused("max_connections")
        _warnings["max_connections_new"].note(lambda: (
            f"{len(self._open)} connections are open (--max_connections={self.max_connections}), all answering "
            "requests: closing a new one"))
        return False

    def _close_pending_beyond_cap(self, client_ip: str, now: float) -> None:
        """Closes the client's oldest pending connections beyond its cap that had EVICTION_GRACE_S to send headers."""
        own = self._pending_by_client[client_ip]
        while len(own) > self.max_pending_per_client:
            oldest, since = next(iter(own.items()))
            if now - since < EVICTION_GRACE_S:
                return
            self._close(oldest, "max_pending_per_client", lambda: (
                f"client {client_ip} has more than {self.max_pending_per_client} connections without a complete "
                "request (--max_pending_connections_per_client): closing its oldest"))
            own = self._pending_by_client[client_ip]  # the new connection keeps the client's entry

    def _victim_to_make_room(self, connection):
        """The oldest pending connection of a client over its cap (the new connection's own first), else the
        oldest pending one, else the longest idle; never the new one. Any age: room is needed now (the file
        descriptors), and a flood rotates pending connections out oldest first, so a connection is only closed
        after max_connections newer ones, by when a good client's headers have long been read."""
        heavy = connection.client_ip if connection.client_ip in self._over_cap else next(iter(self._over_cap), None)
        candidates = self._pending_by_client[heavy] if heavy is not None else self._pending
        oldest = next(iter(candidates), None)
        return oldest if oldest is not None and oldest is not connection else next(iter(self._idle), None)

    def waiting_for_headers(self, connection) -> None:
        self._forget_state(connection)
        now = connection.loop.time()
        self._pending[connection] = now
        own = self._pending_by_client.setdefault(connection.client_ip, {})
        own[connection] = now
        if len(own) > self.max_pending_per_client:
            self._over_cap[connection.client_ip] = None

    def busy(self, connection) -> None:
        """Its request (headers and body) is in: it is being answered; never closed to make room."""
        self._forget_state(connection)

    def idle(self, connection) -> None:
        """Answered, kept alive, waiting for a next request."""
        if connection in self._open:
            self._forget_state(connection)
            self._idle[connection] = None

    def forget(self, connection) -> None:
        self._forget_state(connection)
        self._open.discard(connection)

    def _forget_state(self, connection) -> None:
        self._idle.pop(connection, None)
        if self._pending.pop(connection, None) is None:
            return
        own = self._pending_by_client[connection.client_ip]
        del own[connection]
        if len(own) <= self.max_pending_per_client:
            self._over_cap.pop(connection.client_ip, None)
        if not own:
            del self._pending_by_client[connection.client_ip]

    def _close(self, connection, reason: str, note) -> None:
        self.forget(connection)  # at once: the next admit counts without it, before its transport is gone
        self._metrics.connection_refused(reason)
        _warnings[reason].note(note)
        connection.transport.close()


def guarded_protocol(max_connections: int, max_pending_per_client: int, header_timeout_s: float,
                     metrics: ServerMetrics, min_body_bytes_per_s: float = 16384.0):
    """uvicorn's httptools protocol class, bounded by one ConnectionBudget (see the module's docstring)."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    budget = ConnectionBudget(max_connections, max_pending_per_client, metrics)

    def close_slow(connection, reason: str, note: Callable[[], str]) -> None:
        connection._timer = None
        if not connection.transport.is_closing():
            _warnings[reason].note(note)
            budget.forget(connection)
            metrics.connection_refused(reason)
            connection.transport.close()

    class GuardedProtocol(HttpToolsProtocol):
        _timer = None  # the header timer, then the body's
        client_ip = ""

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self.client_ip = self.client[0] if self.client else ""
            if not budget.admit(self):
                transport.close()
                return
            self._arm(header_timeout_s, self._headers_too_slow)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._not_pipelined():
                budget.waiting_for_headers(self)
            self._arm(header_timeout_s, self._headers_too_slow)

        def on_headers_complete(self) -> None:
            self._cancel_timer()
            if self._not_pipelined():  # a pipelined request's body waits for uvicorn to read again
                budget.waiting_for_headers(self)  # and for the body: still a connection that makes room if needed
                self._arm_body_timer()
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._cancel_timer()
            if self.cycle is not None and not self.cycle.response_complete:  # (an early error answer is done)
                budget.busy(self)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.cycle.response_complete:  # no pipelined request started
                budget.idle(self)

        def connection_lost(self, exc) -> None:
            self._cancel_timer()
            budget.forget(self)
            super().connection_lost(exc)

        def _not_pipelined(self) -> bool:
            return self.cycle is None or self.cycle.response_complete  # no request of this connection in flight

        def _arm(self, seconds: float, callback, *args) -> None:
            if self._timer is None:
                self._timer = self.loop.call_later(seconds, callback, *args)

        def _arm_body_timer(self) -> None:
            length = next((value for name, value in self.headers or () if name == b"content-length"), None)
            if length is not None and length.isdigit():  # chunked bodies: the app's --body_timeout_seconds alone
                self._arm(header_timeout_s + int(length) / min_body_bytes_per_s, self._body_too_slow, int(length))

        def _cancel_timer(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _headers_too_slow(self) -> None:
            close_slow(self, "header_timeout", lambda: (
                f"a client sent no complete request headers within {header_timeout_s:g} s "
                "(--header_timeout_seconds): closing its connection"))

        def _body_too_slow(self, size: int) -> None:
            close_slow(self, "body_timeout", lambda: (
                f"a client sent no complete request body of {size} bytes within {header_timeout_s:g} s plus "
                f"{min_body_bytes_per_s:g} bytes/s (--header_timeout_seconds, --min_body_bytes_per_second): "
                "closing its connection"))

    return GuardedProtocol


class _RateLimitedWarning:
    """A warning logged at most once every `period_s`, with how many times it happened in between."""

    def __init__(self, period_s: float = 10.0):
        self._period_s, self._last, self._count = period_s, -float("inf"), 0

    def note(self, message: Callable[[], str]) -> None:
        """message: made only when logged, not for each of a flood's closings."""
        self._count += 1
        now = time.monotonic()
        if now - self._last >= self._period_s:
            logging.warning("%s (%d times since the last such warning)", message(), self._count)
            self._last, self._count = now, 0


_warnings = {reason: _RateLimitedWarning() for reason in ("max_connections", "max_connections_new",
                                                          "max_pending_per_client", "header_timeout", "body_timeout")}

"""ServerOptions: what scripts/serve.py's flags set. Names and meanings follow TF Serving's flags."""

from __future__ import annotations

import dataclasses
import pathlib
import re
from typing import Mapping

from tfrl.errors import UsageError

_LABEL = re.compile(r"[A-Za-z0-9_\-]+")


@dataclasses.dataclass(frozen=True)
class BatchingOptions:
    """Dynamic batching (TF Serving's BatchingParameters)."""

    enabled: bool = True
    max_batch_size: int = 128
    """Rows per model call at most; a single request with more rows runs on its own, unsplit."""
    batch_timeout_micros: int = 0
    """How long, in µs, a batch may wait for more rows after its first request arrived. 0: take what is
    queued when a batch thread is free (TF Serving's advice for online serving): batches still form while
    the model is busy, and a lone request waits for nothing."""
    num_batch_threads: int = 1
    """Model calls in flight at once (TF Serving's num_batch_threads). Also bounds unbatched calls."""

    def check(self) -> None:
        if self.max_batch_size < 1:
            raise UsageError(f"--max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.batch_timeout_micros < 0:
            raise UsageError(f"--batch_timeout_micros must be >= 0, got {self.batch_timeout_micros}")
        if self.num_batch_threads < 1:
            raise UsageError(f"--num_batch_threads must be >= 1, got {self.num_batch_threads}")


@dataclasses.dataclass(frozen=True)
class ServerOptions:
    model_name: str
    model_base_path: pathlib.Path
    """The directory holding the integer version directories, e.g. saved_models/lunar."""
    batching: BatchingOptions = BatchingOptions()
    file_system_poll_wait_seconds: float = 1.0
    """Seconds between scans of model_base_path for new versions; 0 scans once, at start-up."""
    max_num_load_retries: int = 5
    """A version that fails to load is tried again this many times, after 1, 2, 4, ... poll periods (at most
    5 minutes), then left in state END until its files change (which also retries it at once)."""
    version_labels: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """Label -> version, e.g. {"stable": 1, "canary": 2}; labelled versions stay loaded beside the latest."""
    max_request_bytes: int = 2 << 20
    """Largest request body, in bytes; a longer one gets 413 before it is read. Parsing a body holds the event
    loop, so the limit also bounds how long one request delays the others (docs/reliability.md)."""
    allow_non_finite_inputs: bool = False
    """Accept NaN/Infinity in float inputs, as TF Serving does. Off by default: a NaN observation gives a
    meaningless action, so it is a 400."""
    max_rows_per_request: int = 10_000
    """Rows (instances, or the inputs' first dimension) one request may carry; more is a 400. Parsing and
    answering a request holds the event loop: the cap bounds how long one request delays the others."""
    max_connections: int = 512
    """Open client connections at most, so that slow or idle clients cannot use up the process's file descriptors.
    Beyond it room is made: the connection waiting longest for its request (headers or body) is closed, else the longest
    idle keep-alive one; a new connection is closed only when all the others are answering requests or are new."""
    max_pending_connections_per_client: int = 64
    """Connections from one client IP that have not sent a complete request (headers and body), at most; beyond it that
    client's oldest such connection is closed, so one host cannot take the whole connection budget. Connections
    answering a request or idle between keep-alive requests do not count."""
    header_timeout_seconds: float = 2.0
    """Time a client has to send a request's headers, from the connection or the request's first byte. Headers are
    one TCP segment sent right after the handshake: 2 s covers a 600 ms satellite round trip with that segment
    lost once and resent (Linux's retransmission timeout is 200 ms + the round trip), and a slow client holds a
    connection 5 times shorter than with the former 10 s (docs/reliability.md)."""
    min_body_bytes_per_second: float = 16384.0
    """The slowest body accepted: a request's body must be in within --header_timeout_seconds of its headers plus
    its Content-Length at this rate, else the connection is closed (100 kB: 8.1 s by default)."""
    body_timeout_seconds: float = 30.0
    """Time a client has to send a request's body once its headers are in; slower is a 408."""

    def check(self) -> None:
        if not self.model_name or "/" in self.model_name or ":" in self.model_name:
            raise UsageError(f"--model_name must be a non-empty name without '/' or ':', got {self.model_name!r}")
        self.batching.check()
        if not self.file_system_poll_wait_seconds >= 0 or self.file_system_poll_wait_seconds == float("inf"):
            raise UsageError(f"--file_system_poll_wait_seconds must be >= 0, got {self.file_system_poll_wait_seconds}")
        if self.max_num_load_retries < 0:
            raise UsageError(f"--max_num_load_retries must be >= 0, got {self.max_num_load_retries}")
        if self.max_request_bytes < 1:
            raise UsageError(f"--max_request_bytes must be >= 1, got {self.max_request_bytes}")
        for name in ("max_rows_per_request", "max_connections", "max_pending_connections_per_client"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name} must be >= 1, got {getattr(self, name)}")
        for name in ("header_timeout_seconds", "body_timeout_seconds", "min_body_bytes_per_second"):
            value = getattr(self, name)
            if not 0 < value < float("inf"):
                unit = "bytes per second" if name == "min_body_bytes_per_second" else "seconds"
                raise UsageError(f"--{name} must be a positive number of {unit}, got {value}")


def parse_version_labels(text: str) -> dict[str, int]:
    """"stable=1,canary=2" -> {"stable": 1, "canary": 2}."""
    labels: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        label, sep, version = item.partition("=")
        if not sep or not _LABEL.fullmatch(label) or not (version.isascii() and version.isdigit()):
            raise UsageError(f"--version_labels: expected LABEL=VERSION[,LABEL=VERSION...] with an integer "
                             f"version, got {item!r}")
        if label in labels:
            raise UsageError(f"--version_labels: label {label!r} given twice")
        labels[label] = int(version)
    return labels

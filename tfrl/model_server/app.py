"""The ASGI app: TF Serving's REST API over one model's version manager. uvicorn runs it.

    POST /v1/models/NAME[/versions/N | /labels/L]:predict    -> {"predictions": ...} or {"outputs": ...}
    GET  /v1/models/NAME[/versions/N | /labels/L]            -> {"model_version_status": [...]}
    GET  /v1/models/NAME[/versions/N | /labels/L]/metadata   -> {"model_spec": ..., "metadata": {"signature_def": ...}}
    GET  /monitoring/prometheus/metrics                       -> Prometheus text

Errors are {"error": "<message>"} with the HTTP status of TF Serving's error code
(see errors.py): 400 bad request, 404 unknown model, version, label or signature,
413 body over --max_request_bytes (refused from Content-Length before reading it, or
once the chunks read pass the limit),
503 no version loaded. Two differences from TF Serving, both deliberate: an
unknown signature and an unknown label get 404 (TF Serving: 400), and NaN or
Infinity in a float input are a 400 unless --allow_non_finite_inputs.

Each request is logged at debug level (`-v 1`): method, path, status, latency.
"""

from __future__ import annotations

import asyncio
import json
import logging as std_logging
import re
import time
from typing import Awaitable, Callable

from absl import logging

from tfrl.model_server import errors
from tfrl.model_server.batching import ModelThreads
from tfrl.model_server.metrics import ServerMetrics
from tfrl.model_server.signatures import DEFAULT_SIGNATURE
from tfrl.model_server.versions import VersionManager

METRICS_PATH = "/monitoring/prometheus/metrics"
_MODEL_PATH = re.compile(r"/v1/models/(?P<name>[^/:]+)"
                         r"(?:/versions/(?P<version>[^/:]+)|/labels/(?P<label>[^/:]+))?"
                         r"(?P<verb>/metadata|:predict|:classify|:regress)?")
_INT64_MAX = (1 << 63) - 1
_JSON_HEADERS = [(b"content-type", b"application/json")]
_ABSL_LOGGER = std_logging.getLogger("absl")  # the logger absl.logging writes to; -v 1 sets it to DEBUG

Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]


class _ClientGone(Exception):
    """The client disconnected before its request body arrived."""


class ModelServerApp:
    """An ASGI app serving one model. lifespan startup starts the polling, shutdown stops it."""

    def __init__(self, manager: VersionManager, threads: ModelThreads, metrics: ServerMetrics):
        self.manager = manager
        self.metrics = metrics
        self._threads = threads
        self._options = manager.options

    async def __call__(self, scope: dict, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.manager.start_polling()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.manager.stop()
                self._threads.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: dict, receive: Receive, send: Send) -> None:
        start = time.perf_counter()
        method, path = scope["method"], scope["path"]
        api, model_label = "other", ""
        try:
            if path == METRICS_PATH:
                if method != "GET":
                    raise errors.invalid_argument(f"Malformed request: {method} {path}")
                await _send(send, 200, self.metrics.exposition().encode(),
                            [(b"content-type", b"text/plain; version=0.0.4")])
                return
            route = _MODEL_PATH.fullmatch(path)
            if route is None:
                if path.startswith("/v1/"):
                    raise errors.invalid_argument(f"Malformed request: {method} {path}")
                raise errors.not_found(f"Not found: {path} (TF Serving's REST API is under /v1/models/)")
            name, verb = route["name"], route["verb"] or ""
            api = {"": "GetModelStatus", "/metadata": "GetModelMetadata"}.get(verb, verb.lstrip(":"))
            if (method != "POST") if verb.startswith(":") else (method != "GET"):
                raise errors.invalid_argument(f"Malformed request: {method} {path}")
            version = _version_number(route["version"]) if route["version"] is not None else None
            if name != self.manager.name:
                if verb == "":
                    raise errors.not_found(f"Could not find any versions of model {name}")
                servable = f"Specific({name}, {version})" if version is not None else f"Latest({name})"
                raise errors.not_found(f"Servable not found for request: {servable}")
            model_label = name
            if verb == "":
                payload = self.manager.status_json(version, route["label"])
            elif verb == "/metadata":
                served = self.manager.resolve(version, route["label"])
                payload = {"model_spec": {"name": name, "signature_name": "", "version": str(served.version)},
                           "metadata": {"signature_def": served.model.signature_defs}}
            elif verb == ":predict":
                body = await self._read_body(scope, receive)
                payload = None
                response = await self._predict(version, route["label"], body)
            else:
                raise errors.ServingError(errors.UNIMPLEMENTED, f"{verb[1:]} is not implemented: use :predict")
            status = errors.OK
            if payload is not None:
                response = json.dumps(payload).encode()
        except errors.ServingError as error:
            # After a 413 uvicorn reads and drops the rest of the body (never buffered) and keeps the connection:
            # closing it early would break clients that send the whole body before reading the answer.
            status, response = error.code, json.dumps({"error": error.message}).encode()
        except _ClientGone:
            return
        except Exception as error:  # a bug or an unexpected TF failure: answer, log, keep serving
            logging.exception("%s %s failed", method, path)
            status, response = errors.INTERNAL, json.dumps({"error": f"Internal error: {error}"}).encode()
        await _send(send, status.http_status, response, _JSON_HEADERS)
        latency_s = time.perf_counter() - start
        self.metrics.request(model_label or "unknown", api, status.name, latency_s * 1e6)
        if _ABSL_LOGGER.isEnabledFor(std_logging.DEBUG):  # cached by the logger: cheaper than a dropped debug call
            logging.debug("%s %s %d %.3f ms", method, path, status.http_status, latency_s * 1e3)

    async def _read_body(self, scope: dict, receive: Receive) -> bytes:
        limit = self._options.max_request_bytes
        for key, value in scope["headers"]:
            if key == b"content-length" and value.isdigit() and int(value) > limit:
                raise errors.ServingError(errors.BODY_TOO_LARGE,
                                          f"request body of {int(value)} bytes is over the limit of {limit} bytes "
                                          "(--max_request_bytes)")
        chunks, size = [], 0
        deadline = asyncio.get_running_loop().time() + self._options.body_timeout_seconds
        while True:
            try:
                message = await asyncio.wait_for(receive(), deadline - asyncio.get_running_loop().time())
            except asyncio.TimeoutError:
                raise errors.ServingError(errors.BODY_TIMEOUT, "the request body did not arrive within "
                                          f"{self._options.body_timeout_seconds:g} s (--body_timeout_seconds)") from None
            if message["type"] == "http.disconnect":
                raise _ClientGone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise errors.ServingError(errors.BODY_TOO_LARGE, f"request body over the limit of {limit} bytes "
                                          "(--max_request_bytes)")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _predict(self, version: int | None, label: str | None, body: bytes) -> bytes:
        served = self.manager.resolve(version, label)  # this request stays on this version, even across a swap
        served.in_flight += 1
        self.metrics.predict_started(self.manager.name, +1)
        try:
            request = _parse_json(body)
            signature_name = request.get("signature_name", DEFAULT_SIGNATURE)
            if not isinstance(signature_name, str):
                raise errors.invalid_argument("'signature_name' key must be a string value.")
            signature_name = signature_name or DEFAULT_SIGNATURE  # "" means the default, as in TF Serving
            signature = served.signature(signature_name)
            parsed = signature.parse_request(request, allow_non_finite=self._options.allow_non_finite_inputs,
                                             may_hold_booleans=b"true" in body or b"false" in body,
                                             max_rows=self._options.max_rows_per_request)
            try:
                outputs = await served.predict(signature, parsed)
            except Exception as error:  # the model rejected inputs that passed the signature's checks
                code = errors.tf_error_code_name(error)
                raise errors.ServingError(errors.INVALID_ARGUMENT if code == "INVALID_ARGUMENT" else errors.INTERNAL,
                                          f"model call failed: {' '.join(str(error).split())[:500]}") from error
            signature.check_answer(outputs)
            return await _joined(signature.response_json(outputs, parsed.row_format, _ANSWER_CHUNK_ROWS))
        finally:
            served.in_flight -= 1
            self.metrics.predict_started(self.manager.name, -1)


# Rows of an answer serialized between two returns to the event loop: a large answer does not hold it.
_ANSWER_CHUNK_ROWS = 256


async def _joined(pieces) -> bytes:
    """The JSON text pieces of an answer, joined, yielding to the event loop between pieces."""
    parts = []
    for piece in pieces:
        parts.append(piece)
        await asyncio.sleep(0)
    return "".join(parts).encode()


def _parse_json(body: bytes) -> dict:
    if not body.strip():
        raise errors.invalid_argument("JSON Parse error: The document is empty")
    try:
        # TF Serving reads UTF-8; decoding first skips json's encoding sniffing. A key given twice is refused: json
        # would keep the last silently, and the two may disagree.
        request = json.loads(body.decode(), object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise errors.invalid_argument(f"JSON Parse error: {error}") from None
    if not isinstance(request, dict):
        raise errors.invalid_argument("JSON Value: the request body must be a JSON object")
    return request


def _unique_keys(pairs: list) -> dict:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen = set()
        duplicate = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise errors.invalid_argument(f"JSON Parse error: the key {duplicate!r} appears twice in one object")
    return result


def _version_number(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) > _INT64_MAX:
        raise errors.invalid_argument(f"Malformed request: failed to convert version {text!r} to an int64")
    return int(text)


async def _send(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})

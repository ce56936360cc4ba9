"""Errors a request can end with: TF Serving's error codes and the HTTP status each maps to.

TF Serving answers an error with `{"error": "<message>"}` and the HTTP status of
its canonical error code (tensorflow_serving/model_servers/http_server.cc):
INVALID_ARGUMENT 400, NOT_FOUND 404, UNAVAILABLE 503, ... The code's name is also
the `status` label of the request counter, as in TF Serving's metrics.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Code:
    name: str  # TF's canonical error code name, e.g. "INVALID_ARGUMENT"
    http_status: int


OK = Code("OK", 200)
INVALID_ARGUMENT = Code("INVALID_ARGUMENT", 400)
NOT_FOUND = Code("NOT_FOUND", 404)
# TF Serving has no body limit; 413 is HTTP's own answer to a body over --max_request_bytes.
BODY_TOO_LARGE = Code("RESOURCE_EXHAUSTED", 413)
UNIMPLEMENTED = Code("UNIMPLEMENTED", 501)
UNAVAILABLE = Code("UNAVAILABLE", 503)
INTERNAL = Code("INTERNAL", 500)
# HTTP's own answer to a body slower than --body_timeout_seconds.
BODY_TIMEOUT = Code("DEADLINE_EXCEEDED", 408)


class ServingError(Exception):
    """A request that cannot be answered; the app sends {"error": message} with code.http_status."""

    def __init__(self, code: Code, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def invalid_argument(message: str) -> ServingError:
    return ServingError(INVALID_ARGUMENT, message)


def not_found(message: str) -> ServingError:
    return ServingError(NOT_FOUND, message)


def tf_error_code_name(error: BaseException) -> str:
    """TF's error code name for an exception (NotFoundError -> NOT_FOUND); UNKNOWN for a non-TF one."""
    import tensorflow as tf

    if isinstance(error, tf.errors.OpError):
        name = type(error).__name__.removesuffix("Error")  # e.g. "InvalidArgument"
        return "".join("_" + c if c.isupper() and i else c for i, c in enumerate(name)).upper()
    return "UNKNOWN"

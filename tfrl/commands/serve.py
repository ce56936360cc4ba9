"""Serve a model's SavedModel versions over TensorFlow Serving's REST API (any SavedModel in TF Serving's layout).

    python scripts/serve.py --model_name=lunar --model_base_path=saved_models/lunar
    curl -d '{"instances": [[0, 0, 0, 0, 0, 0, 0, 0]]}' http://127.0.0.1:8501/v1/models/lunar:predict

serves the highest integer version under --model_base_path, loads newer ones as
they appear, merges concurrent requests into one model call (dynamic batching)
and stops gracefully on SIGTERM. Flags keep TF Serving's names. Needs the serve
extra (pip install 'tfrl[serve]': uvicorn). The `tfrl-serve` console script is
the same program; scripts/serve.py and tfrl-serve share this module so that one
set of flags exists. See tfrl/model_server/__init__.py for the design.
"""

from __future__ import annotations

import math
import pathlib
import signal
import sys

from absl import flags, logging

from tfrl import cli, errors  # no TensorFlow yet: bad flags are reported at once
from tfrl.errors import UsageError

flags.DEFINE_string("model_name", None, "Name of the model in the URLs, /v1/models/<model_name> (required).")
flags.DEFINE_string("model_base_path", None, "Directory of the model's integer version directories, "
                    "e.g. saved_models/lunar holding 1/, 2/, ... (required).")
flags.DEFINE_string("host", "127.0.0.1", "Address to listen on; 0.0.0.0 for every interface.")
flags.DEFINE_integer("rest_api_port", 8501, "Port of the REST API (0: any free port, printed at start).")
flags.DEFINE_bool("enable_batching", True, "Merge concurrent requests into one model call (dynamic batching).")
flags.DEFINE_integer("max_batch_size", 128, "Rows per model call at most, when batching.")
flags.DEFINE_integer("batch_timeout_micros", 0, "How long a batch may wait for more requests after its first "
                     "one, in µs. 0: batches form only from requests that queue while the model is busy.")
flags.DEFINE_integer("num_batch_threads", 1, "Model calls that may run at once.")
flags.DEFINE_float("file_system_poll_wait_seconds", 1.0, "Seconds between scans for new versions; 0: no scans "
                   "after the first.")
flags.DEFINE_integer("max_num_load_retries", 5, "Times a version that failed to load is tried again, after 1, 2, "
                     "4, ... poll periods (and at once when its files change).")
flags.DEFINE_string("version_labels", "", "Version labels for /labels/<label> URLs, e.g. stable=1,canary=2; "
                    "labelled versions stay loaded beside the latest.")
flags.DEFINE_integer("max_request_bytes", 2 << 20, "Largest request body in bytes (413 above it); parsing a body "
                     "holds the server's event loop, so this bounds how long one request delays the others.")
flags.DEFINE_bool("allow_non_finite_inputs", False, "Accept NaN/Infinity in float inputs (TF Serving does); "
                  "off: a 400.")
flags.DEFINE_integer("max_rows_per_request", 10_000, "Rows one request may carry (400 above it): one request's "
                     "parsing holds the event loop, so this bounds how long it delays the others.")
flags.DEFINE_integer("max_connections", 512, "Open client connections at most, so slow clients cannot use up the "
                     "file descriptors; beyond it the connection waiting longest for its request (else the longest "
                     "idle) is closed to make room (logged).")
flags.DEFINE_integer("max_pending_connections_per_client", 64, "Connections from one client IP without a "
                     "complete request (headers and body), at most; beyond it that client's oldest such connection "
                     "is closed (logged).")
flags.DEFINE_float("header_timeout_seconds", 2.0, "Time a client has to send a request's headers, from the "
                   "connection or the request's first byte.")
flags.DEFINE_float("min_body_bytes_per_second", 16384.0, "The slowest request body accepted: it must be in within "
                   "--header_timeout_seconds of the headers plus its Content-Length at this rate (else closed).")
flags.DEFINE_float("body_timeout_seconds", 30.0, "Time a client has to send a request's body (408 after it).")
flags.DEFINE_float("graceful_shutdown_timeout_seconds", 30.0, "On SIGTERM, how long in-flight requests may take "
                   "to finish.")

FLAGS = flags.FLAGS


def server_options():
    """ServerOptions from the flags, checked without TensorFlow."""
    from tfrl.model_server.base_path import check_base_path
    from tfrl.model_server.options import BatchingOptions, ServerOptions, parse_version_labels

    if not FLAGS.model_name or not FLAGS.model_base_path:
        raise UsageError("--model_name and --model_base_path are required, e.g. --model_name=lunar "
                         "--model_base_path=saved_models/lunar")
    base_path = pathlib.Path(FLAGS.model_base_path)
    if not base_path.is_dir():
        raise UsageError(f"--model_base_path: directory {base_path} does not exist")
    check_base_path(base_path)  # a version, run or models directory instead of the versions' one: say which to use
    if not 0 <= FLAGS.rest_api_port <= 65535:
        raise UsageError(f"--rest_api_port must be in [0, 65535], got {FLAGS.rest_api_port}")
    if not FLAGS.graceful_shutdown_timeout_seconds > 0 or not math.isfinite(FLAGS.graceful_shutdown_timeout_seconds):
        raise UsageError(f"--graceful_shutdown_timeout_seconds must be > 0, got "
                         f"{FLAGS.graceful_shutdown_timeout_seconds}")
    options = ServerOptions(
        model_name=FLAGS.model_name, model_base_path=base_path,
        batching=BatchingOptions(enabled=FLAGS.enable_batching, max_batch_size=FLAGS.max_batch_size,
                                 batch_timeout_micros=FLAGS.batch_timeout_micros,
                                 num_batch_threads=FLAGS.num_batch_threads),
        file_system_poll_wait_seconds=FLAGS.file_system_poll_wait_seconds,
        max_num_load_retries=FLAGS.max_num_load_retries, version_labels=parse_version_labels(FLAGS.version_labels),
        max_request_bytes=FLAGS.max_request_bytes, allow_non_finite_inputs=FLAGS.allow_non_finite_inputs,
        max_rows_per_request=FLAGS.max_rows_per_request, max_connections=FLAGS.max_connections,
        max_pending_connections_per_client=FLAGS.max_pending_connections_per_client,
        header_timeout_seconds=FLAGS.header_timeout_seconds, body_timeout_seconds=FLAGS.body_timeout_seconds,
        min_body_bytes_per_second=FLAGS.min_body_bytes_per_second)
    options.check()
    return options


def main(argv):
    cli.no_extra_args(argv)
    options = server_options()
    errors.require_extra("uvicorn", "serve", "serving")
    from tfrl.model_server import server  # imports TensorFlow: seconds

    try:
        sock = server.listen(FLAGS.host, FLAGS.rest_api_port)
    except OSError as error:
        raise UsageError(f"cannot listen on {FLAGS.host}:{FLAGS.rest_api_port}: {error.strerror or error}") from None
    app = server.create_app(options)
    if app.manager.latest is None and app.manager.load_errors():
        version, message = max(app.manager.load_errors().items())
        raise UsageError(f"no version under {options.model_base_path} loads; version {version}: {message}")
    if app.manager.latest is None:
        from tfrl.model_server.base_path import waiting_message

        logging.warning("%s", waiting_message(options.model_base_path))

    # uvicorn handles SIGTERM/SIGINT gracefully, then raises the signal again with the handler it found: this one,
    # so that a shutdown asked for ends with exit code 0 instead of death by signal.
    stopped_by = []
    uvicorn_server = server.uvicorn_server(app, FLAGS.graceful_shutdown_timeout_seconds)

    def stop(signum, frame):
        stopped_by.append(signum)
        uvicorn_server.should_exit = True  # a signal before uvicorn installs its own handlers: stop once started

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    host, port = sock.getsockname()[:2]
    print(f"serving model {options.model_name} (version {app.manager.latest}) at http://{host}:{port}/v1/models/"
          f"{options.model_name}", flush=True)
    uvicorn_server.run(sockets=[sock])
    if stopped_by:
        print(f"stopped by {signal.Signals(stopped_by[0]).name} (graceful shutdown)", flush=True)
    sys.exit(0)


def run() -> None:
    """The tfrl-serve console script and scripts/serve.py."""
    cli.run(main, help_text=lambda: cli.flags_help(__doc__, [("Flags", sys.modules[__name__])]))

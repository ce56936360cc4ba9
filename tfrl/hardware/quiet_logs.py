"""TensorFlow's start-up noise, kept off a launcher's output unless asked for (--tf_logs).

TF's C++ runtime prints lines before its logging is set up, which TF_CPP_MIN_LOG_LEVEL does not reach
("oneDNN custom operations are on", the CPU feature list, absl's "All log messages before
absl::InitializeLog()...", XLA's start-up lines when a function is first compiled), and its Python side logs
INFO lines through absl on every SavedModel or checkpoint write ("Sharding callback duration", "Assets written
to"). `quiet()` drops exactly those:

  - native stderr (file descriptor 2) goes through a pipe; a thread copies every line to the real stderr
    except the lines that match NATIVE_NOISE (every native INFO line, and the CPU-feature warnings). At exit
    the real stderr is put back and the pipe drained.
  - absl records below WARNING that come from TensorFlow's or Keras' own modules are filtered out.
  - matplotlib's INFO lines too (EnvPool imports it, and its first import on a machine logs "generated new
    fontManager"), unless the user set that logger's level.

Everything else, tfrl's logs and errors included, goes through unchanged and in order.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import sys
import threading

# Every INFO line of TF's C++ side (oneDNN, CPU features, XLA's service.cc, dump_mlir_util.cc, device_compiler.h:
# "I1204 15:06:16.046282   10492 service.cc:153] ..."), its start-up warnings, absl's pre-init notice, and the
# error a CUDA build logs where it finds no GPU (CUDA_VISIBLE_DEVICES= on a GPU machine, or none there): the
# banner's device list says so, and other cuInit failures (a driver mismatch) still show.
NATIVE_NOISE = re.compile(rb"^(WARNING: All log messages before absl::InitializeLog\(\)|I\d{4} [\d:.]+ +\d+ \S+:\d+\]|"
                          rb"W\d{4} [\d:.]+ +\d+ (port\.cc|cpu_feature_guard\.cc|cpu_utils\.cc|"
                          rb"tf_tfl_flatbuffer_helpers\.cc)|"  # the LiteRT converter's ignored options
                          rb"E\d{4} [\d:.]+ +\d+ cuda_platform\.cc:\d+\] failed call to cuInit: .*CUDA_ERROR_NO_DEVICE|"
                          rb"To enable the following instructions:|INFO: Created TensorFlow Lite XNNPACK delegate)")
_PACKAGES = (f"{os.sep}tensorflow{os.sep}", f"{os.sep}keras{os.sep}", f"{os.sep}tf_keras{os.sep}")
_installed = False
_terminal = None  # a text stream on the real stderr, once native stderr goes through the filter


class _LibraryInfoFilter(logging.Filter):
    """Drops records below WARNING logged from TensorFlow's or Keras' own files."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not any(p in record.pathname for p in _PACKAGES)


def quiet() -> None:
    """Installs both filters, once per process (see the module docstring)."""
    global _installed
    if _installed:
        return
    _installed = True
    logging.getLogger("absl").addFilter(_LibraryInfoFilter())
    logging.getLogger("tensorflow").addFilter(_LibraryInfoFilter())
    if logging.getLogger("matplotlib").level == logging.NOTSET:
        logging.getLogger("matplotlib").setLevel(logging.WARNING)
    try:
        _filter_native_stderr()
    except OSError:  # no fd 2 to redirect (a detached process): the noise stays, nothing breaks
        pass


SHORT_FORMAT = logging.Formatter("%(levelname).1s %(asctime)s %(message)s", datefmt="%H:%M:%S")


def short_prefixes() -> None:
    """absl's log lines with a short prefix ("I 15:05:44 "), instead of date, microseconds, thread id, file and
    line: a run's lines then fit an 80-column terminal."""
    from absl import logging as absl_logging

    absl_logging.get_absl_handler().setFormatter(SHORT_FORMAT)


def terminal():
    """The real stderr as a text stream: where a progress bar draws (lines through the filter only show once
    they end, and a bar redraws one line with carriage returns)."""
    return _terminal if _terminal is not None else sys.stderr


def _filter_native_stderr() -> None:
    global _terminal
    sys.stderr.flush()
    real_stderr = os.dup(2)
    _terminal = os.fdopen(os.dup(real_stderr), "w", buffering=1)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def pump() -> None:
        with os.fdopen(read_end, "rb") as pipe:
            for line in pipe:
                if not NATIVE_NOISE.match(line):
                    os.write(real_stderr, line)

    thread = threading.Thread(target=pump, name="stderr-filter", daemon=True)
    thread.start()

    def restore() -> None:
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(real_stderr, 2)  # drops the pipe's last write end (child processes aside): the pump sees EOF
        thread.join(timeout=1.0)

    atexit.register(restore)

"""The version manager: which versions of the model are loaded, and which one a request gets.

Policy (TF Serving's default "latest" policy with its availability-preserving
loader): the served "latest" is the highest integer version directory under the
base path that loads. Every file_system_poll_wait_seconds the base path is
scanned; a higher version is loaded in a loading thread, off the request path,
while the current one keeps serving, and then swapped in with one assignment in
the event loop: requests already routed finish on the version they started on,
the next ones get the new one. The old version is then unloaded (state
UNLOADING until its in-flight requests end, then END).

A version that fails to load is reported (logged, and state END with the error in
the status API) and the version served before keeps serving; it is tried again up to
max_num_load_retries times, after 1, 2, 4, ... poll periods (not at every scan), and
at once whenever its files change. Versions named by --version_labels stay loaded
beside the latest, for /labels/<label> requests. A version whose directory
disappears is unloaded.

The file system is only read in threads (the listing and the change checks in the
scan thread, loads in the loading thread), never on the event loop: a huge or slow
directory delays new versions, not requests. A version directory that is a symlink
to a place outside the base path is refused (one warning) and never read.

Version states are TF Serving's: START, LOADING, AVAILABLE, UNLOADING, END.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import os
import pathlib
import time
from typing import Callable

import tensorflow as tf
from absl import logging

from tfrl.model_server import errors
from tfrl.model_server.batching import Batcher, ModelThreads
from tfrl.model_server.metrics import ServerMetrics
from tfrl.model_server.options import ServerOptions
from tfrl.model_server.signatures import Request, Signature, load_signatures, signature_defs_json
from tfrl.models.numerics import non_finite_variable


_warned_paths: set[str] = set()
FINGERPRINT_MAX_ENTRIES = 256
"""Entries files_fingerprint looks at, at most: a SavedModel has a dozen; a huge directory costs no more."""
MAX_RETRY_DELAY_S = 300.0
_now = time.monotonic  # the clock of the retry delays (tests replace it)


def _warn_once(path: pathlib.Path, message: str, *args) -> None:
    if str(path) not in _warned_paths:
        _warned_paths.add(str(path))
        logging.warning(message, path, *args)


def version_numbers(base_path: pathlib.Path) -> list[int]:
    """The integer version directories under base_path, ascending (file system reads: call it off the event loop).
    Other names are ignored, as TF Serving does; with one warning each, a name of digits that are not ASCII ("²",
    "١"), and a symlink to a directory outside base_path (never read: it may be /usr)."""
    base_path = pathlib.Path(base_path)
    try:
        entries = [p for p in base_path.iterdir() if p.name.isdigit() and p.is_dir()]
        resolved_base = base_path.resolve()
    except OSError:
        return []
    versions = []
    for path in entries:
        if not path.name.isascii():
            _warn_once(path, "ignoring %s: a version directory's name must be ASCII digits")
        elif path.is_symlink() and not path.resolve().is_relative_to(resolved_base):
            _warn_once(path, "ignoring %s: a symlink to %s, outside --model_base_path %s (a version directory must "
                       "be inside the base path)", path.resolve(), base_path)
        else:
            versions.append(int(path.name))
    return sorted(versions)


def files_fingerprint(path: pathlib.Path) -> tuple:
    """(entries, bytes, newest mtime) of the version directory and two levels below it, symlinks not followed, at
    most FINGERPRINT_MAX_ENTRIES entries: it changes while a version is being copied in (saved_model.pb, then
    variables/ and its files), and costs a few stats however large the directory is."""
    count, size, newest = 0, 0, 0.0
    directories = [(str(path), 0)]
    while directories and count < FINGERPRINT_MAX_ENTRIES:
        directory, depth = directories.pop()
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    stat = entry.stat(follow_symlinks=False)
                    count, size, newest = count + 1, size + stat.st_size, max(newest, stat.st_mtime)
                    if depth < 1 and entry.is_dir(follow_symlinks=False):
                        directories.append((entry.path, depth + 1))
                    if count >= FINGERPRINT_MAX_ENTRIES:
                        break
        except OSError:
            continue
    return count, size, newest


def _load_and_fingerprint(loader: Callable[[pathlib.Path], "LoadedModel"], path: pathlib.Path):
    """In the loading thread: the fingerprint first (files changed during the load differ from it: tried again)."""
    fingerprint = files_fingerprint(path)
    try:
        return loader(path), fingerprint, None
    except Exception as error:
        return None, fingerprint, error


@dataclasses.dataclass(frozen=True)
class LoadedModel:
    """What the loading thread hands over: a SavedModel and its signatures, warmed up."""

    saved_model: object  # the tf.saved_model.load result: the signatures need it alive (it owns the variables)
    signatures: dict[str, Signature]
    signature_defs: dict  # TF Serving's metadata JSON of the SignatureDef map


def load_saved_model(path: pathlib.Path) -> LoadedModel:
    """Loads a version directory (in the loading thread). Raises what TF raises for a broken SavedModel, and
    ValueError for one whose variables hold NaN or Inf (its every answer would be garbage)."""
    saved_model = tf.saved_model.load(str(path))
    bad = non_finite_variable(saved_model)
    if bad is not None:
        raise ValueError(f"variable {bad!r} holds NaN or Inf")
    signatures = load_signatures(saved_model)
    for signature in signatures.values():
        try:
            signature.warm_up()
        except Exception as error:  # a model may reject zeros; its first real request pays instead
            logging.warning("warm-up of %s signature %r failed: %s", path, signature.name, _one_line(error))
    return LoadedModel(saved_model, signatures, signature_defs_json(path))


class ServedVersion:
    """A loaded version: its signatures and, with batching on, one batcher per signature."""

    def __init__(self, version: int, model: LoadedModel, options: ServerOptions, threads: ModelThreads,
                 metrics: ServerMetrics):
        self.version = version
        self.model = model
        self.in_flight = 0  # requests routed here and not yet answered
        self._options = options
        self._threads = threads
        self._metrics = metrics
        self._batchers: dict[str, Batcher] = {}

    @property
    def signatures(self) -> dict[str, Signature]:
        return self.model.signatures

    def signature(self, name: str) -> Signature:
        if name not in self.model.signatures:
            raise errors.not_found(f"Serving signature name: \"{name}\" not found in signature def "
                                   f"(the model's signatures: {', '.join(sorted(self.model.signatures))})")
        return self.model.signatures[name]

    async def predict(self, signature: Signature, request: Request) -> dict:
        if request.rows is not None and self._options.batching.enabled:
            if signature.name not in self._batchers:
                on_batch = lambda rows: self._metrics.model_call(self._options.model_name, signature.name, rows)
                self._batchers[signature.name] = Batcher(signature, self._options.batching, self._threads, on_batch)
            return await self._batchers[signature.name].submit(request.inputs, request.rows)
        first = next(iter(request.inputs.values()), None)
        rows = request.rows or (len(first) if first is not None and first.ndim else 1)
        self._metrics.model_call(self._options.model_name, signature.name, rows)
        return await self._threads.run(signature, request.inputs)


@dataclasses.dataclass
class VersionStatus:
    state: str = "START"
    error_code: str = "OK"
    error_message: str = ""
    failed_loads: int = 0
    files: tuple | None = None  # files_fingerprint of the version at its last failed load
    retry_at: float = 0.0  # _now() from when a failed version may be tried again

    def to_json(self, version: int) -> dict:
        return {"version": str(version), "state": self.state,
                "status": {"error_code": self.error_code, "error_message": self.error_message}}


class VersionManager:
    """Loads, swaps and unloads the versions of one model; answers which version serves a request."""

    def __init__(self, options: ServerOptions, threads: ModelThreads, metrics: ServerMetrics,
                 loader: Callable[[pathlib.Path], LoadedModel] = load_saved_model):
        self.options = options
        self._threads = threads
        self._metrics = metrics
        self._loader = loader
        self._available: dict[int, ServedVersion] = {}
        self._unloading: list[ServedVersion] = []
        self._statuses: dict[int, VersionStatus] = {}
        self._latest: int | None = None
        self._load_thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="model-load")
        self._scan_thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="model-scan")
        self._scan_lock: asyncio.Lock | None = None
        self._poller: asyncio.Task | None = None

    @property
    def name(self) -> str:
        return self.options.model_name

    @property
    def latest(self) -> int | None:
        return self._latest

    def load_errors(self) -> dict[int, str]:
        return {v: s.error_message for v, s in self._statuses.items() if s.error_code != "OK"}

    # -- scanning the base path ------------------------------------------------------------------------------------
    async def scan(self) -> None:
        """One scan of the base path: load what is new, swap in the new latest, unload what is no longer served."""
        if self._scan_lock is None:
            self._scan_lock = asyncio.Lock()
        async with self._scan_lock:
            failed = [version for version, status in self._statuses.items() if status.failed_loads]
            present, fingerprints = await asyncio.get_running_loop().run_in_executor(
                self._scan_thread, self._look_at_base_path, failed)
            self._retry_changed(fingerprints)
            latest = None
            for version in reversed(present):  # the highest that is loaded or loads; failures fall through
                if version in self._available or (self._may_try(version) and await self._load(version)):
                    latest = version
                    break
            if latest != self._latest:
                logging.info("model %s: serving version %s (was %s)", self.name, latest, self._latest)
            self._latest = latest  # the swap: requests routed from now on get this version
            labelled = {v for v in self.options.version_labels.values() if v in present}
            for version in sorted(labelled - self._available.keys()):
                if self._may_try(version):
                    await self._load(version)
            self._unload_all_but(labelled | {latest})

    def _look_at_base_path(self, failed: list[int]) -> tuple[list[int], dict[int, tuple]]:
        """In the scan thread: the versions present, and the fingerprints of those among them that failed to load."""
        base_path = pathlib.Path(self.options.model_base_path)
        present = version_numbers(base_path)
        return present, {v: files_fingerprint(base_path / str(v)) for v in failed if v in present}

    def _retry_changed(self, fingerprints: dict[int, tuple]) -> None:
        """A failed version whose files changed since is tried again at once, with its retries back (a version
        copied in non-atomically fails while it is incomplete; once it is complete it loads)."""
        for version, fingerprint in fingerprints.items():
            status = self._statuses[version]
            if fingerprint != status.files:
                logging.info("model %s: the files of version %d changed since it failed to load: trying again",
                             self.name, version)
                status.failed_loads, status.retry_at = 0, 0.0

    def _may_try(self, version: int) -> bool:
        """False for a failed version until its retry delay has passed, and for good after max_num_load_retries
        retries (until its files change)."""
        status = self._statuses.get(version)
        if status is None or status.failed_loads == 0:
            return True
        return status.failed_loads <= self.options.max_num_load_retries and _now() >= status.retry_at

    def _unload_all_but(self, kept: set) -> None:
        for version in sorted(self._available.keys() - kept):
            served = self._available.pop(version)
            self._statuses[version].state = "UNLOADING"
            self._unloading.append(served)
        for served in [s for s in self._unloading if s.in_flight == 0]:
            self._unloading.remove(served)
            self._statuses[served.version].state = "END"
            logging.info("model %s: version %d unloaded", self.name, served.version)

    async def _load(self, version: int) -> bool:
        status = self._statuses.setdefault(version, VersionStatus())
        status.state = "LOADING"
        path = pathlib.Path(self.options.model_base_path) / str(version)
        model, status.files, error = await asyncio.get_running_loop().run_in_executor(
            self._load_thread, _load_and_fingerprint, self._loader, path)
        if error is not None:
            self._load_failed(version, status, path, error)
            return False
        self._available[version] = ServedVersion(version, model, self.options, self._threads, self._metrics)
        status.state, status.error_code, status.error_message, status.failed_loads = "AVAILABLE", "OK", "", 0
        logging.info("model %s: version %d loaded (signatures: %s)", self.name, version,
                     ", ".join(sorted(model.signatures)))
        return True

    def _load_failed(self, version: int, status: VersionStatus, path: pathlib.Path, error: Exception) -> None:
        status.failed_loads += 1
        # Retries back off (1, 2, 4, ... poll periods): a broken version is not loaded again at every scan.
        delay_s = min(MAX_RETRY_DELAY_S, self.options.file_system_poll_wait_seconds * 2 ** (status.failed_loads - 1))
        status.retry_at = _now() + delay_s
        status.state, status.error_code, status.error_message = "END", errors.tf_error_code_name(error), (
            f"failed to load {path}: {_one_line(error)}")
        retries_left = self.options.max_num_load_retries + 1 - status.failed_loads
        next_try = (f"next try in {delay_s:g} s, or when its files change" if retries_left > 0 else
                    "no more tries until its files change")
        logging.error("model %s: version %d failed to load (attempt %d of %d, %s; the served version is %s): %s",
                      self.name, version, status.failed_loads, self.options.max_num_load_retries + 1, next_try,
                      self._latest, _one_line(error))

    async def start_polling(self) -> None:
        if self.options.file_system_poll_wait_seconds > 0 and self._poller is None:
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.options.file_system_poll_wait_seconds)
            try:
                await self.scan()
            except Exception:  # a scan must never stop the polling (e.g. the base path unreadable for a while)
                logging.exception("model %s: scanning %s failed", self.name, self.options.model_base_path)

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            try:
                await self._poller
            except asyncio.CancelledError:
                pass
            self._poller = None
        self._load_thread.shutdown(wait=False, cancel_futures=True)
        self._scan_thread.shutdown(wait=False, cancel_futures=True)

    # -- routing ---------------------------------------------------------------------------------------------------
    def _labelled_version(self, label: str) -> int:
        if label not in self.options.version_labels:
            raise errors.not_found(f"Unrecognized servable version label: {label}")
        return self.options.version_labels[label]

    def resolve(self, version: int | None = None, label: str | None = None) -> ServedVersion:
        """The loaded version a request for (version | label | the latest) goes to."""
        if label is not None:
            version = self._labelled_version(label)
        if version is None:
            if self._latest is None:
                failures = "; ".join(f"version {v}: {m}" for v, m in sorted(self.load_errors().items()))
                raise errors.ServingError(errors.UNAVAILABLE, f"model {self.name} has no version loaded"
                                          + (f" ({failures})" if failures else " yet"))
            return self._available[self._latest]
        if version in self._available:
            return self._available[version]
        if self._statuses.get(version, VersionStatus()).state == "LOADING":
            raise errors.ServingError(errors.UNAVAILABLE, f"version {version} of model {self.name} is loading")
        raise errors.not_found(f"Servable not found for request: Specific({self.name}, {version})")

    def status_json(self, version: int | None = None, label: str | None = None) -> dict:
        """TF Serving's GetModelStatusResponse as JSON: every version known, or the one asked for."""
        if label is not None:
            version = self._labelled_version(label)
        if version is None:
            if not self._statuses:
                raise errors.not_found(f"Could not find any versions of model {self.name}")
            return {"model_version_status": [self._statuses[v].to_json(v) for v in sorted(self._statuses,
                                                                                             reverse=True)]}
        if version not in self._statuses:
            raise errors.not_found(f"Could not find version {version} of model {self.name}")
        return {"model_version_status": [self._statuses[version].to_json(version)]}


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 500 else text[:497] + "..."

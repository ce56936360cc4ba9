"""The Ray a run's rollout actors (--actors) live in: a local Ray started for the run, or a cluster joined.

    --ray_address unset   a local Ray with as many CPUs as actors (at least this machine's), no dashboard, its
                          files where Ray puts them (RAY_TMPDIR, else /tmp/ray); stopped when the run ends
    --ray_address=auto    the cluster this machine is a node of (`ray start` ran here)
    --ray_address=H:P     the cluster whose head's GCS listens at H:P (`ray start --head` prints it)
                          A cluster started by `ray start` authenticates with a token (Ray's default): the
                          driver needs RAY_AUTH_MODE=token and the cluster's token (~/.ray/auth_token).
    Ray already connected  (ray.init in the user's program) used as it is, and left running

Each actor asks Ray for one CPU, so a cluster must have `actors` CPUs; the check here says so in one line rather
than leaving the actors waiting for CPUs that never come.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading

from tfrl import errors
from tfrl.errors import UsageError

CONNECT_TIMEOUT_S = 5.0


def check_address(address: str | None, actors: int) -> None:
    """UsageError for a --ray_address without --actors, or one where nothing answers (no Ray import)."""
    if address is None:
        return
    if not actors:
        raise UsageError("--ray_address is where --actors=N run; give --actors too")
    if address == "auto":
        return
    if address.startswith("ray://"):
        raise UsageError(f"--ray_address={address}: Ray Client addresses (ray://) are not supported; give the "
                         "head's GCS address host:port (`ray start --head` prints it) from a node of the cluster")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--ray_address={address!r}: expected host:port (the head's GCS address) or auto")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        raise UsageError(f"--ray_address={address}: nothing answers there ({e.strerror or e}); start a cluster "
                         "with `ray start --head` and give the address it prints") from None


@contextlib.contextmanager
def connected(address: str | None, actors: int):
    """Ray, connected for the block (see the module docstring); UsageError if it cannot be, or has too few CPUs."""
    ray = errors.require_extra("ray", "ray", "--actors")
    if ray.is_initialized():
        _check_cpus(ray, actors, address)
        yield ray
        return
    try:
        with _signal_handlers_kept():
            if address is None:
                ray.init(num_cpus=max(actors, os.cpu_count() or 1), include_dashboard=False,
                         logging_level=logging.ERROR, log_to_driver=False)
            else:
                ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError, ray.exceptions.RayError) as e:
        message = (str(e).splitlines() or [type(e).__name__])[0]
        token = ("; a cluster started by `ray start` asks for its token: set RAY_AUTH_MODE=token (Ray reads the "
                 "token from ~/.ray/auth_token)" if address and os.environ.get("RAY_AUTH_MODE") != "token" else "")
        raise UsageError(f"--ray_address={address}: cannot connect to Ray ({message}){token}") from None
    try:
        _check_cpus(ray, actors, address)
        yield ray
    finally:
        ray.shutdown()


@contextlib.contextmanager
def _signal_handlers_kept():
    """Puts back the Python handlers of SIGTERM and SIGINT after the block: ray.init installs its own native
    failure handler for SIGTERM, which would end the driver (exit 15) instead of letting the run save and stop."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in handlers.items():
            if handler is not None:  # None: a handler not installed from Python, which cannot be put back
                signal.signal(signum, handler)


def _check_cpus(ray, actors: int, address: str | None) -> None:
    cpus = int(ray.cluster_resources().get("CPU", 0))
    if cpus < actors:
        where = "this machine's Ray" if address is None else f"the cluster at {address}"
        raise UsageError(f"--actors={actors}: {where} has {cpus} CPUs, and each actor takes one; add nodes "
                         "(`ray start --address=...`) or ask for fewer actors")

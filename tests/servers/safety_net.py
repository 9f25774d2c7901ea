"""Last-resort cleanup: stop every test server the test process still owns when it goes away.

Context managers and fixtures stop servers in the normal case. This module covers the rest:

- an ``atexit`` hook stops whatever is still registered when the interpreter exits (a crashed
  fixture, a forgotten ``stop()``);
- a SIGTERM to the test process (CI timeout, ``kill``) is turned into ``KeyboardInterrupt``, which
  pytest treats as "interrupted": it still runs fixture teardown, then the ``atexit`` hook runs.

SIGKILL cannot be caught; :mod:`.process` asks the kernel to kill the children in that case.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Protocol


class Stoppable(Protocol):
    """Anything the safety net can stop."""

    def stop(self) -> None:
        """Releases the resource; must be safe to call twice."""


_OWNER_PID = os.getpid()
_LIVE: list[Stoppable] = []
_LOCK = threading.Lock()


def track(resource: Stoppable) -> None:
    """Registers ``resource`` to be stopped at exit unless :func:`untrack` is called first."""
    with _LOCK:
        _LIVE.append(resource)
    _install_sigterm_handler()


@contextmanager
def tracked_start(resource: Stoppable) -> Iterator[None]:
    """Track ``resource`` while it starts; if starting fails, stop it before the error goes on.

    A server wraps every step after its first process exists (readiness checks, setup), so a
    start that fails or is interrupted never leaves that process running.
    """
    track(resource)
    try:
        yield
    except BaseException:
        resource.stop()
        raise


def untrack(resource: Stoppable) -> None:
    """Removes ``resource`` from the safety net, once it was stopped normally."""
    with _LOCK:
        if resource in _LIVE:
            _LIVE.remove(resource)


@atexit.register
def stop_all() -> None:
    """Stops every tracked resource, newest first (servers before the processes they own)."""
    # Forked children (Airflow task runners, multiprocessing) inherit this hook; only the process
    # that started the servers may stop them.
    if os.getpid() != _OWNER_PID:
        return
    with _LOCK:
        resources = list(reversed(_LIVE))
    for resource in resources:
        try:
            resource.stop()
        except Exception as exc:  # best effort at exit: keep stopping the rest
            print(f"tests.servers: failed to stop {resource!r} at exit: {exc}", file=sys.stderr)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    if os.getpid() != _OWNER_PID:  # a forked child: behave as if we never installed a handler
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise KeyboardInterrupt(f"received signal {signum}")


def _install_sigterm_handler() -> None:
    # Only the main thread may set handlers, and a handler someone else installed is left alone.
    if threading.current_thread() is threading.main_thread() and (
        signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    ):
        signal.signal(signal.SIGTERM, _on_sigterm)

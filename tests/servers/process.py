"""Start a server subprocess, wait for it to be ready, and stop it with everything it forked.

Each server runs in its own session (process group) and logs to a file in its workdir, so that
:meth:`ManagedProcess.stop` can signal the whole group and failures can show the log's tail. On
Linux the kernel SIGKILLs the child if the test process dies without cleaning up
(``PR_SET_PDEATHSIG``); the other exits are covered by :mod:`.safety_net`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from .safety_net import track, untrack

_S = TypeVar("_S", bound="StartStop")

T = TypeVar("T")

_POLL_INTERVAL = 0.1
_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


class ServerError(RuntimeError):
    """A test server failed to start, to answer, or to stop."""


def log_tail(path: Path, lines: int = 40) -> str:
    """Returns the last ``lines`` lines of a log file, for error messages."""
    try:
        data = path.read_bytes()[-64 * 1024 :]
    except OSError:
        return f"<no log at {path}>"
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def _die_with_parent(parent_pid: int) -> Callable[[], None]:
    """Builds a preexec hook asking the kernel to SIGKILL the child when its parent dies.

    Python runs it after switching user, which matters: a credential change clears the setting.
    """

    def hook() -> None:
        if _LIBC is not None:
            _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before the hook ran
            os._exit(1)

    return hook


def _user_kwargs(user: str | None) -> dict[str, object]:
    """Popen arguments that run the child as ``user``, when we are root and can switch."""
    if user is None or os.geteuid() != 0:
        return {}
    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def live_group_members(pgid: int) -> list[int]:
    """Pids of the live processes of process group ``pgid``.

    Zombies do not count: they hold no ports or files, and in a container PID 1 may be slow to
    reap orphans (``killpg(pgid, 0)`` would still see them).
    """
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # exited meanwhile
            continue
        state, _ppid, pgrp = stat.rsplit(")", 1)[1].split()[:3]  # fields after "(command)"
        if int(pgrp) == pgid and state not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def run_to_completion(
    argv: Sequence[str | Path],
    *,
    log_path: Path,
    timeout: float,
    user: str | None = None,
) -> None:
    """Runs a one-shot setup command (initdb, javac) with its output appended to ``log_path``.

    Args:
        argv: Command and arguments.
        log_path: File that receives stdout and stderr.
        timeout: Seconds before the command is killed.
        user: OS user to run as, when we are root.

    Raises:
        ServerError: If the command fails or times out; includes the log tail.
    """
    args = [str(a) for a in argv]
    with log_path.open("ab") as log:
        try:
            code = subprocess.run(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
                **_user_kwargs(user),  # type: ignore[arg-type]
            ).returncode
        except subprocess.TimeoutExpired:
            code = None
    if code != 0:
        outcome = f"failed with code {code}" if code is not None else f"timed out after {timeout:.0f}s"
        raise ServerError(f"{' '.join(args)} {outcome}; log {log_path}:\n{log_tail(log_path)}")


class StartStop:
    """``with server:`` starts it and always stops it; subclasses define ``start()`` and ``stop()``."""

    def start(self: _S) -> _S:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self: _S) -> _S:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class OneProcessServer(StartStop):
    """A server that is one :class:`ManagedProcess`; ``start()`` sets :attr:`process` and tracks it."""

    process: ManagedProcess | None = None

    def stop(self) -> None:
        """Stops the process (SIGTERM, then SIGKILL) and the safety net's tracking. Safe twice."""
        try:
            if self.process is not None:
                self.process.stop()
        finally:
            untrack(self)


class ManagedProcess(StartStop):
    """One server subprocess in its own process group, logging to a file.

    Attributes:
        name: Short label used in error messages.
        log_path: File that receives the server's stdout and stderr.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str | Path],
        *,
        log_path: Path,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
        stop_signal: int = signal.SIGTERM,
    ) -> None:
        """Prepares (does not start) the process.

        Args:
            name: Short label used in error messages.
            argv: Command and arguments.
            log_path: File that receives stdout and stderr (appended to).
            cwd: Working directory of the server.
            env: Environment of the server; defaults to ours.
            user: OS user to run as; honoured only when we are root (PostgreSQL refuses root).
            stop_signal: Signal that asks this server for a quick clean shutdown.
        """
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_path = log_path
        self.cwd = cwd
        self.env = dict(env) if env is not None else None
        self.user = user
        self.stop_signal = stop_signal
        self._popen: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"ManagedProcess({self.name!r}, pid={self.pid})"

    @property
    def pid(self) -> int | None:
        """Process id of the server (also its process group id), or None before start."""
        return self._popen.pid if self._popen else None

    @property
    def returncode(self) -> int | None:
        """Exit code once the server has exited, else None."""
        return self._popen.poll() if self._popen else None

    def running(self) -> bool:
        """Tells whether the server process itself is still alive."""
        return self._popen is not None and self._popen.poll() is None

    def group_alive(self) -> bool:
        """Tells whether any process of the server's group is alive (nothing may outlive stop)."""
        return self._popen is not None and bool(live_group_members(self._popen.pid))

    def log_tail(self, lines: int = 40) -> str:
        """Returns the last lines of the server log, for error messages."""
        return log_tail(self.log_path, lines)

    def start(self) -> ManagedProcess:
        """Starts the process in a new session, and registers it with the safety net.

        Returns:
            self, for chaining.

        Raises:
            ServerError: If it was already started.
        """
        if self._popen is not None:
            raise ServerError(f"{self.name} was already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._popen = subprocess.Popen(  # type: ignore[call-overload]
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
                env=self.env,
                start_new_session=True,
                preexec_fn=_die_with_parent(os.getpid()),
                **_user_kwargs(self.user),
            )
        track(self)
        return self

    def wait_until(self, check: Callable[[], T | None], *, timeout: float, what: str) -> T:
        """Polls ``check`` until it returns a truthy value, failing fast if the server dies.

        Exceptions raised by ``check`` mean "not ready yet"; the last one is reported on timeout.

        Args:
            check: Readiness probe, ideally a real client call.
            timeout: Seconds to wait.
            what: What is awaited, for the error message.

        Returns:
            The truthy value returned by ``check``.

        Raises:
            ServerError: If the server exits or ``timeout`` passes; includes the log tail.
        """
        deadline = time.monotonic() + timeout
        last_error: BaseException | None = None
        while True:
            if not self.running():
                raise ServerError(
                    f"{self.name} exited with code {self.returncode} while waiting for {what}; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            try:
                result = check()
            except Exception as exc:  # any failure means "not ready yet"
                last_error, result = exc, None
            if result:
                return result
            if time.monotonic() >= deadline:
                raise ServerError(
                    f"{self.name} not ready after {timeout:.0f}s waiting for {what} "
                    f"(last error: {last_error!r}); log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(_POLL_INTERVAL)

    def stop(self, timeout: float = 15.0) -> None:
        """Stops the whole process group: ``stop_signal``, then SIGKILL after ``timeout``.

        Safe to call more than once and on a process that already exited.

        Args:
            timeout: Seconds to wait for a clean shutdown before killing.

        Raises:
            ServerError: If processes of the group survive even SIGKILL.
        """
        popen = self._popen
        if popen is None:
            return
        try:
            if popen.poll() is None:
                self._signal_group(self.stop_signal)
                try:
                    popen.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self._signal_group(signal.SIGKILL)
                    popen.wait(timeout=10)
            deadline = time.monotonic() + 10
            while self.group_alive():  # the leader is gone; kill anything it forked
                if time.monotonic() >= deadline:
                    raise ServerError(f"processes of {self.name} (pgid {popen.pid}) survived SIGKILL")
                self._signal_group(signal.SIGKILL)
                time.sleep(0.02)
        finally:
            untrack(self)

    def _signal_group(self, sig: int) -> None:
        assert self._popen is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._popen.pid, sig)

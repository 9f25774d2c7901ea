"""Sample every process's command line (and chosen processes' environments) while something runs,
to prove what never appears in argv or in ``/proc/<pid>/environ``."""

from __future__ import annotations

import os
import threading
from pathlib import Path


class CommandLineSampler:
    """Read ``/proc/<pid>/cmdline`` of all processes every ``interval`` seconds in a thread.

    Use as a context manager around a run; ``command_lines`` then holds every distinct command
    line seen, including short-lived children such as spark-submit's JVM and the PySpark driver.
    For each process whose command line contains one of ``environ_of``, ``environments`` holds its
    command line and environment (``/proc/<pid>/environ``), once per process.
    """

    def __init__(self, interval: float = 0.05, environ_of: tuple[str, ...] = ()) -> None:
        self.interval = interval
        self.environ_of = environ_of
        self.command_lines: set[str] = set()
        self.environments: dict[int, tuple[str, dict[str, str]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CommandLineSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        own = os.getpid()
        while not self._stop.is_set():
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit() or int(entry.name) == own:
                    continue
                try:
                    raw = (entry / "cmdline").read_bytes()
                except OSError:
                    continue
                if not raw:
                    continue
                line = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
                self.command_lines.add(line)
                pid = int(entry.name)
                if pid not in self.environments and any(needle in line for needle in self.environ_of):
                    self._read_environment(pid, entry, line)
            self._stop.wait(self.interval)

    def _read_environment(self, pid: int, entry: Path, line: str) -> None:
        try:
            raw = (entry / "environ").read_bytes()
        except OSError:
            return
        pairs = (item.decode("utf-8", "replace").partition("=") for item in raw.split(b"\0") if item)
        self.environments[pid] = (line, {key: value for key, _, value in pairs})

    def environments_of(self, needle: str) -> list[dict[str, str]]:
        """The environments of the sampled processes whose command line contains ``needle``."""
        return [env for line, env in self.environments.values() if needle in line]

    def matching(self, needle: str) -> list[str]:
        return [line for line in self.command_lines if needle in line]

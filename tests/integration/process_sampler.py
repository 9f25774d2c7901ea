"""Sample every process's command line while something runs, to prove what never appears in argv."""

from __future__ import annotations

import os
import threading
from pathlib import Path


class CommandLineSampler:
    """Read ``/proc/<pid>/cmdline`` of all processes every ``interval`` seconds in a thread.

    Use as a context manager around a run; ``command_lines`` then holds every distinct command
    line seen, including short-lived children such as spark-submit's JVM and the PySpark driver.
    """

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.command_lines: set[str] = set()
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
                if raw:
                    self.command_lines.add(raw.replace(b"\0", b" ").decode("utf-8", "replace").strip())
            self._stop.wait(self.interval)

    def matching(self, needle: str) -> list[str]:
        return [line for line in self.command_lines if needle in line]

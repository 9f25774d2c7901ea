"""Which files a process opened in one directory, seen by the kernel (Linux inotify ``IN_OPEN``).

Benchmark #4 must show that a time-travel read touches only the metadata the chosen snapshot
needs. Iceberg's own scan report counts manifests, but only the ones it planned; watching the
table's ``metadata/`` folder while the task runs also catches anything else that is opened
(manifest lists of other snapshots, old ``vN.metadata.json`` files), whoever opens it.
"""

from __future__ import annotations

import ctypes
import os
import struct
from collections import Counter
from pathlib import Path
from types import TracebackType

IN_OPEN = 0x00000020
IN_NONBLOCK = 0o4000
_EVENT_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len
_LIBC = ctypes.CDLL(None, use_errno=True)


class FileOpenWatch:
    """Count the opens of each file directly inside ``directory`` between ``__enter__`` and ``stop``.

    Events queue in the kernel until read, so the watched process may run to completion first.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._fd = -1
        self.opens: Counter[str] = Counter()

    def __enter__(self) -> FileOpenWatch:
        self._fd = _LIBC.inotify_init1(IN_NONBLOCK)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        if _LIBC.inotify_add_watch(self._fd, os.fsencode(self.directory), IN_OPEN) < 0:
            os.close(self._fd)
            raise OSError(ctypes.get_errno(), f"cannot watch {self.directory}")
        return self

    def stop(self) -> Counter[str]:
        """Drain the queued events; returns how often each file name was opened."""
        while True:
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                return self.opens
            offset = 0
            while offset < len(data):
                _wd, _mask, _cookie, length = _EVENT_HEADER.unpack_from(data, offset)
                offset += _EVENT_HEADER.size
                name = data[offset : offset + length].rstrip(b"\0").decode()
                offset += length
                if name:
                    self.opens[name] += 1

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        os.close(self._fd)

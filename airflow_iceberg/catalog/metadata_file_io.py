"""A pyiceberg FileIO for steps that touch metadata files only, without importing pyarrow when it can.

Publish, tag and rollback in the worker read a table's metadata file and, on a SQL, Hive or Glue
catalog, write the next one (over REST the server does both, and the step touches no file).
pyiceberg's default FileIO for ``file://``, ``s3://`` and ``gs://`` is ``PyArrowFileIO``, whose
module imports pyarrow's dataset and compute layers: 0.7 s on a quiet 2-core machine, several
seconds on a busy one, more than the whole step takes otherwise. fsspec writes the same bytes
and costs nothing to import, so a file goes through pyiceberg's ``FsspecFileIO`` when fsspec has
a file system installed for its scheme (always for local files; ``s3fs``, ``gcsfs``, ``adlfs``
for the others), and through ``PyArrowFileIO`` otherwise, imported on first use. Both take the
catalog's own properties (``s3.endpoint``, ``s3.access-key-id`` ...), as pyiceberg documents them.
"""

from __future__ import annotations

import urllib.parse
from functools import cache
from typing import Any

from pyiceberg.io import FileIO, InputFile, OutputFile

#: The ``py-io-impl`` that selects it.
METADATA_FILE_IO = f"{__name__}.MetadataFileIO"


@cache
def fsspec_serves(scheme: str) -> bool:
    """Whether fsspec has a file system installed for ``scheme`` (and pyiceberg's FsspecFileIO knows it)."""
    import fsspec
    from pyiceberg.io.fsspec import SCHEME_TO_FS

    if scheme not in SCHEME_TO_FS:
        return False
    try:
        fsspec.get_filesystem_class(scheme)
    except (ImportError, ValueError):
        return False
    return True


class MetadataFileIO(FileIO):
    """``FsspecFileIO`` where fsspec serves the file's scheme, else ``PyArrowFileIO`` (see the module)."""

    def __init__(self, properties: Any = None) -> None:
        super().__init__(properties=properties or {})
        self._by_kind: dict[str, FileIO] = {}

    def _io(self, location: str) -> FileIO:
        scheme = urllib.parse.urlsplit(location).scheme or "file"
        kind = "fsspec" if fsspec_serves(scheme) else "pyarrow"
        if kind not in self._by_kind:
            if kind == "fsspec":
                from pyiceberg.io.fsspec import FsspecFileIO

                self._by_kind[kind] = FsspecFileIO(self.properties)
            else:
                from pyiceberg.io.pyarrow import PyArrowFileIO

                self._by_kind[kind] = PyArrowFileIO(self.properties)
        return self._by_kind[kind]

    def new_input(self, location: str) -> InputFile:
        return self._io(location).new_input(location)

    def new_output(self, location: str) -> OutputFile:
        return self._io(location).new_output(location)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        path = location if isinstance(location, str) else location.location
        self._io(path).delete(location)

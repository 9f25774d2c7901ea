"""Helpers for the job tests: an independent reader of the warehouse, and short spec builders.

:class:`Lake` reads a table's newest ``vN.metadata.json`` with pyiceberg's ``StaticTable``. It
shares nothing with Spark or the job (no catalog, no session), so a test that checks a write
with it checks what was really committed to storage.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_iceberg.jobs.spec.identifiers import split_identifier
from airflow_iceberg.jobs.spec.reads import ReadSpec
from airflow_iceberg.jobs.spec.sources import Source
from airflow_iceberg.jobs.spec.writes import WriteSpec

CATALOG = "lake"
#: Spark's session catalog, configured as Iceberg's SparkSessionCatalog in the shared session.
SESSION_CATALOG = "spark_catalog"
NAMESPACE = "db"
_VERSION_RE = re.compile(r"^v(\d+)\.metadata\.json$")


class Lake:
    """Read Iceberg tables of the test warehouse straight from their metadata files."""

    def __init__(self, warehouse: Path, catalog: str = CATALOG) -> None:
        self.warehouse = warehouse
        self.catalog = catalog

    def _metadata_dir(self, table: str) -> Path:
        catalog, *namespace, name = split_identifier(table)  # parts as the job reads them
        assert catalog == self.catalog, f"{table} is not in catalog {self.catalog}"
        return self.warehouse.joinpath(*namespace, name, "metadata")

    def version(self, table: str) -> int | None:
        """The newest metadata version number, None when the table was never created."""
        directory = self._metadata_dir(table)
        versions = [
            int(m.group(1)) for p in directory.glob("v*.metadata.json") if (m := _VERSION_RE.match(p.name))
        ]
        return max(versions) if versions else None

    def exists(self, table: str) -> bool:
        return self.version(table) is not None

    def load(self, table: str) -> Any:
        from pyiceberg.table import StaticTable

        version = self.version(table)
        assert version is not None, f"table {table} has no metadata in the warehouse"
        return StaticTable.from_metadata(str(self._metadata_dir(table) / f"v{version}.metadata.json"))

    def state(self, table: str) -> tuple[int | None, int | None]:
        """(metadata version, current snapshot id): equal before and after means nothing was committed."""
        if not self.exists(table):
            return None, None
        return self.version(table), self.current_snapshot_id(table)

    def snapshots(self, table: str) -> list[Any]:
        return sorted(self.load(table).snapshots(), key=lambda s: (s.timestamp_ms, s.sequence_number or 0))

    def current_snapshot_id(self, table: str) -> int | None:
        snapshot = self.load(table).current_snapshot()
        return snapshot.snapshot_id if snapshot else None

    def snapshot(self, table: str, snapshot_id: int) -> Any:
        found = self.load(table).snapshot_by_id(snapshot_id)
        assert found is not None, f"snapshot {snapshot_id} not in {table}"
        return found

    def summary(self, table: str, snapshot_id: int | None = None) -> dict[str, str]:
        """A snapshot's summary as a plain dict, including ``operation``."""
        snapshot = self.snapshot(table, snapshot_id or self.current_snapshot_id(table))  # type: ignore[arg-type]
        return {"operation": snapshot.summary.operation.value, **snapshot.summary.additional_properties}

    def rows(self, table: str, snapshot_id: int | None = None, sort_by: str = "id") -> list[dict[str, Any]]:
        """All rows of the current (or given) snapshot, sorted so tests can compare lists."""
        scan = self.load(table).scan(snapshot_id=snapshot_id) if snapshot_id else self.load(table).scan()
        rows = scan.to_arrow().to_pylist()
        return sorted(rows, key=lambda row: row[sort_by]) if rows and sort_by in rows[0] else rows

    def ids(self, table: str, snapshot_id: int | None = None) -> list[Any]:
        return [row["id"] for row in self.rows(table, snapshot_id)]

    def data_files(self, table: str) -> list[Any]:
        """The current snapshot's data files (pyiceberg DataFile objects)."""
        return [task.file for task in self.load(table).scan().plan_files()]

    def branch_head(self, table: str, branch: str) -> int | None:
        """The snapshot the branch points at, from the table's metadata (None without the branch)."""
        ref = self.load(table).metadata.refs.get(branch)
        return ref.snapshot_id if ref is not None else None

    def files_at(self, table: str, snapshot_id: int) -> list[Any]:
        """The data files of a snapshot (a branch's head, say), as pyiceberg plans them."""
        return [task.file for task in self.load(table).scan(snapshot_id=snapshot_id).plan_files()]

    def schema_names(self, table: str) -> list[str]:
        return [f.name for f in self.load(table).schema().fields]

    def partition_fields(self, table: str) -> list[tuple[str, str]]:
        """(source column, transform) per field of the current partition spec, e.g. ("id", "bucket[4]")."""
        loaded = self.load(table)
        schema = loaded.schema()
        return [(schema.find_field(f.source_id).name, str(f.transform)) for f in loaded.spec().fields]


def write_spec(table: str, mode: str, query: str | None = None, **fields: Any) -> WriteSpec:
    """A validated WriteSpec, from a query unless ``source=`` is given."""
    source = fields.pop("source", None) or Source(query=query)
    return WriteSpec(table=table, mode=mode, source=source, **fields).validated()


def read_spec(table: str, **fields: Any) -> ReadSpec:
    return ReadSpec(table=table, **fields).validated()


def values_query(rows: list[tuple[Any, ...]], columns: str) -> str:
    """``SELECT * FROM VALUES ... AS v(columns)``: small literal data for a write."""
    body = ", ".join("(" + ", ".join(_literal(value) for value in row) + ")" for row in rows)
    return f"SELECT * FROM VALUES {body} AS v({columns})"


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "\\'") + "'"
    return str(value)


def summary_subset(summary: Mapping[str, str], keys: list[str]) -> dict[str, str | None]:
    return {key: summary.get(key) for key in keys}


class _JavaThrowable:
    """Stands for a py4j Java exception: its class's simple name, message and cause."""

    def __init__(self, name: str, message: str, cause: _JavaThrowable | None = None) -> None:
        self._name, self._message, self._cause = name, message, cause

    def getClass(self) -> Any:
        name = self._name
        return type("JavaClass", (), {"getSimpleName": lambda _: name, "getName": lambda _: name})()

    def getMessage(self) -> str:
        return self._message

    def getCause(self) -> _JavaThrowable | None:
        return self._cause


def unknown_outcome() -> Exception:
    """What a commit the catalog did not answer raises through py4j: ``CommitStateUnknownException``."""
    error = RuntimeError("An error occurred while calling o123.sql")
    error.java_exception = _JavaThrowable(  # type: ignore[attr-defined]
        "CommitStateUnknownException",
        "Service failed: 504: Gateway Timeout",
        _JavaThrowable("SocketTimeoutException", "Read timed out"),
    )
    return error

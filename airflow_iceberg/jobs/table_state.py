"""What a job needs to know about a table before and after it acts: existence, snapshots, refs.

Everything here reads Iceberg's metadata tables (``<table>.snapshots``, ``.refs``) through Spark,
so it works the same on every catalog. The errors are the "table in the wrong state" family: the
job reports them as one clear line and exits 1, having written nothing.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from airflow_iceberg.jobs import job_spec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Snapshot-summary counts every write result carries (result key -> Iceberg summary key).
WRITE_SUMMARY_COUNTS = {
    "added_records": "added-records",
    "deleted_records": "deleted-records",
    "total_records": "total-records",
    "added_data_files": "added-data-files",
    "deleted_data_files": "deleted-data-files",
    "total_data_files": "total-data-files",
}


class TableStateError(RuntimeError):
    """The table is not in the state the request needs; nothing was written."""


class TableNotFoundError(TableStateError):
    """The table (or a source or sink table) does not exist."""


class TableAlreadyExistsError(TableStateError):
    """``create`` was asked for a table that already exists."""


class SnapshotNotFoundError(TableStateError):
    """A snapshot id, timestamp, branch or tag points at no snapshot of the table."""


class SchemaMismatchError(TableStateError):
    """The source's columns do not fit the table (or the partition spec) and merge_schema cannot help."""


def table_exists(spark: SparkSession, table: str) -> bool:
    return bool(spark.catalog.tableExists(table))


def require_table(spark: SparkSession, table: str, what: str = "table") -> None:
    """Fail with the table's name rather than Spark's TABLE_OR_VIEW_NOT_FOUND stack trace."""
    if not table_exists(spark, table):
        raise TableNotFoundError(f"{what} {table} does not exist")


def check_table_state(spark: SparkSession, table: str, mode: str) -> None:
    """Fail before any work when the mode needs a table that is missing, or must not find one."""
    exists = table_exists(spark, table)
    if mode == "create" and exists:
        raise TableAlreadyExistsError(
            f"table {table} already exists; use mode 'create_or_replace' or 'replace' to replace it"
        )
    if mode not in ("create", "create_or_replace") and not exists:
        raise TableNotFoundError(
            f"table {table} does not exist; create it first (IcebergCreateTableOperator, mode 'create')"
        )


def ensure_namespace(spark: SparkSession, table: str) -> None:
    """Create the table's namespace if needed, so a first create works on Hive and JDBC catalogs too."""
    namespace = table.rsplit(".", 1)[0]
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")


def table_properties(spark: SparkSession, table: str) -> dict[str, str]:
    return {row.key: row.value for row in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}


def current_snapshot_id(spark: SparkSession, table: str) -> int | None:
    """The id the table's ``main`` branch points at, or None for a table with no snapshot yet."""
    return ref_snapshot_id(spark, table, "main", "BRANCH")


def ref_snapshot_id(spark: SparkSession, table: str, name: str, kind: str) -> int | None:
    rows = (
        spark.table(f"{table}.refs")
        .where((F.col("name") == name) & (F.col("type") == kind))
        .select("snapshot_id")
        .collect()
    )
    return int(rows[0].snapshot_id) if rows else None


def snapshot_exists(spark: SparkSession, table: str, snapshot_id: int) -> bool:
    return bool(spark.table(f"{table}.snapshots").where(F.col("snapshot_id") == snapshot_id).limit(1).count())


def snapshot_summary(spark: SparkSession, table: str, snapshot_id: int) -> dict[str, Any]:
    """Describe one snapshot: id, parent, operation, commit time and the summary counts."""
    rows = spark.table(f"{table}.snapshots").where(F.col("snapshot_id") == snapshot_id).collect()
    if not rows:
        raise SnapshotNotFoundError(f"snapshot {snapshot_id} is not in table {table}")
    return _describe_snapshot(rows[0])


def _describe_snapshot(row: Any) -> dict[str, Any]:
    summary = dict(row.summary or {})
    described: dict[str, Any] = {
        "snapshot_id": int(row.snapshot_id),
        "parent_snapshot_id": int(row.parent_id) if row.parent_id is not None else None,
        "operation": row.operation,
        "committed_at": _iso(row.committed_at),
        "summary": summary,
    }
    for name, key in WRITE_SUMMARY_COUNTS.items():
        described[name] = int(summary[key]) if key in summary else 0
    return described


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.astimezone()
    return value.astimezone(timezone.utc).isoformat()


def find_commit(spark: SparkSession, table: str, commit_id: str, ref: str = "main") -> dict[str, Any] | None:
    """Find the snapshot an earlier run tagged with ``commit_id`` in its summary, if any.

    ``ref`` is the branch the run commits to (``main`` or a write-audit-publish branch). For now
    every snapshot of the table is searched, which finds commits on any branch; restricting the
    search to the ancestors of ``ref`` is a separate change that keeps this signature.
    """
    rows = (
        spark.table(f"{table}.snapshots")
        .where(F.col("summary")[job_spec.COMMIT_ID_PROPERTY] == commit_id)
        .orderBy(F.col("committed_at").desc())
        .limit(1)
        .collect()
    )
    return _describe_snapshot(rows[0]) if rows else None

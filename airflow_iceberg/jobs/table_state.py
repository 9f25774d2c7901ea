"""What a job needs to know about a table before and after it acts: existence, snapshots, refs.

Every question about one table's refs and snapshots (a ref's head, whether a snapshot exists,
its summary, the snapshot a commit id tagged) is answered from the table's metadata already
loaded in the driver, through Iceberg's Java API: a metadata-table query would be a Spark job
(0.3 to 1 s in a fresh JVM) for what the driver already holds. A session with no JVM in this
process (Spark Connect) asks Iceberg's metadata tables (``<table>.refs``, ``.snapshots``)
instead. Both work the same on every catalog. The errors are the "table in the wrong state"
family: the job reports them as one clear line and exits 1, having written nothing.

pyspark is imported only inside the functions that build column expressions: the worker runs
publish, tag and rollback through pyiceberg with this module's errors and the same decisions
(:mod:`airflow_iceberg.operators.metadata_steps`), and must not pay for importing pyspark.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow_iceberg.jobs import connect
from airflow_iceberg.jobs.record_counts import may_count_dead_rows, summary_counts, unknown_count_reason
from airflow_iceberg.jobs.spec.identifiers import quote_identifier, split_identifier
from airflow_iceberg.jobs.spec.request import COMMIT_ID_PROPERTY, committed_at

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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


def iceberg_error_reason(error: BaseException) -> str:
    """The first line of what Iceberg said: the Java exception's class and message under py4j, else the text.

    For messages that put Iceberg's words in context (a failed publish or rollback) rather than
    show them raw.
    """
    java = getattr(error, "java_exception", None)
    text = f"{java.getClass().getSimpleName()}: {java.getMessage()}" if java is not None else str(error)
    return (text.strip().splitlines() or [""])[0]


#: Exceptions after which a commit may or may not have landed (Iceberg's own word for it, in Java
#: and in pyiceberg).
_OUTCOME_UNKNOWN_JAVA = ("CommitStateUnknownException",)
#: pyspark-client errors of the transport, not of the server: the stream broke, the request may have run.
_OUTCOME_UNKNOWN_CONNECT = ("RetriesExceeded", "SparkConnectGrpcException")


def commit_outcome_unknown(error: BaseException) -> bool:
    """Whether a failed commit may still have landed: Iceberg could not tell, or the Connect stream broke.

    Iceberg raises ``CommitStateUnknownException`` when the catalog did not answer the commit
    (a timeout, a 5xx): the new metadata may or may not be current. Over Spark Connect, an error
    of the gRPC stream itself (``RetriesExceeded``, or a bare ``SparkConnectGrpcException`` that
    carries no server-side error class) means the client lost the server, which may have run the
    statement to its end. After either, "nothing was changed" would be a guess. pyiceberg raises
    its own ``CommitStateUnknownException`` (a REST catalog's 5xx on a commit) for the same case.
    """
    if type(error).__name__ in _OUTCOME_UNKNOWN_JAVA:
        return True
    java = getattr(error, "java_exception", None)
    while java is not None:
        if str(java.getClass().getSimpleName()) in _OUTCOME_UNKNOWN_JAVA:
            return True
        java = java.getCause()
    if any(name in str(error) for name in _OUTCOME_UNKNOWN_JAVA):
        return True
    kind = type(error).__name__
    if kind == "RetriesExceeded":
        return True
    error_class = getattr(error, "getErrorClass", lambda: None)()
    return kind in _OUTCOME_UNKNOWN_CONNECT and error_class is None


def metadata_table(table: str, name: str) -> str:
    """The quoted identifier of one of the table's metadata tables (``snapshots``, ``refs``, ...)."""
    return f"{quote_identifier(table)}.{name}"


def table_exists(spark: SparkSession, table: str) -> bool:
    return bool(spark.catalog.tableExists(quote_identifier(table)))


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
    """Create the table's namespace if needed, so a first create works on Hive and JDBC catalogs too.

    A table that exists lives in a namespace that exists: then no command runs (the first SQL
    command of a job costs up to a second in a fresh JVM).
    """
    if table_exists(spark, table):
        return
    namespace = split_identifier(table)[:-1]
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {quote_identifier(namespace)}")


def table_properties(spark: SparkSession, table: str) -> dict[str, str]:
    return {
        row.key: row.value for row in spark.sql(f"SHOW TBLPROPERTIES {quote_identifier(table)}").collect()
    }


def current_snapshot_id(spark: SparkSession, table: str) -> int | None:
    """The id the table's ``main`` branch points at, or None for a table with no snapshot yet."""
    return ref_snapshot_id(spark, table, "main", "BRANCH")


def ref_snapshot_id(spark: SparkSession, table: str, name: str, kind: str) -> int | None:
    """The snapshot id of the ref ``name`` of type ``kind`` (``BRANCH`` or ``TAG``), or None."""
    loaded = driver_table(spark, table)
    if loaded is None:
        from pyspark.sql import functions as F  # imported here: see the module docstring

        rows = (
            spark.table(metadata_table(table, "refs"))
            .where((F.col("name") == name) & (F.col("type") == kind))
            .select("snapshot_id")
            .collect()
        )
        return int(rows[0].snapshot_id) if rows else None
    ref = loaded.refs().get(name)
    if ref is None or str(ref.type().name()) != kind:
        return None
    return int(ref.snapshotId())


def snapshot_exists(spark: SparkSession, table: str, snapshot_id: int) -> bool:
    loaded = driver_table(spark, table)
    if loaded is None:
        from pyspark.sql import functions as F

        snapshots = spark.table(metadata_table(table, "snapshots"))
        return bool(snapshots.where(F.col("snapshot_id") == snapshot_id).limit(1).count())
    return loaded.snapshot(int(snapshot_id)) is not None


def snapshot_summary(spark: SparkSession, table: str, snapshot_id: int) -> dict[str, Any]:
    """Describe one snapshot: id, parent, operation, commit time and the summary counts."""
    loaded = driver_table(spark, table)
    if loaded is not None:
        snapshot = loaded.snapshot(int(snapshot_id))
        if snapshot is None:
            raise SnapshotNotFoundError(f"snapshot {snapshot_id} is not in table {table}")
        return with_checked_counts(spark, table, describe_java_snapshot(spark, snapshot))
    from pyspark.sql import functions as F

    rows = (
        spark.table(metadata_table(table, "snapshots")).where(F.col("snapshot_id") == snapshot_id).collect()
    )
    if not rows:
        raise SnapshotNotFoundError(f"snapshot {snapshot_id} is not in table {table}")
    return with_checked_counts(spark, table, _describe_snapshot(rows[0]))


def with_checked_counts(spark: SparkSession, table: str, described: dict[str, Any]) -> dict[str, Any]:
    """A described snapshot whose counts are None, saying why, where its summary's would be wrong.

    Only a commit that removed data files from a table that had delete files is looked at more
    closely (:func:`~.record_counts.unknown_count_reason`, one Spark job over its manifests).
    """
    summary = described["summary"]
    if "record_count_unknown" in described or not may_count_dead_rows(summary):
        return described
    reason = unknown_count_reason(spark, table, described["snapshot_id"])
    if reason is None:
        return described
    print(f"airflow-iceberg: record_count_change of snapshot {described['snapshot_id']} is unknown: {reason}")
    return {**described, **summary_counts(summary, reason)}


def _describe_snapshot(row: Any) -> dict[str, Any]:
    summary = dict(row.summary or {})
    return {
        "snapshot_id": int(row.snapshot_id),
        "parent_snapshot_id": int(row.parent_id) if row.parent_id is not None else None,
        "operation": row.operation,
        "committed_at": _iso(row.committed_at),
        "summary": summary,
        **summary_counts(summary),
    }


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.astimezone()
    return value.astimezone(timezone.utc).isoformat()


def iceberg_table(spark: SparkSession, table: str) -> Any:
    """The table's Iceberg ``Table`` object (through py4j), refreshed so it shows the catalog's latest state.

    ``Spark3Util.loadIcebergTable`` goes through the same Spark catalog the job writes with (so
    any catalog type, including the session catalog); its tables are cached, hence the refresh.
    """
    loaded = spark.sparkContext._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, quote_identifier(table)
    )
    loaded.refresh()
    return loaded


def has_driver_jvm(spark: SparkSession) -> bool:
    """Tells whether the session's JVM is reachable from here (py4j); a Spark Connect session's is not."""
    return not connect.is_connect(spark)


def driver_table(spark: SparkSession, table: str) -> Any | None:
    """:func:`iceberg_table`, or None when the session has no JVM in this process (Spark Connect)."""
    return iceberg_table(spark, table) if has_driver_jvm(spark) else None


def ref_head(spark: SparkSession, table: str, ref: str = "main") -> int | None:
    """The snapshot id ``ref`` (a branch, ``main`` by default) points at; None if it has none yet."""
    if connect.is_connect(spark):  # no py4j: the refs metadata table
        return connect.ref_head(spark, table, ref)
    head = iceberg_table(spark, table).snapshot(ref)
    return int(head.snapshotId()) if head is not None else None


def branch_heads(spark: SparkSession, table: str) -> dict[str, int]:
    """Every branch of the table (``main`` among them) and the snapshot it points at."""
    loaded = driver_table(spark, table)
    if loaded is None:
        return connect.branch_heads(spark, table)
    return {str(name): int(ref.snapshotId()) for name, ref in loaded.refs().items() if ref.isBranch()}


def is_ancestor(spark: SparkSession, table: str, ancestor_id: int, snapshot_id: int) -> bool:
    """Whether ``ancestor_id`` is ``snapshot_id`` or one of its ancestors (parent, its parent, ...)."""
    loaded = driver_table(spark, table)
    if loaded is None:
        return connect.is_ancestor(spark, table, ancestor_id, snapshot_id)
    util = spark.sparkContext._jvm.org.apache.iceberg.util.SnapshotUtil
    return bool(util.isAncestorOf(loaded, int(snapshot_id), int(ancestor_id)))


#: Snapshots :func:`find_commit_in_branches` reads one by one through py4j (well under a millisecond
#: each) before it lets a Spark job find the tagged snapshots of a longer history instead.
ANCESTOR_WALK_LIMIT = 200


def find_commit(spark: SparkSession, table: str, commit_id: str, ref: str = "main") -> dict[str, Any] | None:
    """The snapshot tagged with ``commit_id`` among ``ref``'s ancestors (its head, parent, ...), if any.

    Only the history of the ref counts: a snapshot that a rollback (or a replace) took out of
    that history no longer holds its rows, so a task looking for its earlier commit must not
    find it there, and must write again. See :func:`find_commit_in_branches` for how it is read.
    """
    found = find_commit_in_branches(spark, table, commit_id, [ref])
    return found[1] if found is not None else None


def find_commit_in_branches(
    spark: SparkSession, table: str, commit_id: str, branches: Sequence[str]
) -> tuple[str, dict[str, Any]] | None:
    """The first of ``branches`` whose history holds the snapshot tagged ``commit_id``: (branch, snapshot).

    The walk reads the table metadata already in the driver, newest first, so the usual cases (a
    retry's commit near the head, a write's own commit at it) need no Spark job; a branch made
    from another shares its history, which is read once. Past :data:`ANCESTOR_WALK_LIMIT`
    snapshots read in all, the ``snapshots`` metadata table names the tagged snapshots and
    Iceberg checks each branch's ancestry. Over Spark Connect (no py4j) the metadata tables
    answer (:func:`.connect.find_commit_in_branches`).
    """
    if connect.is_connect(spark):
        found = connect.find_commit_in_branches(spark, table, commit_id, branches)
        return (found[0], snapshot_summary(spark, table, found[1])) if found is not None else None
    loaded = iceberg_table(spark, table)
    heads = [(name, head) for name in branches if (head := loaded.snapshot(name)) is not None]
    util = spark.sparkContext._jvm.org.apache.iceberg.util.SnapshotUtil
    seen: set[int] = set()
    for name, head in heads:
        ancestors = util.ancestorsBetween(loaded, head.snapshotId(), None).iterator()
        while ancestors.hasNext():
            if len(seen) >= ANCESTOR_WALK_LIMIT:
                return _find_tagged(spark, loaded, table, commit_id, heads)
            snapshot = ancestors.next()
            snapshot_id = int(snapshot.snapshotId())
            if snapshot_id in seen:  # the rest of this history was read with an earlier branch
                break
            seen.add(snapshot_id)
            if snapshot.summary().get(COMMIT_ID_PROPERTY) == commit_id:
                return name, with_checked_counts(spark, table, describe_java_snapshot(spark, snapshot))
    return None


def _find_tagged(
    spark: SparkSession, loaded: Any, table: str, commit_id: str, heads: Sequence[tuple[str, Any]]
) -> tuple[str, dict[str, Any]] | None:
    """A long history: one Spark job names the snapshots tagged ``commit_id``, Iceberg checks ancestry."""
    from pyspark.sql import functions as F

    tagged = (
        spark.table(metadata_table(table, "snapshots"))
        .where(F.col("summary")[COMMIT_ID_PROPERTY] == commit_id)
        .orderBy(F.col("committed_at").desc())
        .select("snapshot_id")
        .collect()
    )
    util = spark.sparkContext._jvm.org.apache.iceberg.util.SnapshotUtil
    for name, head in heads:
        for row in tagged:
            if util.isAncestorOf(loaded, head.snapshotId(), int(row.snapshot_id)):
                described = describe_java_snapshot(spark, loaded.snapshot(int(row.snapshot_id)))
                return name, with_checked_counts(spark, table, described)
    return None


def describe_java_snapshot(spark: SparkSession, snapshot: Any) -> dict[str, Any]:
    """Describe an Iceberg Java ``Snapshot`` like :func:`snapshot_summary` describes a metadata-table row.

    The snapshot comes over as one JSON text (Iceberg's ``SnapshotParser``, the form metadata.json
    holds it in) rather than field by field: walking its summary map through py4j costs two
    round trips per entry.
    """
    data = json.loads(spark.sparkContext._jvm.org.apache.iceberg.SnapshotParser.toJson(snapshot))
    summary = {str(key): str(value) for key, value in data.get("summary", {}).items()}
    operation = summary.pop("operation", None)  # metadata.json keeps it among the summary entries
    parent = data.get("parent-snapshot-id")
    return {
        "snapshot_id": int(data["snapshot-id"]),
        "parent_snapshot_id": int(parent) if parent is not None else None,
        "operation": operation,
        "committed_at": committed_at(int(data["timestamp-ms"])),
        "summary": summary,
        **summary_counts(summary),
    }

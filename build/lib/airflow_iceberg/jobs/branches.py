"""Write-audit-publish: writing to a branch, and tagging snapshots.

A write, merge or delete with ``branch`` lands on that branch only: readers of ``main`` see
nothing until :func:`~airflow_iceberg.jobs.publish.publish_branch` fast-forwards ``main`` to the
audited snapshot.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from airflow_iceberg.jobs import action_specs
from airflow_iceberg.jobs.job_spec import quote_identifier, quote_name, split_identifier
from airflow_iceberg.jobs.retry_markers import record_snapshot, recorded_snapshot
from airflow_iceberg.jobs.snapshot_history import TableHistory, load_history
from airflow_iceberg.jobs.table_state import (
    SnapshotNotFoundError,
    TableStateError,
    ref_snapshot_id,
    require_table,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def branch_identifier(table: str, branch: str | None) -> str:
    """The quoted identifier Spark writes to: ``table.branch_<name>`` for a branch, else the table."""
    return (
        f"{quote_identifier(table)}.{quote_name(f'branch_{branch}')}" if branch else quote_identifier(table)
    )


@contextmanager
def branch_for_commit(spark: SparkSession, table: str, branch: str | None) -> Iterator[None]:
    """Run the block with ``branch`` existing (made from ``main`` if missing); undo that if the block fails.

    The commit that fails in the block leaves the table as it was, and so does this: a branch it
    created is dropped again, as long as it still points where it was created (no commit on it).
    """
    if not branch:
        yield
        return
    created_at = ensure_branch(spark, table, branch)
    try:
        yield
    except BaseException:
        if created_at is not None and ref_snapshot_id(spark, table, branch, "BRANCH") == created_at:
            spark.sql(f"ALTER TABLE {quote_identifier(table)} DROP BRANCH IF EXISTS {branch}")
        raise


def ensure_branch(spark: SparkSession, table: str, branch: str) -> int | None:
    """Create ``branch`` from ``main``'s current snapshot unless it exists; return that snapshot if new."""
    if ref_snapshot_id(spark, table, branch, "BRANCH") is not None:
        return None
    if ref_snapshot_id(spark, table, branch, "TAG") is not None:
        raise TableStateError(
            f"{branch!r} is a tag of table {table}, not a branch: choose another branch name"
        )
    if ref_snapshot_id(spark, table, "main", "BRANCH") is None:
        raise SnapshotNotFoundError(
            f"table {table} has no snapshot on main to branch {branch!r} from: write to main first"
        )
    spark.sql(f"ALTER TABLE {quote_identifier(table)} CREATE BRANCH IF NOT EXISTS {branch}")
    print(f"airflow-iceberg: created branch {branch} of {table} at main's current snapshot", flush=True)
    return ref_snapshot_id(spark, table, branch, "BRANCH")


def procedure_call(spark: SparkSession, table: str, procedure: str, arguments: dict[str, str]) -> list[Any]:
    """``CALL <catalog>.system.<procedure>(table => '<ns.table>', ...)``; returns the output rows.

    The procedure parses its ``table`` string as a multipart identifier, so the string holds the
    quoted parts (```sales-eu`.`Orders```), itself escaped as a SQL string literal. ``arguments``
    values are SQL literals the caller built from validated input.
    """
    parts = split_identifier(table)
    catalog, name = (parts[0], parts[1:]) if len(parts) > 2 else (spark.catalog.currentCatalog(), parts)
    named = ", ".join(
        [
            f"table => {sql_string(quote_identifier(name))}",
            *(f"{key} => {value}" for key, value in arguments.items()),
        ]
    )
    return spark.sql(f"CALL {quote_name(catalog)}.system.{procedure}({named})").collect()


def sql_string(value: str) -> str:
    """A Spark SQL string literal holding ``value`` exactly."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def tag_snapshot(
    spark: SparkSession,
    spec: action_specs.TagSpec,
    commit_id: str | None = None,
    reuse_commit: bool = False,
) -> dict[str, Any]:
    """``ALTER TABLE ... CREATE [OR REPLACE] TAG name AS OF VERSION id [RETAIN n DAYS]``, once per task.

    With ``snapshot_id`` every try tags that snapshot, so a retry sets the same tag again.
    Without one the tag names ``main``'s current snapshot as the first try saw it: that try
    records it in a marker tag (:mod:`.retry_markers`) and every retry tags the recorded
    snapshot, not whatever ``main`` points at by then. A tag already on the snapshot (with the
    asked retention) is left as it is (``already_tagged``).
    """
    table = spec.table
    require_table(spark, table)
    history = load_history(spark, table)
    if history.branch(spec.tag) is not None:
        raise TableStateError(
            f"{spec.tag!r} is a branch of table {table}, not a tag: nothing changed; choose another tag name"
        )
    snapshot_id = spec.snapshot_id
    if snapshot_id is None:
        snapshot_id = _snapshot_to_tag(spark, history, commit_id if reuse_commit else None)
    elif not history.has_snapshot(snapshot_id):
        raise SnapshotNotFoundError(
            f"snapshot_id {snapshot_id} is not a snapshot of table {table} (never made, or expired): "
            f"tag {spec.tag!r} was not set; nothing changed"
        )
    result = {"table": table, "tag": spec.tag, "snapshot_id": snapshot_id, "retain_days": spec.retain_days}
    current = history.refs.get(spec.tag)
    retention_ms = spec.retain_days * 86_400_000 if spec.retain_days is not None else None
    if (
        current is not None
        and current.snapshot_id == snapshot_id
        and (retention_ms in (None, current.max_ref_age_ms) or not spec.replace)
    ):
        print(f"airflow-iceberg: tag {spec.tag} of {table} already names snapshot {snapshot_id}", flush=True)
        return {**result, "already_tagged": True}
    if current is not None and not spec.replace:
        raise TableStateError(
            f"tag {spec.tag!r} of table {table} already names snapshot {current.snapshot_id}, not "
            f"{snapshot_id}, and replace=False: nothing changed. Use another tag name, or replace=True"
        )
    verb = "CREATE OR REPLACE TAG" if spec.replace else "CREATE TAG"
    sql = f"ALTER TABLE {quote_identifier(table)} {verb} {spec.tag} AS OF VERSION {int(snapshot_id)}"
    if spec.retain_days is not None:
        sql += f" RETAIN {int(spec.retain_days)} DAYS"
    spark.sql(sql)
    return {**result, "already_tagged": False}


def _snapshot_to_tag(spark: SparkSession, history: TableHistory, commit_id: str | None) -> int:
    """``main``'s head, recorded for this task's retries; or what an earlier try recorded."""
    recorded = recorded_snapshot(history, commit_id)
    if recorded is not None:
        print(
            f"airflow-iceberg: tagging snapshot {recorded} of {history.table}, which an earlier try of this "
            "task resolved (main may have moved since)",
            flush=True,
        )
        return recorded
    head = history.branch("main")
    if head is None:
        raise SnapshotNotFoundError(f"table {history.table} has no snapshot to tag; nothing changed")
    return record_snapshot(spark, history, commit_id, head) if commit_id else head

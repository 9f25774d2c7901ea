"""Table upkeep through Iceberg's Spark procedures: expire, compact, rewrite manifests and deletes.

Each returns what the procedure did (its output row: files rewritten, added and removed, bytes)
plus the table's ``main`` snapshot before and after, so the XCom says what changed. Rolling back,
which must stay exactly-once across retries, is :mod:`.rollback`.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow_iceberg.jobs import action_specs
from airflow_iceberg.jobs.branches import procedure_call, sql_string
from airflow_iceberg.jobs.merges import check_expressions
from airflow_iceberg.jobs.table_state import (
    metadata_table,
    ref_snapshot_id,
    require_table,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def sql_timestamp(epoch_ms: int) -> str:
    """A ``TIMESTAMP`` literal with an explicit UTC zone, so the session time zone cannot shift it."""
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc)
    return f"TIMESTAMP '{moment.strftime('%Y-%m-%d %H:%M:%S')}.{epoch_ms % 1000:03d}Z'"


def sql_map(options: dict[str, str]) -> str:
    return "map(" + ", ".join(f"{sql_string(k)}, {sql_string(v)}" for k, v in options.items()) + ")"


def _snapshot_count(spark: SparkSession, table: str) -> int:
    return int(spark.table(metadata_table(table, "snapshots")).count())


def _run(spark: SparkSession, table: str, procedure: str, arguments: dict[str, str]) -> dict[str, Any]:
    require_table(spark, table)
    before = ref_snapshot_id(spark, table, "main", "BRANCH")
    rows = procedure_call(spark, table, procedure, arguments)
    return {
        "table": table,
        "procedure": procedure,
        **(rows[0].asDict() if rows else {}),
        "previous_snapshot_id": before,
        "snapshot_id": ref_snapshot_id(spark, table, "main", "BRANCH"),
    }


def expire_snapshots(spark: SparkSession, spec: action_specs.ExpireSnapshotsSpec) -> dict[str, Any]:
    """``expire_snapshots``: snapshots older than ``older_than`` beyond the last ``retain_last`` go."""
    require_table(spark, spec.table)
    arguments = {}
    if spec.older_than is not None:
        arguments["older_than"] = sql_timestamp(spec.older_than)
    if spec.retain_last is not None:
        arguments["retain_last"] = str(int(spec.retain_last))
    before = _snapshot_count(spark, spec.table)
    result = _run(spark, spec.table, "expire_snapshots", arguments)
    result["expired_snapshots_count"] = before - _snapshot_count(spark, spec.table)
    return result


def rewrite_data_files(spark: SparkSession, spec: action_specs.RewriteDataFilesSpec) -> dict[str, Any]:
    """``rewrite_data_files``: compact small files (binpack) or also sort them."""
    arguments = {"strategy": sql_string(spec.strategy)}
    checks = []
    if spec.sort_order is not None:
        arguments["sort_order"] = sql_string(action_specs.quoted_sort_order(spec.sort_order))
    if spec.where is not None:
        checks.append(("where", spec.where))
        arguments["where"] = sql_string(spec.where)
    check_expressions(spark, checks)
    if spec.options:
        arguments["options"] = sql_map(spec.options)
    return _run(spark, spec.table, "rewrite_data_files", arguments)


def rewrite_manifests(spark: SparkSession, spec: action_specs.RewriteManifestsSpec) -> dict[str, Any]:
    return _run(spark, spec.table, "rewrite_manifests", {})


def rewrite_position_deletes(
    spark: SparkSession, spec: action_specs.RewritePositionDeletesSpec
) -> dict[str, Any]:
    arguments = {}
    if spec.where is not None:
        check_expressions(spark, [("where", spec.where)])
        arguments["where"] = sql_string(spec.where)
    if spec.options:
        arguments["options"] = sql_map(spec.options)
    return _run(spark, spec.table, "rewrite_position_delete_files", arguments)

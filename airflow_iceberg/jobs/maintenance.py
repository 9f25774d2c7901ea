"""Table maintenance jobs: cleaning up the files a killed write left behind."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow_iceberg.jobs import connect
from airflow_iceberg.jobs.branches import procedure_call
from airflow_iceberg.jobs.jvm_callbacks import JavaConsumer
from airflow_iceberg.jobs.spec.identifiers import quote_identifier
from airflow_iceberg.jobs.spec.upkeep import OrphanFilesSpec
from airflow_iceberg.jobs.table_state import current_snapshot_id, require_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def remove_orphan_files(spark: SparkSession, spec: OrphanFilesSpec) -> dict[str, Any]:
    """Find (and unless ``dry_run``, delete) files under the table that no snapshot references.

    Files a killed write left behind are invisible to readers; this is how they are cleaned up.
    On the driver it uses Iceberg's ``DeleteOrphanFiles`` action rather than the
    ``remove_orphan_files`` SQL procedure, because the procedure refuses any ``older_than`` under
    24 hours, while cleaning up right after a known-dead write is a legitimate, deliberate use. A
    dry run swaps the delete function for one that only records the path. Over Spark Connect the
    procedure runs instead.
    """
    require_table(spark, spec.table)
    if connect.is_connect(spark):
        files = _orphans_by_procedure(spark, spec)
    else:
        files = _orphans_by_action(spark, spec)
    return {
        "table": spec.table,
        "dry_run": spec.dry_run,
        "orphan_file_count": len(files),
        "orphan_files": files[:1000],
        "snapshot_id": current_snapshot_id(spark, spec.table),
    }


def _orphans_by_action(spark: SparkSession, spec: OrphanFilesSpec) -> list[str]:
    jvm = spark.sparkContext._jvm
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, quote_identifier(spec.table)
    )
    actions = jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)
    action = actions.deleteOrphanFiles(table)
    if spec.older_than is not None:
        action = action.olderThan(int(spec.older_than))
    if spec.dry_run:
        from pyspark.java_gateway import ensure_callback_server_started  # py4j: absent from pyspark-client

        ensure_callback_server_started(spark.sparkContext._gateway)
        action = action.deleteWith(JavaConsumer(lambda path: None))
    return sorted(str(path) for path in action.execute().orphanFileLocations())


def _orphans_by_procedure(spark: SparkSession, spec: OrphanFilesSpec) -> list[str]:
    """Over Spark Connect (no py4j): the ``remove_orphan_files`` procedure, floor and all.

    The procedure refuses an ``older_than`` under 24 hours, so ``allow_recent_files`` is refused
    over Connect before anything runs (:func:`.connect.unsupported_reason`).
    """
    arguments = {"dry_run": "true" if spec.dry_run else "false"}
    if spec.older_than is not None:
        cutoff = datetime.fromtimestamp(spec.older_than / 1000, tz=timezone.utc)
        arguments["older_than"] = f"TIMESTAMP '{cutoff.strftime('%Y-%m-%dT%H:%M:%S.%f')}Z'"
    rows = procedure_call(spark, spec.table, "remove_orphan_files", arguments)
    return sorted(str(row.orphan_file_location) for row in rows)

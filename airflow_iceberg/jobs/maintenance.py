"""Table maintenance jobs: cleaning up the files a killed write left behind."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_iceberg.jobs import job_spec
from airflow_iceberg.jobs.jvm_callbacks import JavaConsumer
from airflow_iceberg.jobs.table_state import current_snapshot_id, require_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def remove_orphan_files(spark: SparkSession, spec: job_spec.OrphanFilesSpec) -> dict[str, Any]:
    """Find (and unless ``dry_run``, delete) files under the table that no snapshot references.

    Files a killed write left behind are invisible to readers; this is how they are cleaned up.
    It uses Iceberg's ``DeleteOrphanFiles`` action rather than the ``remove_orphan_files`` SQL
    procedure, because the procedure refuses any ``older_than`` under 24 hours, while cleaning up
    right after a known-dead write is a legitimate, deliberate use. A dry run swaps the delete
    function for one that only records the path.
    """
    require_table(spark, spec.table)
    jvm = spark.sparkContext._jvm
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, job_spec.quote_identifier(spec.table)
    )
    actions = jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)
    action = actions.deleteOrphanFiles(table)
    if spec.older_than is not None:
        action = action.olderThan(int(spec.older_than))
    if spec.dry_run:
        from pyspark.java_gateway import ensure_callback_server_started  # py4j: absent from pyspark-client

        ensure_callback_server_started(spark.sparkContext._gateway)
        action = action.deleteWith(JavaConsumer(lambda path: None))
    files = sorted(str(path) for path in action.execute().orphanFileLocations())
    return {
        "table": spec.table,
        "dry_run": spec.dry_run,
        "orphan_file_count": len(files),
        "orphan_files": files[:1000],
        "snapshot_id": current_snapshot_id(spark, spec.table),
    }

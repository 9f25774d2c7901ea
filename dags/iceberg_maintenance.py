"""Table upkeep to copy: compact the last days' partitions every day; expire and clean up every week.

A table written every day keeps every snapshot and gathers small files (one per write and
partition, more with merge-on-read deletes) until someone compacts and expires them:
- daily, ``rewrite_data_files`` compacts the partitions of the three days before today (today's
  is still being written; a partition already compacted has one file, below ``min-input-files``,
  and is left alone) and ``rewrite_position_delete_files`` folds their merge-on-read delete files;
- weekly, ``expire_snapshots`` drops snapshots older than a week (keeping the last 10, and every
  snapshot a branch or tag such as ``eod_<date>`` references), ``rewrite_manifests`` regroups
  the metadata, and orphan-file removal deletes files no snapshot references (older than three
  days, well past Iceberg's 24-hour safety floor, so no running write can lose its files).

Each DAG first reads the table's health from its metadata (``IcebergTableHealthOperator``,
pyiceberg, no Spark) and skips the steps whose procedure would find nothing to do, with the same
options: a table nobody wrote to is not compacted, and a young history is not expired. Each
decision and its reason are in the task log and its XCom. Orphan files are in no metadata, so
their removal runs every week.

The rewrites share the table with write-audit-publish (``iceberg_write_audit_publish``): a
rewrite commits to ``main``, after which ``main`` can no longer be fast-forwarded to a branch
made before, and that day's publish would fail. So they wait for the audit branches
(``wait_for_branches="audit_*"``): while one waits to be published, the task is skipped and
changes nothing, and the next run compacts (hence the three days).

Set the table with the ``table`` param. Connections: ``iceberg_catalog_default``, ``spark_default``.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_iceberg.operators import (
    IcebergExpireSnapshotsOperator,
    IcebergRemoveOrphanFilesOperator,
    IcebergRewriteDataFilesOperator,
    IcebergRewriteManifestsOperator,
    IcebergRewritePositionDeleteFilesOperator,
    IcebergTableHealthOperator,
)

TABLE = "{{ params.table }}"
PARAMS = {"table": Param("wap_demo.orders", type="string", description="the table to look after")}
#: The partitions a daily run compacts: the three days before today.
RECENT_DAYS = "order_date >= DATE'{{ macros.ds_add(ds, -3) }}' AND order_date < DATE'{{ ds }}'"
#: Branches whose publish a rewrite of main would break (the write-audit-publish DAG's).
AUDIT_BRANCHES = "audit_*"
#: The rewrites' options; the health check judges with the same ones.
COMPACTION = {"min-input-files": 2, "target-file-size-bytes": 128 * 1024 * 1024}
DELETE_COMPACTION = {"min-input-files": 2}
#: The expiry's cutoff and what it keeps; the health check judges with the same ones.
EXPIRE_BEFORE, RETAIN_LAST = "{{ macros.ds_add(ds, -7) }}", 10

with DAG(
    dag_id="iceberg_maintenance_daily",
    description="Compact the last days' partitions of an Iceberg table",
    schedule="@daily",
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    params=PARAMS,
    tags=["iceberg", "example", "maintenance"],
):
    check_health = IcebergTableHealthOperator(
        task_id="check_health",
        table=TABLE,
        where=RECENT_DAYS,
        options=COMPACTION,
        delete_options=DELETE_COMPACTION,
        steps={
            "rewrite_data_files": "compact_recent_days",
            "rewrite_position_delete_files": "compact_deletes",
        },
    )
    compact_recent_days = IcebergRewriteDataFilesOperator(
        task_id="compact_recent_days",
        table=TABLE,
        where=RECENT_DAYS,
        options=COMPACTION,
        wait_for_branches=AUDIT_BRANCHES,
    )
    compact_deletes = IcebergRewritePositionDeleteFilesOperator(
        task_id="compact_deletes",
        table=TABLE,
        where=RECENT_DAYS,
        options=DELETE_COMPACTION,
        wait_for_branches=AUDIT_BRANCHES,
        trigger_rule="none_failed",  # also when the data files needed no compaction (skipped)
    )
    check_health >> compact_recent_days >> compact_deletes

with DAG(
    dag_id="iceberg_maintenance_weekly",
    description="Expire old snapshots, rewrite manifests and remove orphan files of an Iceberg table",
    schedule="@weekly",
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    params=PARAMS,
    tags=["iceberg", "example", "maintenance"],
):
    check_history = IcebergTableHealthOperator(
        task_id="check_health",
        table=TABLE,
        older_than=EXPIRE_BEFORE,
        retain_last=RETAIN_LAST,
        max_manifests=100,
        steps={"expire_snapshots": "expire_snapshots", "rewrite_manifests": "rewrite_manifests"},
    )
    expire = IcebergExpireSnapshotsOperator(
        task_id="expire_snapshots", table=TABLE, older_than=EXPIRE_BEFORE, retain_last=RETAIN_LAST
    )
    rewrite_manifests = IcebergRewriteManifestsOperator(
        task_id="rewrite_manifests",
        table=TABLE,
        wait_for_branches=AUDIT_BRANCHES,
        trigger_rule="none_failed",  # also when no snapshot was old enough to expire (skipped)
    )
    remove_orphans = IcebergRemoveOrphanFilesOperator(
        task_id="remove_orphan_files",
        table=TABLE,
        older_than="{{ macros.ds_add(ds, -3) }}",
        dry_run=False,  # the default only reports them
        trigger_rule="none_failed",  # also after a manifest rewrite that waited or was not needed
    )
    check_history >> expire >> rewrite_manifests >> remove_orphans

"""Table upkeep to copy: compact yesterday's partition every day; expire and clean up every week.

A table written every day keeps every snapshot and gathers small files (one per write and
partition, more with merge-on-read deletes) until someone compacts and expires them:
- daily, ``rewrite_data_files`` compacts yesterday's partition (today's is still being written)
  and ``rewrite_position_delete_files`` folds the day's merge-on-read delete files;
- weekly, ``expire_snapshots`` drops snapshots older than a week (keeping the last 10, and every
  snapshot a branch or tag such as ``eod_<date>`` references), ``rewrite_manifests`` regroups
  the metadata, and orphan-file removal deletes files no snapshot references (older than three
  days, well past Iceberg's 24-hour safety floor, so no running write can lose its files).

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
)

TABLE = "{{ params.table }}"
PARAMS = {"table": Param("wap_demo.orders", type="string", description="the table to look after")}

with DAG(
    dag_id="iceberg_maintenance_daily",
    description="Compact yesterday's partition of an Iceberg table",
    schedule="@daily",
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    params=PARAMS,
    tags=["iceberg", "example", "maintenance"],
):
    compact_yesterday = IcebergRewriteDataFilesOperator(
        task_id="compact_yesterday",
        table=TABLE,
        where="order_date = DATE'{{ macros.ds_add(ds, -1) }}'",
        options={"min-input-files": 2, "target-file-size-bytes": 128 * 1024 * 1024},
    )
    compact_deletes = IcebergRewritePositionDeleteFilesOperator(
        task_id="compact_deletes",
        table=TABLE,
        where="order_date = DATE'{{ macros.ds_add(ds, -1) }}'",
        options={"min-input-files": 2},
    )
    compact_yesterday >> compact_deletes

with DAG(
    dag_id="iceberg_maintenance_weekly",
    description="Expire old snapshots, rewrite manifests and remove orphan files of an Iceberg table",
    schedule="@weekly",
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    params=PARAMS,
    tags=["iceberg", "example", "maintenance"],
):
    expire = IcebergExpireSnapshotsOperator(
        task_id="expire_snapshots",
        table=TABLE,
        older_than="{{ macros.ds_add(ds, -7) }}",
        retain_last=10,
    )
    rewrite_manifests = IcebergRewriteManifestsOperator(task_id="rewrite_manifests", table=TABLE)
    remove_orphans = IcebergRemoveOrphanFilesOperator(
        task_id="remove_orphan_files",
        table=TABLE,
        older_than="{{ macros.ds_add(ds, -3) }}",
        dry_run=False,  # the default only reports them
    )
    expire >> rewrite_manifests >> remove_orphans

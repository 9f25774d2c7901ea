"""Event-driven across triggerer restarts: one asset event per commit to the outside-written db.watermarked.

The watcher's trigger keeps its watermark in the asset's state store (Airflow 3.3), so commits
made while the triggerer is stopped are reported once it runs again, and none twice.
"""

from __future__ import annotations

import os

import pendulum
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, AssetWatcher

from airflow_iceberg.assets import iceberg_asset
from airflow_iceberg.triggers.snapshot import IcebergSnapshotTrigger

DATABASE = os.environ.get("ASSET_TEST_SQL_DB", "/tmp/catalog.db")
WATERMARKED = iceberg_asset(
    f"iceberg://jdbc/db/watermarked?catalog=lake&uri=jdbc:sqlite:{DATABASE}",
    watchers=[
        AssetWatcher(
            name="watermarked_commits",
            trigger=IcebergSnapshotTrigger(
                table="db.watermarked", iceberg_conn_id="sql_catalog", poll_interval=2
            ),
        )
    ],
)

with DAG(
    "iceberg_asset_watermark",
    schedule=[WATERMARKED],
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["test"],
):
    EmptyOperator(task_id="on_commit")

"""Event-driven: a run whenever the outside-written db.external table gains a snapshot."""

from __future__ import annotations

import os

import pendulum
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, AssetWatcher

from airflow_iceberg.assets import iceberg_asset
from airflow_iceberg.triggers.snapshot import IcebergSnapshotTrigger

DATABASE = os.environ.get("ASSET_TEST_SQL_DB", "/tmp/catalog.db")
EXTERNAL = iceberg_asset(
    f"iceberg://jdbc/db/external?catalog=lake&uri=jdbc:sqlite:{DATABASE}",
    watchers=[
        AssetWatcher(
            name="external_commits",
            trigger=IcebergSnapshotTrigger(
                table="db.external", iceberg_conn_id="sql_catalog", poll_interval=2
            ),
        )
    ],
)

with DAG(
    "iceberg_asset_watcher",
    schedule=[EXTERNAL],
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["test"],
):
    EmptyOperator(task_id="on_commit")

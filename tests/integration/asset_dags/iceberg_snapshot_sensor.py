"""Wait, in the triggerer, for a commit made outside Airflow: an append tagged by its writer."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg.sensors.snapshot import IcebergSnapshotSensor

with DAG(
    "iceberg_snapshot_sensor",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["test"],
):
    IcebergSnapshotSensor(
        task_id="wait_for_tagged_append",
        table="db.external",
        iceberg_conn_id="sql_catalog",
        operation="append",
        summary={"writer": "outside-airflow"},
        poke_interval=2,
        timeout=300,
    )

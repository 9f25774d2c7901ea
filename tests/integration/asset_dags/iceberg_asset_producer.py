"""Producer: one commit to db.events, which the operator publishes as the table's asset event."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg.operators import IcebergCreateTableOperator

with DAG(
    "iceberg_asset_producer",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["test"],
):
    IcebergCreateTableOperator(
        task_id="create",
        table="db.events",
        mode="create_or_replace",
        source_query="SELECT id, CAST(id * 10 AS BIGINT) AS amount FROM range(5)",
    )

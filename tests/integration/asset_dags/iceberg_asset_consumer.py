"""Consumer: scheduled on the db.events asset; reads exactly the snapshot of the triggering event.

The asset URI is written by hand, as a user would (the warehouse comes from the environment
only because the test picks a fresh directory); ``iceberg_asset`` canonicalises it into the
asset (name and URI) the producer's operator emits.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG

from airflow_iceberg.assets import TRIGGERING_SNAPSHOT_ID, iceberg_asset
from airflow_iceberg.operators import IcebergTimeTravelReadOperator

WAREHOUSE = os.environ.get("ASSET_TEST_WAREHOUSE", "/tmp/wh")
EVENTS = iceberg_asset(f"iceberg://hadoop/db/events?warehouse={WAREHOUSE}")

with DAG(
    "iceberg_asset_consumer",
    schedule=[EVENTS],
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["test"],
):
    IcebergTimeTravelReadOperator(
        task_id="read_triggering_snapshot",
        table="db.events",
        snapshot_id=TRIGGERING_SNAPSHOT_ID,
        preview_rows=10,
    )

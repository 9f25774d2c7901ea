"""The EMR batch read/write guide's end-to-end example, as an Airflow DAG.

createOrReplace (1,a),(2,b),(3,c); append (4,d),(5,e),(6,f); read all six rows; then time-travel
to the first snapshot (its id taken from the create task's XCom) and get the original three.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg.operators import (
    IcebergAppendOperator,
    IcebergCreateTableOperator,
    IcebergTimeTravelReadOperator,
)

SAMPLE = "iceberg_db.sample"

with DAG(
    dag_id="iceberg_emr_quickstart",
    description="EMR guide: createOrReplace, append, read, time travel",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["iceberg", "example"],
) as dag:
    first_batch = IcebergCreateTableOperator(
        task_id="first_batch",
        table=SAMPLE,
        mode="create_or_replace",
        source_query="SELECT * FROM VALUES (1, 'a'), (2, 'b'), (3, 'c') AS t(id, data)",
    )
    second_batch = IcebergAppendOperator(
        task_id="second_batch",
        table=SAMPLE,
        source_query="SELECT * FROM VALUES (4, 'd'), (5, 'e'), (6, 'f') AS t(id, data)",
    )
    read_all = IcebergTimeTravelReadOperator(task_id="read_all", table=SAMPLE, preview_rows=10)
    read_first_snapshot = IcebergTimeTravelReadOperator(
        task_id="read_first_snapshot",
        table=SAMPLE,
        snapshot_id="{{ ti.xcom_pull(task_ids='first_batch')['snapshot_id'] }}",
        preview_rows=10,
    )

    first_batch >> second_batch >> read_all >> read_first_snapshot

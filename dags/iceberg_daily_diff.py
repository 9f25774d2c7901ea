"""Compare two versions of a table: what changed in today's load?

The orders table gets yesterday's state, then today's load (an upsert of day one, a new day two).
We read the table twice by time travel: the old version by snapshot id (from the create task's
XCom) and the new one by timestamp (the moment the load committed, from its XCom). A query over
both versions writes the daily diff: rows added and rows removed.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg.operators import (
    IcebergCreateTableOperator,
    IcebergOverwritePartitionsOperator,
    IcebergTimeTravelReadOperator,
)

ORDERS = "diff_demo.orders"

with DAG(
    dag_id="iceberg_daily_diff",
    description="Time travel by snapshot id and by timestamp feeding a daily diff",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["iceberg", "example"],
) as dag:
    yesterday = IcebergCreateTableOperator(
        task_id="yesterday",
        table=ORDERS,
        mode="create_or_replace",
        source_query="SELECT id, id * 10 AS amount, DATE'2024-01-01' AS day FROM range(5)",
        partition_by=["day"],
    )
    today = IcebergOverwritePartitionsOperator(
        task_id="today",
        table=ORDERS,
        source_query="SELECT id, id * 10 + IF(id = 2, 1, 0) AS amount, DATE'2024-01-01' AS day FROM range(4) "
        "UNION ALL SELECT id, id * 10 AS amount, DATE'2024-01-02' AS day FROM range(10, 13)",
    )
    before = IcebergTimeTravelReadOperator(
        task_id="before",
        table=ORDERS,
        snapshot_id="{{ ti.xcom_pull(task_ids='yesterday')['snapshot_id'] }}",
        sink_table="diff_demo.orders_before",
    )
    after = IcebergTimeTravelReadOperator(
        task_id="after",
        table=ORDERS,
        as_of_timestamp="{{ ti.xcom_pull(task_ids='today')['committed_at'] }}",
        sink_table="diff_demo.orders_after",
    )
    diff = IcebergCreateTableOperator(
        task_id="diff",
        table="diff_demo.daily_diff",
        mode="create_or_replace",
        source_query="""
            SELECT 'added' AS change, * FROM (
                SELECT * FROM diff_demo.orders_after
                EXCEPT SELECT * FROM diff_demo.orders_before)
            UNION ALL
            SELECT 'removed' AS change, * FROM (
                SELECT * FROM diff_demo.orders_before
                EXCEPT SELECT * FROM diff_demo.orders_after)
        """,
    )

    yesterday >> today >> [before, after] >> diff

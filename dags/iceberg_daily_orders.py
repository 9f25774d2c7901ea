"""Daily orders into an Iceberg table: create, append, correct a day, and compare with the past.

The story: an orders table partitioned by day. The first run creates it from day one's orders,
day two's orders are appended, then day one is re-delivered with corrections and replaces only
its own partition. Finally we time-travel to the snapshot the append committed (taken from its
XCom) and copy that version aside, so analysts can compare before and after the correction.

Connections (see README): ``iceberg_catalog_default`` (an ``iceberg_catalog`` connection; the
demo names its catalog ``demo``) and ``spark_default`` (the Spark master).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg.operators import (
    IcebergAppendOperator,
    IcebergCreateTableOperator,
    IcebergOverwritePartitionsOperator,
    IcebergTimeTravelReadOperator,
)

# Unqualified names use the connection's catalog, so the same DAG runs on any catalog type.
ORDERS = "db.orders"


def orders_for(day: str, count: int, amount_factor: float) -> str:
    """A query producing ``count`` deterministic orders for ``day`` (stands in for a real source)."""
    return (
        f"SELECT id AS order_id, CAST(id % 17 AS INT) AS customer_id, "
        f"CAST(ROUND((id % 50 + 1) * {amount_factor}, 2) AS DECIMAL(10, 2)) AS amount, "
        f"DATE'{day}' AS order_date FROM range({count})"
    )


with DAG(
    dag_id="iceberg_daily_orders",
    description="Create, append, overwrite a partition and time-travel an Iceberg orders table",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["iceberg", "example"],
) as dag:
    create_orders = IcebergCreateTableOperator(
        task_id="create_orders",
        table=ORDERS,
        mode="create_or_replace",
        source_query=orders_for("2024-01-01", 100, 1.0),
        partition_by=["days(order_date)"],
        table_properties={"format-version": "2", "write.format.default": "parquet"},
    )
    append_day_two = IcebergAppendOperator(
        task_id="append_day_two",
        table=ORDERS,
        source_query=orders_for("2024-01-02", 80, 1.0),
    )
    correct_day_one = IcebergOverwritePartitionsOperator(
        task_id="correct_day_one",
        table=ORDERS,
        source_query=orders_for("2024-01-01", 90, 1.1),
    )
    snapshot_before_correction = IcebergTimeTravelReadOperator(
        task_id="snapshot_before_correction",
        table=ORDERS,
        snapshot_id="{{ ti.xcom_pull(task_ids='append_day_two')['snapshot_id'] }}",
        sink_table="db.orders_before_correction",
        preview_rows=3,
    )

    create_orders >> append_day_two >> correct_day_one >> snapshot_before_correction

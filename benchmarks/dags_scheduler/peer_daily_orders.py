"""The peer of ``dags/iceberg_daily_orders.py``: its four steps as plain SparkSubmitOperators.

What a user without this provider writes: the catalog's settings in ``conf``, the Iceberg runtime
in ``jars``, and a hand-written job per step (:mod:`benchmarks.spark_jobs.peer_step`): the same
tables, partitioning and rows as the example DAG. A plain SparkSubmitOperator pushes no XCom, so
the last step reads "the snapshot before the current one" instead of the append's snapshot id.

Benchmark #7 triggers it with ``warehouse`` and ``runtime_jar`` in the run's conf.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG

PEER_JOB = str(Path(__file__).resolve().parents[1] / "spark_jobs" / "peer_step.py")
ORDERS = "demo.db.orders"
#: The Hadoop catalog ``demo`` the example DAG's ``iceberg_catalog_default`` connection describes.
CATALOG_CONF = {
    "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
    "spark.sql.catalog.demo": "org.apache.iceberg.spark.SparkCatalog",
    "spark.sql.catalog.demo.type": "hadoop",
    "spark.sql.catalog.demo.warehouse": "{{ params.warehouse }}",
    "spark.sql.defaultCatalog": "demo",
}


def orders_for(day: str, count: int, amount_factor: float) -> str:
    """The example DAG's stand-in source: ``count`` deterministic orders for ``day``."""
    return (
        f"SELECT id AS order_id, CAST(id % 17 AS INT) AS customer_id, "
        f"CAST(ROUND((id % 50 + 1) * {amount_factor}, 2) AS DECIMAL(10, 2)) AS amount, "
        f"DATE'{day}' AS order_date FROM range({count})"
    )


def step(task_id: str, *arguments: str) -> SparkSubmitOperator:
    return SparkSubmitOperator(
        task_id=task_id,
        application=PEER_JOB,
        application_args=list(arguments),
        conf=CATALOG_CONF,
        jars="{{ params.runtime_jar }}",
    )


with DAG(
    dag_id="peer_daily_orders",
    description="iceberg_daily_orders as plain SparkSubmitOperators (benchmark #7's peer)",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    params={"warehouse": "", "runtime_jar": ""},
    tags=["benchmark"],
) as dag:
    (
        step(
            "create_orders",
            "create",
            ORDERS,
            orders_for("2024-01-01", 100, 1.0),
            "--partition-by",
            "days(order_date)",
            "--property",
            "format-version=2",
            "--property",
            "write.format.default=parquet",
        )
        >> step("append_day_two", "append", ORDERS, orders_for("2024-01-02", 80, 1.0))
        >> step("correct_day_one", "overwrite_partitions", ORDERS, orders_for("2024-01-01", 90, 1.1))
        >> step(
            "snapshot_before_correction",
            "read",
            ORDERS,
            "previous",
            "--sink",
            "demo.db.orders_before_correction",
            "--preview",
            "3",
        )
    )

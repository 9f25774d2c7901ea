"""Baseline for the parse-cost benchmark: the example DAG's shape with SparkSubmitOperator only.

Same four tasks, same dependencies and similar arguments as ``dags/iceberg_daily_orders.py``,
so the difference in DagBag time is what airflow-iceberg adds to parsing. Never scheduled.
"""

from __future__ import annotations

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG

JOB = "/opt/jobs/orders_job.py"
ICEBERG_CONF = {
    "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
    "spark.sql.catalog.demo": "org.apache.iceberg.spark.SparkCatalog",
}


def orders_for(day: str, count: int, amount_factor: float) -> str:
    return (
        f"SELECT id AS order_id, CAST(id % 17 AS INT) AS customer_id, "
        f"CAST(ROUND((id % 50 + 1) * {amount_factor}, 2) AS DECIMAL(10, 2)) AS amount, "
        f"DATE'{day}' AS order_date FROM range({count})"
    )


with DAG(
    dag_id="spark_only_daily_orders",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["benchmark"],
) as dag:
    create_orders = SparkSubmitOperator(
        task_id="create_orders",
        application=JOB,
        conf=ICEBERG_CONF,
        application_args=["create", "demo.db.orders", orders_for("2024-01-01", 100, 1.0), "days(order_date)"],
    )
    append_day_two = SparkSubmitOperator(
        task_id="append_day_two",
        application=JOB,
        conf=ICEBERG_CONF,
        application_args=["append", "demo.db.orders", orders_for("2024-01-02", 80, 1.0)],
    )
    correct_day_one = SparkSubmitOperator(
        task_id="correct_day_one",
        application=JOB,
        conf=ICEBERG_CONF,
        application_args=["overwrite_partitions", "demo.db.orders", orders_for("2024-01-01", 90, 1.1)],
    )
    snapshot_before_correction = SparkSubmitOperator(
        task_id="snapshot_before_correction",
        application=JOB,
        conf=ICEBERG_CONF,
        application_args=["read", "demo.db.orders", "{{ ti.xcom_pull(task_ids='append_day_two') }}"],
    )

    create_orders >> append_day_two >> correct_day_one >> snapshot_before_correction

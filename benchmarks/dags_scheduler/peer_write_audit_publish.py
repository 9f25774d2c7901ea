"""The peer of ``dags/iceberg_write_audit_publish.py``: its Spark steps as plain SparkSubmitOperators.

The same DAG shape (the approval tasks included, skipped unless asked for) and the same table,
with a hand-written job per Spark step (:mod:`benchmarks.spark_jobs.peer_step`), in plain Spark
SQL: a MERGE into a branch started afresh from main, one aggregate audit query over the branch,
``CALL system.fast_forward`` and ``DROP BRANCH`` to publish, ``CREATE TAG`` to tag. A plain
SparkSubmitOperator pushes no XCom, so publish cannot be pinned to the audited snapshot: it
publishes whatever the branch points at.

Benchmark #7 triggers it with ``warehouse`` and ``runtime_jar`` in the run's conf.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import DAG, Param, task

PEER_JOB = str(Path(__file__).resolve().parents[1] / "spark_jobs" / "peer_step.py")
ORDERS = "demo.wap_demo.orders"
BRANCH = "audit_{{ ds_nodash }}"
CATALOG_CONF = {
    "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
    "spark.sql.catalog.demo": "org.apache.iceberg.spark.SparkCatalog",
    "spark.sql.catalog.demo.type": "hadoop",
    "spark.sql.catalog.demo.warehouse": "{{ params.warehouse }}",
    "spark.sql.defaultCatalog": "demo",
}
#: The example DAG's day of changes: two corrections, a cancellation, two new orders.
CHANGES = """
SELECT * FROM VALUES
    (1, 11, 19.50, DATE'{{ macros.ds_add(ds, -1) }}', 'U'),
    (2, 12, 7.25,  DATE'{{ macros.ds_add(ds, -1) }}', 'U'),
    (3, 13, 0.00,  DATE'{{ macros.ds_add(ds, -1) }}', 'D'),
    (10, 14, 42.00, DATE'{{ ds }}', 'I'),
    (11, 15, 8.00,  DATE'{{ ds }}', 'I')
AS changes(order_id, customer_id, amount, order_date, op)
"""
YESTERDAYS_ORDERS = (
    "SELECT CAST(id AS INT) AS order_id, CAST(10 + id AS INT) AS customer_id, "
    "CAST(id * 5 AS DECIMAL(10, 2)) AS amount, DATE'{{ macros.ds_add(ds, -1) }}' AS order_date "
    "FROM range(1, 6)"
)


def step(task_id: str, *arguments: str, **kwargs) -> SparkSubmitOperator:
    return SparkSubmitOperator(
        task_id=task_id,
        application=PEER_JOB,
        application_args=list(arguments),
        conf=CATALOG_CONF,
        jars="{{ params.runtime_jar }}",
        **kwargs,
    )


with DAG(
    dag_id="peer_write_audit_publish",
    description="iceberg_write_audit_publish as plain SparkSubmitOperators (benchmark #7's peer)",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    params={
        "warehouse": "",
        "runtime_jar": "",
        "max_bad_rows": Param(0, type="integer"),
        "require_approval": Param(False, type="boolean"),
    },
    tags=["benchmark"],
) as dag:
    create_orders = step(
        "create_orders",
        "create",
        ORDERS,
        YESTERDAYS_ORDERS,
        "--partition-by",
        "days(order_date)",
        "--property",
        "format-version=2",
        "--property",
        "write.merge.mode=merge-on-read",
    )
    merge_changes = step("merge_changes", "merge_branch", ORDERS, BRANCH, CHANGES)
    audit = step("audit", "audit", ORDERS, BRANCH, "{{ ds }}", "{{ params.max_bad_rows }}")

    @task.short_circuit(ignore_downstream_trigger_rules=False)
    def approval_required(params: dict | None = None) -> bool:
        return bool((params or {}).get("require_approval"))

    approve_publish = ApprovalOperator(
        task_id="approve_publish",
        subject="Publish the audited orders of {{ ds }} to main?",
        body="The audit of the branch passed. Approve to publish it.",
        response_timeout=timedelta(hours=12),
    )
    publish = step("publish", "fast_forward", ORDERS, BRANCH, trigger_rule="none_failed")
    tag_end_of_day = step("tag_end_of_day", "tag", ORDERS, "eod_{{ ds_nodash }}", "30")

    create_orders >> merge_changes >> audit >> approval_required() >> approve_publish >> publish
    audit >> publish >> tag_end_of_day

"""The benchmark's DAG: one task per thing ``make bench`` times, each driven by ``-t`` params.

``benchmarks.run`` runs single tasks with ``airflow tasks test airflow_iceberg_bench <task> -t
'{"table": ..., "source_query": ..., "snapshot_id": ...}'``, so one DAG serves every size and
table. ``noop`` runs an empty Python callable: its wall time is what Airflow itself costs per task.

The ``story_*`` tasks are the example DAG ``iceberg_emr_quickstart`` step by step, and the
``peer_*`` tasks the same steps as plain SparkSubmitOperators running a hand-written job
(:mod:`benchmarks.spark_jobs.peer_step`), with the catalog's settings written out as a user
would (the bench passes the warehouse and the runtime jar as params).
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

from airflow_iceberg.operators import (
    IcebergAppendOperator,
    IcebergCreateTableOperator,
    IcebergTimeTravelReadOperator,
)

PEER_JOB = str(Path(__file__).resolve().parents[1] / "spark_jobs" / "peer_step.py")
#: The catalog a plain SparkSubmitOperator user writes into ``conf``: the same Hadoop catalog
#: ``demo`` the ``iceberg_catalog_default`` connection describes.
PEER_CONF = {
    "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
    "spark.sql.catalog.demo": "org.apache.iceberg.spark.SparkCatalog",
    "spark.sql.catalog.demo.type": "hadoop",
    "spark.sql.catalog.demo.warehouse": "{{ params.warehouse }}",
    "spark.sql.defaultCatalog": "demo",
}


def do_nothing() -> None:
    """A task body that costs nothing, so the task's wall time is Airflow's own per-task cost."""


with DAG(
    dag_id="airflow_iceberg_bench",
    description="Tasks timed by `make bench` (run one at a time with airflow tasks test)",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    params={
        "table": "bench.orders",
        "source_query": "SELECT 1 AS order_id",
        "snapshot_id": "0",
        "warehouse": "",
        "runtime_jar": "",
    },
    tags=["benchmark"],
) as dag:
    IcebergCreateTableOperator(
        task_id="create_table",
        table="{{ params.table }}",
        mode="create_or_replace",
        source_query="{{ params.source_query }}",
        # snappy, as Spark's own parquet writer uses: the throughput comparison is about the
        # write path, not about Iceberg's default codec (zstd), which costs more CPU.
        table_properties={"format-version": "2", "write.parquet.compression-codec": "snappy"},
    )
    IcebergAppendOperator(
        task_id="append_rows", table="{{ params.table }}", source_query="{{ params.source_query }}"
    )
    IcebergTimeTravelReadOperator(
        task_id="time_travel_read", table="{{ params.table }}", snapshot_id="{{ params.snapshot_id }}"
    )
    PythonOperator(task_id="noop", python_callable=do_nothing)

    # iceberg_emr_quickstart, one step per task (append_rows above is its second step)
    IcebergCreateTableOperator(
        task_id="story_create",
        table="{{ params.table }}",
        mode="create_or_replace",
        source_query="{{ params.source_query }}",
    )
    IcebergTimeTravelReadOperator(task_id="story_read", table="{{ params.table }}", preview_rows=10)
    IcebergTimeTravelReadOperator(
        task_id="story_read_snapshot",
        table="{{ params.table }}",
        snapshot_id="{{ params.snapshot_id }}",
        preview_rows=10,
    )
    for step, arguments in {
        "create": ["{{ params.source_query }}"],
        "append": ["{{ params.source_query }}"],
        "read": [],
        "read_snapshot": ["{{ params.snapshot_id }}"],
    }.items():
        SparkSubmitOperator(
            task_id=f"peer_{step}",
            application=PEER_JOB,
            application_args=[step.split("_")[0], "{{ params.table }}", *arguments],
            conf=PEER_CONF,
            jars="{{ params.runtime_jar }}",
        )

with DAG(
    dag_id="airflow_iceberg_bench_noop_story",
    description="Four empty tasks in a row: what `airflow dags test` of a four-step DAG costs by itself",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["benchmark"],
) as noop_story:
    (
        PythonOperator(task_id="first_batch", python_callable=do_nothing)
        >> PythonOperator(task_id="second_batch", python_callable=do_nothing)
        >> PythonOperator(task_id="read_all", python_callable=do_nothing)
        >> PythonOperator(task_id="read_first_snapshot", python_callable=do_nothing)
    )

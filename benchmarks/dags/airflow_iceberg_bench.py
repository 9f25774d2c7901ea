"""The benchmark's DAG: one task per thing ``make bench`` times, each driven by ``-t`` params.

``benchmarks.run`` runs single tasks with ``airflow tasks test airflow_iceberg_bench <task> -t
'{"table": ..., "source_query": ..., "snapshot_id": ...}'``, so one DAG serves every size and
table. ``noop`` runs an empty Python callable: its wall time is what Airflow itself costs per task.
"""

from __future__ import annotations

import pendulum
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

from airflow_iceberg.operators import (
    IcebergAppendOperator,
    IcebergCreateTableOperator,
    IcebergTimeTravelReadOperator,
)


def do_nothing() -> None:
    """A task body that costs nothing, so the task's wall time is Airflow's own per-task cost."""


with DAG(
    dag_id="airflow_iceberg_bench",
    description="Tasks timed by `make bench` (run one at a time with airflow tasks test)",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    params={"table": "bench.orders", "source_query": "SELECT 1 AS order_id", "snapshot_id": "0"},
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

"""Benchmark #8's DAGs: concurrent mapped appends into one table, and one large append.

``airflow_iceberg_bench_mapped_appends`` creates the table, then appends ``batches`` batches of
``rows`` rows at once, one mapped task each (``.expand`` over the batches' queries): under the
real scheduler with enough executor slots, every append runs in its own task process at the same
time, and their commits race. Batch ``b`` holds order ids ``b * rows`` to ``(b + 1) * rows - 1``.

``airflow_iceberg_bench_cluster_append`` creates an empty table and appends ``source_query``'s
rows to it (on whatever master ``spark_default`` names: the benchmark points it at a standalone
cluster). The table writes snappy parquet, as Spark's own parquet writer does.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from airflow_iceberg.operators import IcebergAppendOperator, IcebergCreateTableOperator

SCHEMA_ONLY = (
    "SELECT CAST(0 AS BIGINT) AS order_id, 0 AS batch, 0 AS customer_id, CAST(0 AS DOUBLE) AS amount "
    "FROM range(0)"
)


def batch_query(batch: int, rows: int) -> str:
    return (
        f"SELECT id + {batch * rows} AS order_id, {batch} AS batch, CAST(id % 1000 AS INT) AS customer_id, "
        f"CAST(id % 10007 AS DOUBLE) / 100 AS amount FROM range({rows})"
    )


with DAG(
    dag_id="airflow_iceberg_bench_mapped_appends",
    description="Concurrent mapped appends into one Iceberg table (benchmark #8)",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    params={"table": "scale.appends", "batches": 16, "rows": 1000},
    tags=["benchmark"],
) as mapped_appends:

    @task
    def batch_queries(params: dict | None = None) -> list[str]:
        """One query per batch: the mapped appends' ``source_query``."""
        return [batch_query(batch, int(params["rows"])) for batch in range(int(params["batches"]))]

    create = IcebergCreateTableOperator(
        task_id="create_table", table="{{ params.table }}", mode="create_or_replace", source_query=SCHEMA_ONLY
    )
    queries = batch_queries()
    create >> queries
    IcebergAppendOperator.partial(task_id="append_batch", table="{{ params.table }}").expand(
        source_query=queries
    )

with DAG(
    dag_id="airflow_iceberg_bench_cluster_append",
    description="One large append, on the master spark_default names (benchmark #8)",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    params={
        "table": "scale.cluster_rows",
        "create_query": "SELECT 1 AS id",
        "source_query": "SELECT 1 AS id",
    },
    tags=["benchmark"],
) as cluster_append:
    (
        IcebergCreateTableOperator(
            task_id="create_table",
            table="{{ params.table }}",
            mode="create_or_replace",
            source_query="{{ params.create_query }}",
            table_properties={"format-version": "2", "write.parquet.compression-codec": "snappy"},
        )
        >> IcebergAppendOperator(
            task_id="append_rows", table="{{ params.table }}", source_query="{{ params.source_query }}"
        )
    )

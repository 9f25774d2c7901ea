"""Test DAG: an Iceberg table made from a plain Parquet table, both in Spark's own catalog.

With ``session_catalog`` the connection wraps ``spark_catalog`` in Iceberg's SparkSessionCatalog,
so two-part names reach both kinds of table in one Hive Metastore: ``db.plain`` is a plain
Parquet table, ``db.plain_iceberg`` becomes an Iceberg table. Used by
``tests/integration/test_catalog_backends.py`` through ``airflow tasks test``.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg.operators import IcebergCreateTableOperator

with DAG(
    dag_id="iceberg_session_catalog",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["iceberg", "test"],
):
    IcebergCreateTableOperator(
        task_id="copy_plain",
        iceberg_conn_id="iceberg_session",
        table="db.plain_iceberg",
        source_table="db.plain",
        mode="create_or_replace",
    )

"""Test DAG: copy a Hive catalog table into two Hadoop catalogs, each in one job with the source.

``source_table`` names the Hive catalog (``hive``), loaded next to the target catalog through
``extra_iceberg_conn_ids``. The two targets differ only in their per-catalog Hadoop properties,
so the second copy is the control for the first. The target is named as real catalogs name
tables: a nested namespace, a dash (in backticks, though a bare dash works too), upper case and
a non-ASCII letter. Used by
``tests/integration/test_catalog_backends.py`` through ``airflow dags test``.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg.operators import IcebergCreateTableOperator

#: ``emea`` is no catalog, so the default catalog goes in front: namespace ``emea.sales-eu``.
TARGET = "emea.`sales-eu`.Orders_Copié"

with DAG(
    dag_id="iceberg_cross_catalog",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["iceberg", "test"],
):
    copies = [
        IcebergCreateTableOperator(
            task_id=f"copy_to_{target}",
            iceberg_conn_id=f"iceberg_{target}",
            extra_iceberg_conn_ids=["iceberg_hive"],
            table=TARGET,
            source_table="hive.xsrc.orders",
        )
        for target in ("restricted", "shared")
    ]
    copies[0] >> copies[1]

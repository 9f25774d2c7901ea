"""The Prophecy Iceberg target example: partition by Department, merge a new column, replace one department.

1. createOrReplace employees partitioned by Department, with write.spark.accept-any-schema.
2. A later load brings a new ``Bonus`` column; merge_schema adds it to the table.
3. overwritePartitions with Engineering rows only: Engineering is replaced, Sales is kept.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg.operators import (
    IcebergAppendOperator,
    IcebergCreateTableOperator,
    IcebergOverwritePartitionsOperator,
)

EMPLOYEES = "prophecy_doc_demo.employees_test"

with DAG(
    dag_id="iceberg_prophecy_target",
    description="Prophecy target gem: partition columns, merge schema, overwritePartitions",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["iceberg", "example"],
) as dag:
    create_employees = IcebergCreateTableOperator(
        task_id="create_employees",
        table=EMPLOYEES,
        mode="create_or_replace",
        source_query="SELECT * FROM VALUES (1, 'Ann', 'Engineering', 100), (2, 'Bob', 'Engineering', 90), "
        "(3, 'Cid', 'Sales', 80) AS t(Id, Name, Department, Salary)",
        partition_by=["Department"],
        table_properties={"write.spark.accept-any-schema": "true"},
    )
    load_with_bonus = IcebergAppendOperator(
        task_id="load_with_bonus",
        table=EMPLOYEES,
        source_query="SELECT * FROM VALUES (4, 'Dee', 'Sales', 85, 5) "
        "AS t(Id, Name, Department, Salary, Bonus)",
        merge_schema=True,
    )
    replace_engineering = IcebergOverwritePartitionsOperator(
        task_id="replace_engineering",
        table=EMPLOYEES,
        source_query="SELECT * FROM VALUES (1, 'Ann', 'Engineering', 110, 10), "
        "(5, 'Eve', 'Engineering', 95, 0) AS t(Id, Name, Department, Salary, Bonus)",
    )

    create_employees >> load_with_bonus >> replace_engineering

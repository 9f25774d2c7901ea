"""Test DAG: publish an audited branch, tag it, roll main back, each in the worker through pyiceberg.

The test makes the table and its branch with pyiceberg and passes their snapshots as params.
Every task asks for ``engine="pyiceberg"``, so a step that could not run there exactly fails
the run instead of quietly starting Spark. ``publish_again`` is the same publish by another
task, as a retry after a lost success would run it: it must find the snapshot published and
change nothing. Used by ``tests/integration/test_ref_steps_without_spark.py`` through
``airflow dags test`` against the REST catalog and the Hive metastore.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg.operators import IcebergPublishOperator, IcebergRollbackOperator, IcebergTagOperator

PUBLISHED = "{{ ti.xcom_pull(task_ids='publish')['snapshot_id'] }}"

with DAG(
    dag_id="iceberg_ref_steps",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    params={"table": "ref_steps.orders", "audited": "0", "before": "0"},
    default_args={"engine": "pyiceberg"},
    tags=["iceberg", "test"],
):
    publish = IcebergPublishOperator(
        task_id="publish",
        table="{{ params.table }}",
        branch="audit",
        expected_snapshot_id="{{ params.audited }}",
        drop_branch=True,
    )
    publish_again = IcebergPublishOperator(
        task_id="publish_again",
        table="{{ params.table }}",
        branch="audit",
        expected_snapshot_id="{{ params.audited }}",
        drop_branch=True,
    )
    tag = IcebergTagOperator(
        task_id="tag", table="{{ params.table }}", tag="eod", snapshot_id=PUBLISHED, retain_days=7
    )
    rollback = IcebergRollbackOperator(
        task_id="rollback", table="{{ params.table }}", snapshot_id="{{ params.before }}"
    )
    publish >> publish_again >> tag >> rollback

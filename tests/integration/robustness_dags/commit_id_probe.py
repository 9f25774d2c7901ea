"""A DAG without Spark that records, try by try, the commit id an Iceberg write would carry.

Used by ``tests/integration/test_commit_ids.py``: Airflow itself (``dags test``, ``tasks clear``,
``tasks test``) retries and clears the task, and the id must stay the same across the retry and
change with the clear. The first try fails on purpose, so that Airflow retries it.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta

import pendulum
from airflow.sdk import DAG, get_current_context, task

from airflow_iceberg.operators import IcebergAppendOperator

RETRIES = 1
#: The file the probe appends one JSON line per try to.
LOG_ENV = "AIRFLOW_ICEBERG_COMMIT_ID_PROBE_LOG"

with DAG("robust_commit_ids", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC")):

    @task(retries=RETRIES, retry_delay=timedelta(0))
    def probe() -> None:
        context = get_current_context()
        write = IcebergAppendOperator(
            task_id="probe", table="db.t", source_query="SELECT 1", retries=RETRIES
        )
        ti = context["ti"]
        with open(os.environ[LOG_ENV], "a", encoding="utf-8") as log:
            log.write(json.dumps({"try": ti.try_number, "commit_id": write._commit_id(context)}) + "\n")
        if ti.try_number == 1:
            raise RuntimeError("the first try fails on purpose, so that Airflow retries it")

    probe()

"""The apache-spark provider's OpenLineage injection reaches spark-submit through the operators.

``openlineage_inject_parent_job_info`` and ``openlineage_inject_transport_info`` are
``SparkSubmitOperator`` arguments, which every operator inherits: its ``execute`` adds the
``spark.openlineage.*`` settings to ``conf`` after the operator has merged the catalog's settings
into it. Here an operator is built with both, and with the openlineage-spark listener as
docs/assets-and-lineage.md says to add it, in a fresh interpreter whose OpenLineage provider is
configured through the environment as on a worker (the provider caches its configuration per
process). Only the spark-submit call itself is replaced: the command the provider's hook would
run is recorded, and a result file written as the job would write it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SUBMIT = r"""
import json, sys
from datetime import datetime, timezone
from pathlib import Path
from unittest import mock

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.openlineage.plugins.adapter import OpenLineageAdapter

from airflow_iceberg.operators import IcebergAppendOperator

LOGICAL_DATE = datetime(2024, 1, 2, tzinfo=timezone.utc)


class DagRun:
    run_id, logical_date, run_after, start_date, clear_number, conf = (
        "manual__2024-01-02", LOGICAL_DATE, LOGICAL_DATE, LOGICAL_DATE, 0, {}
    )


class TaskInstance:
    dag_id, task_id, run_id, try_number, map_index, max_tries = (
        "orders", "load", "manual__2024-01-02", 1, -1, 0
    )
    dag_run = DagRun()

    def get_template_context(self):
        return {"dag_run": self.dag_run}


def submitted(inject):
    # the spark-submit command of an append built with (or without) the provider's injection
    commands = []
    operator = IcebergAppendOperator(
        task_id="load",
        table="db.orders",
        source_query="SELECT 1 AS id",
        packages="io.openlineage:openlineage-spark_2.12:1.53.0",
        conf={"spark.extraListeners": "io.openlineage.spark.agent.OpenLineageSparkListener"},
        openlineage_inject_parent_job_info=inject,
        openlineage_inject_transport_info=inject,
    )

    def submit(hook, application="", **kwargs):
        commands.append(hook._build_spark_submit_command(application))
        args = operator.application_args
        result = {"status": "success", "table": "demo.db.orders", "mode": "append", "committed": False}
        Path(args[args.index("--result-file") + 1]).write_text(json.dumps(result))

    ti = TaskInstance()
    with mock.patch.object(SparkSubmitHook, "submit", submit):
        operator.execute({"ti": ti, "dag_run": ti.dag_run})
    (command,) = commands
    return command


print(json.dumps({
    "inject": submitted(True),
    "plain": submitted(False),
    "run_id": OpenLineageAdapter.build_task_instance_run_id(
        dag_id="orders", task_id="load", try_number=1, logical_date=LOGICAL_DATE, map_index=-1
    ),
    "root_run_id": OpenLineageAdapter.build_dag_run_id(
        dag_id="orders", logical_date=LOGICAL_DATE, clear_number=0
    ),
}))
"""

#: A worker's OpenLineage provider: HTTP transport to a Marquez, its own namespace.
OPENLINEAGE_ENV = {
    "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
        {"type": "http", "url": "http://marquez.example:5000", "endpoint": "api/v1/lineage", "timeout": 5}
    ),
    "AIRFLOW__OPENLINEAGE__NAMESPACE": "orders-team",
    "AIRFLOW__OPENLINEAGE__DISABLED": "False",
}


@pytest.fixture(scope="module")
def submitted() -> dict:
    """The commands of an append with and without the injection flags, and the task's run ids."""
    completed = subprocess.run(
        [sys.executable, "-c", SUBMIT],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
        env={
            **os.environ,
            **OPENLINEAGE_ENV,
            "PYTHONPATH": str(REPO),
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT": json.dumps(
                {"conn_type": "iceberg_catalog", "extra": {"catalog_name": "demo", "warehouse": "/wh"}}
            ),
        },
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def spark_conf(command: list[str]) -> dict[str, str]:
    """The ``--conf`` settings of a spark-submit command."""
    return dict(command[i + 1].split("=", 1) for i, word in enumerate(command) if word == "--conf")


def test_the_providers_openlineage_injection_reaches_spark_submit_beside_the_catalog_settings(submitted):
    command = submitted["inject"]
    conf = spark_conf(command)
    # the parent job is the Airflow task, as the OpenLineage provider names its own events' run
    assert conf["spark.openlineage.parentJobNamespace"] == "orders-team"
    assert conf["spark.openlineage.parentJobName"] == "orders.load"
    assert conf["spark.openlineage.parentRunId"] == submitted["run_id"]
    assert conf["spark.openlineage.rootParentJobName"] == "orders"
    assert conf["spark.openlineage.rootParentRunId"] == submitted["root_run_id"]
    assert conf["spark.openlineage.rootParentJobNamespace"] == "orders-team"
    # the worker's HTTP transport, for the listener in the Spark driver
    assert conf["spark.openlineage.transport.type"] == "http"
    assert conf["spark.openlineage.transport.url"] == "http://marquez.example:5000"
    assert conf["spark.openlineage.transport.endpoint"] == "api/v1/lineage"
    # the listener and its package as given, beside the catalog's own settings
    assert conf["spark.extraListeners"] == "io.openlineage.spark.agent.OpenLineageSparkListener"
    assert "io.openlineage:openlineage-spark_2.12:1.53.0" in command[command.index("--packages") + 1]
    assert conf["spark.sql.catalog.demo"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.defaultCatalog"] == "demo"


def test_without_the_flags_nothing_of_openlineage_is_injected(submitted):
    conf = spark_conf(submitted["plain"])
    assert not [key for key in conf if key.startswith("spark.openlineage.")]
    assert conf["spark.extraListeners"] == "io.openlineage.spark.agent.OpenLineageSparkListener"

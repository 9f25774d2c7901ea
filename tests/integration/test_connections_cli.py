"""A connection made with ``airflow connections add`` works like one from AIRFLOW_CONN_* JSON.

The real CLI stores the connection in the metadata database; a task then runs on it (Airflow 3
tasks read connections through the execution API, not the DB directly), and
``airflow connections test`` runs the UI's Test button check.
"""

from __future__ import annotations

import json
import os

from scripts.show_table import load_table
from tests.integration.airflow_runner import AirflowRunner, spark_connection


def test_a_task_runs_on_a_connection_added_with_the_cli(tmp_path_factory):
    runner = AirflowRunner.create(tmp_path_factory.mktemp("cli_home"))  # its own DB
    runner.base_env.pop("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", None)  # env connections would win over the DB
    warehouse = tmp_path_factory.mktemp("cli_warehouse")
    added = runner.airflow(
        "connections", "add", "iceberg_catalog_default",
        "--conn-type", "iceberg_catalog",
        "--conn-extra", json.dumps({"catalog_name": "cli", "catalog_type": "hadoop",
                                    "warehouse": f"file://{warehouse}", "cache_enabled": "false",
                                    "runtime_jar": os.environ["ICEBERG_RUNTIME_JAR"]}),
    )  # fmt: skip
    assert added.returncode == 0, added.stderr[-3000:]
    completed = runner.airflow(
        "tasks", "test", "iceberg_daily_orders", "create_orders", "2024-01-02",
        connections={"spark_default": spark_connection()},
    )  # fmt: skip
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output[-5000:]
    assert "--conf spark.sql.catalog.cli.cache-enabled=false" in output
    orders = load_table(warehouse, "db.orders")
    assert orders.scan().to_arrow().num_rows == 100


def test_cli_connection_test_reports_what_it_checked(airflow_runner, tmp_path):
    airflow_runner.airflow(
        "connections", "add", "cli_hadoop", "--conn-type", "iceberg_catalog",
        "--conn-extra", json.dumps({"catalog_type": "hadoop", "warehouse": f"file://{tmp_path}/wh"}),
    )  # fmt: skip
    airflow_runner.airflow(
        "connections", "add", "cli_broken", "--conn-type", "iceberg_catalog",
        "--conn-extra", json.dumps({"catalog_type": "hadoop"}),
    )  # fmt: skip
    enabled = {"AIRFLOW__CORE__TEST_CONNECTION": "Enabled"}
    good = airflow_runner.airflow("connections", "test", "cli_hadoop", env=enabled)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "Connection success!" in good.stdout  # the CLI prints the message only on failure
    bad = airflow_runner.airflow("connections", "test", "cli_broken", env=enabled)
    output = bad.stdout + bad.stderr
    assert "'Warehouse' (warehouse): is required for a hadoop catalog" in output
    assert "Traceback" not in output

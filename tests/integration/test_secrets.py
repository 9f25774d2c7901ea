"""Catalog credentials never appear in argv, the task log, rendered template fields or XCom.

A real task runs against a real JDBC (SQLite) catalog whose connection carries sentinel secrets
in every secret-bearing place: the password, a token-like catalog property and a per-catalog
Hadoop secret key. The password fills a property whose name looks like nothing secret
(``password_property: jdbc.pw``; SQLite ignores it): the Password field makes it secret, not its
name. While the DAG runs, every process's command line is sampled.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from tests.integration.airflow_runner import spark_connection
from tests.integration.process_sampler import CommandLineSampler

SENTINELS = ("SENTINEL-PASSWORD-5c1e", "SENTINEL-TOKEN-9b2d", "SENTINEL-S3A-SECRET-77aa")
SQLITE_JDBC = "/usr/share/java/sqlite-jdbc.jar"


@pytest.fixture(scope="module")
def secret_run(airflow_runner, tmp_path_factory):
    if not Path(SQLITE_JDBC).exists():
        pytest.fail(f"{SQLITE_JDBC} missing: scripts/setup.sh installs libxerial-sqlite-jdbc-java")
    root = tmp_path_factory.mktemp("secrets")
    database, warehouse = root / "catalog.db", root / "warehouse"
    connection = {
        "conn_type": "iceberg_catalog",
        "host": f"jdbc:sqlite:{database}",
        "login": "etl",
        "password": SENTINELS[0],
        "extra": {
            "catalog_name": "demo",
            "catalog_type": "jdbc",
            "warehouse": f"file://{warehouse}",
            "runtime_jar": os.environ["ICEBERG_RUNTIME_JAR"],
            "extra_jars": SQLITE_JDBC,
            "password_property": "jdbc.pw",
            "catalog_properties": {"rest.auth.token": SENTINELS[1]},
            "hadoop_properties": {"fs.s3a.secret.key": SENTINELS[2]},
        },
    }
    with CommandLineSampler() as sampler:
        completed = airflow_runner.airflow(
            "dags",
            "test",
            "iceberg_daily_orders",
            "2024-01-03",
            connections={"iceberg_catalog_default": connection, "spark_default": spark_connection()},
        )
    assert completed.returncode == 0, (completed.stdout + completed.stderr)[-5000:]
    return {"sampler": sampler, "completed": completed, "database": database, "warehouse": warehouse}


def test_the_run_really_used_the_jdbc_catalog(secret_run):
    catalog = SqlCatalog(
        "demo", uri=f"sqlite:///{secret_run['database']}", warehouse=f"file://{secret_run['warehouse']}"
    )
    orders = catalog.load_table("db.orders")
    assert [s.summary.operation.value for s in orders.snapshots()] == ["overwrite", "append", "overwrite"]
    assert orders.scan().to_arrow().num_rows == 170


def test_no_secret_in_any_process_command_line(secret_run):
    sampler = secret_run["sampler"]
    spark_submits = sampler.matching("org.apache.spark.deploy.SparkSubmit")
    drivers = sampler.matching("iceberg_job.py")
    assert spark_submits and drivers, "the sampler must have seen spark-submit's JVM and the job"
    for sentinel in SENTINELS:
        assert sampler.matching(sentinel) == []
    assert any("spark.sql.catalog.demo.jdbc.user=etl" in line for line in spark_submits)


def test_no_secret_in_task_logs_or_cli_output(secret_run, airflow_runner):
    completed = secret_run["completed"]
    texts = [completed.stdout, completed.stderr]
    logs = list((airflow_runner.home / "logs").rglob("*"))
    texts += [p.read_text(errors="replace") for p in logs if p.is_file()]
    assert any("Committed snapshot" in text for text in texts), "the task logs must have been captured"
    for sentinel in SENTINELS:
        assert not [t for t in texts if sentinel in t]


def test_no_secret_in_rendered_fields_or_xcom(secret_run, airflow_runner):
    with sqlite3.connect(airflow_runner.home / "airflow.db") as db:
        rendered = [str(row) for row in db.execute("SELECT * FROM rendered_task_instance_fields")]
        xcoms = [str(row) for row in db.execute("SELECT * FROM xcom")]
    assert rendered and xcoms
    for sentinel in SENTINELS:
        assert not [r for r in rendered + xcoms if sentinel in r]

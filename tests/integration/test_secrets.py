"""Catalog credentials never appear in argv, any process's environment, the task log, Spark's
event log, rendered template fields or XCom.

A real DAG run goes against a real JDBC (SQLite) catalog whose connection carries sentinel
secrets in every secret-bearing place: the password, and two Secret properties (a token-like
catalog property and a per-catalog Hadoop secret key). The password fills a property whose name
looks like nothing secret (``pass_property: jdbc.pw``; SQLite ignores it): the Password field
makes it secret, not its name. Spark writes an event log (``spark.eventLog.enabled`` in the
run's spark-defaults.conf), and the run's environment carries Airflow variables a child must not
inherit. While the DAG runs, every process's command line is sampled, and the environment of
spark-submit's JVM and of the PySpark driver.

Then, in this process with a real spark-submit, a PostgreSQL JDBC catalog whose password is in its
URL (``?password=``): the catalog works, and the password is in no command line, log or error.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg.exceptions import IcebergJobError
from tests.integration.airflow_runner import spark_connection
from tests.integration.catalog_connections import postgres_connection, postgres_reader
from tests.integration.event_logs import event_log_text, shows_redacted
from tests.integration.in_process import execute
from tests.integration.process_sampler import CommandLineSampler

#: Neutral values: Spark also redacts a setting whose value names a credential, which would hide
#: a missing redaction pattern for a key.
SENTINELS = ("SENTINEL-PW-5c1e", "SENTINEL-RAT-9b2d", "SENTINEL-S3A-77aa")
#: An Airflow variable in the worker's environment, which spark-submit must not inherit.
VARIABLE_SENTINEL = "SENTINEL-VARIABLE-0e4f"
#: A variable of the worker that is not Airflow's: it must reach spark-submit and the driver.
KEPT_PROBE = "kept-by-spark-submit-7d21"
SECRET_KEYS = ("jdbc.pw", "rest.auth.token", "hadoop.fs.s3a.secret.key")
SQLITE_JDBC = "/usr/share/java/sqlite-jdbc.jar"
SPARK_SUBMIT_JVM = "org.apache.spark.deploy.SparkSubmit"
DRIVER = "iceberg_job.py"


def spark_conf_dir_with_event_log(root: Path, event_log: Path) -> Path:
    """A copy of the tests' spark-defaults.conf that also writes Spark's event log to ``event_log``."""
    conf_dir = root / "spark-conf"
    conf_dir.mkdir()
    defaults = Path(os.environ["SPARK_CONF_DIR"], "spark-defaults.conf")
    text = defaults.read_text() if defaults.is_file() else ""
    text += f"\nspark.eventLog.enabled  true\nspark.eventLog.dir  {event_log.as_uri()}\n"
    (conf_dir / "spark-defaults.conf").write_text(text)
    event_log.mkdir()
    return conf_dir


@pytest.fixture(scope="module")
def secret_run(airflow_runner, tmp_path_factory):
    if not Path(SQLITE_JDBC).exists():
        pytest.fail(f"{SQLITE_JDBC} missing: scripts/setup.sh installs libxerial-sqlite-jdbc-java")
    root = tmp_path_factory.mktemp("secrets")
    database, warehouse, event_log = root / "catalog.db", root / "warehouse", root / "event-log"
    conf_dir = spark_conf_dir_with_event_log(root, event_log)
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
            "pass_property": "jdbc.pw",
            "secret_properties": {"rest.auth.token": SENTINELS[1], "hadoop.fs.s3a.secret.key": SENTINELS[2]},
        },
    }
    with CommandLineSampler(environ_of=(SPARK_SUBMIT_JVM, DRIVER)) as sampler:
        completed = airflow_runner.airflow(
            "dags",
            "test",
            "iceberg_daily_orders",
            "2024-01-03",
            connections={"iceberg_catalog_default": connection, "spark_default": spark_connection()},
            env={
                "SPARK_CONF_DIR": str(conf_dir),
                "AIRFLOW_VAR_SECRETS_PROBE": VARIABLE_SENTINEL,
                "KEPT_PROBE": KEPT_PROBE,  # any other variable of the worker's reaches Spark
            },
        )
    assert completed.returncode == 0, (completed.stdout + completed.stderr)[-5000:]
    return {
        "sampler": sampler,
        "completed": completed,
        "database": database,
        "warehouse": warehouse,
        "event_log": event_log,
        "conf_dir": conf_dir,
    }


def test_the_run_really_used_the_jdbc_catalog(secret_run):
    catalog = SqlCatalog(
        "demo", uri=f"sqlite:///{secret_run['database']}", warehouse=f"file://{secret_run['warehouse']}"
    )
    orders = catalog.load_table("db.orders")
    assert [s.summary.operation.value for s in orders.snapshots()] == ["overwrite", "append", "overwrite"]
    assert orders.scan().to_arrow().num_rows == 170


def test_no_secret_in_any_process_command_line(secret_run):
    sampler = secret_run["sampler"]
    spark_submits = sampler.matching(SPARK_SUBMIT_JVM)
    drivers = sampler.matching(DRIVER)
    assert spark_submits and drivers, "the sampler must have seen spark-submit's JVM and the job"
    for sentinel in SENTINELS:
        assert sampler.matching(sentinel) == []
    assert any("spark.sql.catalog.demo.jdbc.user=etl" in line for line in spark_submits)


def test_spark_submit_and_the_driver_inherit_none_of_airflows_variables(secret_run):
    """``AIRFLOW_CONN_*`` holds every connection's password; the JVM and the driver get none of it."""
    sampler = secret_run["sampler"]

    def this_runs(needle: str) -> list[dict[str, str]]:
        # The machine may run other Spark jobs; this run's have its own SPARK_CONF_DIR, which is
        # also what Spark needs kept.
        conf_dir = str(secret_run["conf_dir"])
        return [env for env in sampler.environments_of(needle) if env.get("SPARK_CONF_DIR") == conf_dir]

    jvms, drivers = this_runs(SPARK_SUBMIT_JVM), this_runs(DRIVER)
    assert jvms and drivers, "the sampler must have read the environments of spark-submit's JVM and the job"
    for environment in jvms + drivers:
        assert [key for key in environment if key.startswith(("AIRFLOW", "_AIRFLOW"))] == []
        for sentinel in (*SENTINELS, VARIABLE_SENTINEL):
            assert not [key for key, value in environment.items() if sentinel in value], sentinel
        assert environment.get("KEPT_PROBE") == KEPT_PROBE and environment.get("PATH")


def test_the_event_log_holds_every_secret_redacted_and_none_in_clear(secret_run):
    """Spark copies session settings into each job's properties, and redacts only SparkConf's: the
    job gives the secrets to SparkConf, with a redaction pattern that names ``jdbc.pw`` too."""
    logs = sorted(path for path in secret_run["event_log"].iterdir() if path.is_file())
    assert len(logs) == 4, logs  # one Spark application per task of the example DAG
    for log in logs:
        text = log.read_text(errors="replace")
        assert '"Event":"SparkListenerJobStart"' in text and "SparkListenerSQLExecutionStart" in text
        for key in SECRET_KEYS:
            assert shows_redacted(text, f"spark.sql.catalog.demo.{key}"), (log.name, key)
    everything = event_log_text(secret_run["event_log"])
    for sentinel in SENTINELS:
        assert sentinel not in everything


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


# --------------------------------------------------------------------------- a password in the URL


@pytest.fixture
def url_password_catalog(postgres_server, tmp_path, monkeypatch):
    """Define a PostgreSQL JDBC catalog whose user and password are in its URL, not in Login/Password."""

    def define(password: str, catalog_name: str) -> Path:
        warehouse = tmp_path / catalog_name
        connection = postgres_connection(postgres_server, warehouse, catalog_name=catalog_name)
        del connection["login"], connection["password"]
        connection["host"] = f"{postgres_server.jdbc_uri}?user={postgres_server.user}&password={password}"
        monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", json.dumps(connection))
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(spark_connection()))
        return warehouse

    return define


def test_a_password_in_the_jdbc_url_works_and_is_in_no_command_line_or_log(
    url_password_catalog, postgres_server, capfd, caplog
):
    from airflow_iceberg.operators import IcebergCreateTableOperator

    password = postgres_server.password
    warehouse = url_password_catalog(password, "pg_url")
    create = IcebergCreateTableOperator(task_id="create", table="db.orders", source_query="SELECT 7 AS id")
    with CommandLineSampler() as sampler, caplog.at_level(logging.INFO):
        result = execute(create)
    assert result["added_records"] == 1
    orders = postgres_reader(postgres_server, warehouse, catalog_name="pg_url").load_table("db.orders")
    assert orders.scan().to_arrow()["id"].to_pylist() == [7]  # pyiceberg reads what Spark wrote
    spark_submits = [line for line in sampler.matching(SPARK_SUBMIT_JVM) if "catalog.pg_url" in line]
    assert spark_submits, "the sampler must have seen spark-submit's JVM"
    assert any(
        f"spark.sql.catalog.pg_url.uri={postgres_server.jdbc_uri}?user=" in line for line in spark_submits
    )
    assert sampler.matching(password) == []
    output = capfd.readouterr()
    logged = output.out + output.err + caplog.text
    assert "Spark-Submit cmd" in logged and "Committed snapshot" in logged
    assert password not in logged


def test_a_wrong_password_in_the_jdbc_url_is_in_no_error_or_log(url_password_catalog, capfd, caplog):
    from airflow_iceberg.operators import IcebergCreateTableOperator

    wrong = "SENTINEL-WRONG-URL-PW-2b9c"
    url_password_catalog(wrong, "pg_url_wrong")
    create = IcebergCreateTableOperator(task_id="create", table="db.orders", source_query="SELECT 7 AS id")
    with (
        CommandLineSampler() as sampler,
        caplog.at_level(logging.INFO),
        pytest.raises(IcebergJobError) as failed,
    ):
        execute(create)
    assert "UncheckedSQLException: Failed to connect: jdbc:postgresql://" in str(failed.value)
    assert "password authentication failed" in str(failed.value)
    output = capfd.readouterr()
    for text in (str(failed.value), output.out, output.err, caplog.text, *sampler.command_lines):
        assert wrong not in text


# ------------------------------------------------------------- the deployment's own secrets and pattern

#: A secret of the deployment's, in its spark-defaults.conf, which its own pattern redacts.
DEPLOYMENT_SECRET = "SENTINEL-DEPLOY-41c9"
DEPLOYMENT_KEY = "spark.executorEnv.CORP_VAULT_ROLE"  # a name no generic pattern knows
#: The deployment's pattern: it redacts "vault", which the provider's pattern does not.
DEPLOYMENT_PATTERN = r"(?i)secret|password|token|access[.]?key|vault"
#: A catalog's SSE-C key, in Secret properties (Hadoop properties refuse a secret-looking key).
CATALOG_SECRET = "SENTINEL-CATALOG-8d02"


@pytest.fixture(scope="module")
def deployment_run(tmp_path_factory):
    """One real create-table run whose spark-defaults.conf holds a secret and its redaction pattern."""
    from airflow_iceberg.operators import IcebergCreateTableOperator
    from tests.integration.catalog_connections import hadoop_connection

    root = tmp_path_factory.mktemp("deployment-secrets")
    event_log = root / "event-log"
    conf_dir = spark_conf_dir_with_event_log(root, event_log)
    with (conf_dir / "spark-defaults.conf").open("a") as defaults:
        defaults.write(
            f"spark.redaction.regex  {DEPLOYMENT_PATTERN}\n{DEPLOYMENT_KEY}  {DEPLOYMENT_SECRET}\n"
        )
    connection = hadoop_connection(root / "warehouse", "lake")
    connection["extra"]["secret_properties"] = {"hadoop.fs.s3a.encryption.key": CATALOG_SECRET}
    environment = {
        "SPARK_CONF_DIR": str(conf_dir),
        "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT": json.dumps(connection),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark_connection()),
    }
    with pytest.MonkeyPatch.context() as patch:
        for key, value in environment.items():
            patch.setenv(key, value)
        create = IcebergCreateTableOperator(task_id="create", table="db.t", source_query="SELECT 1 AS id")
        with CommandLineSampler() as sampler:
            result = execute(create)
    assert result["added_records"] == 1
    return {"event_log": event_log_text(event_log), "sampler": sampler}


def test_the_deployments_own_redaction_pattern_still_hides_its_secret(deployment_run):
    """The operator's ``--conf spark.redaction.regex`` wins over spark-defaults.conf; it merges the
    deployment's pattern in, so the deployment's own secret stays redacted in the event log."""
    event_log = deployment_run["event_log"]
    assert DEPLOYMENT_KEY in event_log, "the event log must hold the environment update"
    assert DEPLOYMENT_SECRET not in event_log


def test_an_encryption_key_in_secret_properties_is_in_no_command_line_nor_the_event_log(deployment_run):
    """An S3A SSE-C key (a name the secret detection now knows): never ``--conf``, redacted by Spark."""
    assert deployment_run["sampler"].matching(SPARK_SUBMIT_JVM)
    assert deployment_run["sampler"].matching(CATALOG_SECRET) == []
    assert CATALOG_SECRET not in deployment_run["event_log"]


#: Run an operator's execute() in a child process, as a worker's task process does.
_WORKER = """
import sys
sys.path.insert(0, {repo!r})
from airflow_iceberg.operators import IcebergCreateTableOperator
from tests.integration.in_process import execute
execute(IcebergCreateTableOperator(task_id="create", table="db.t",
        source_query="SELECT id FROM range(100000000) WHERE id % 7 = 100"))
"""


def test_a_sigkilled_worker_leaves_no_catalog_secret_on_disk(tmp_path):
    """The catalog secrets reach the driver through ``/proc/<worker>/fd/<n>``, a file in memory
    that dies with the worker: a worker killed with SIGKILL (the OOM killer, a node drain) while
    spark-submit runs leaves no file with the catalog's Password in its temp directory."""
    import signal
    import subprocess
    import sys
    import time

    from tests.integration.airflow_runner import REPO
    from tests.integration.catalog_connections import hadoop_connection

    password = "SENTINEL-KILLED-PW-7f31"
    temp = tmp_path / "worker-tmp"
    temp.mkdir()
    connection = hadoop_connection(tmp_path / "warehouse", "lake")
    connection["password"] = password
    connection["extra"]["pass_property"] = "jdbc.pw"  # a harmless property the hadoop catalog ignores
    env = {
        **os.environ,
        "TMPDIR": str(temp),
        "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT": json.dumps(connection),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark_connection()),
    }
    worker = subprocess.Popen(
        [sys.executable, "-c", _WORKER.format(repo=str(REPO))],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with CommandLineSampler() as sampler:
            deadline = time.monotonic() + 180
            # The PySpark driver runs (not only spark-submit's script and JVM, which name it too).
            while not [
                line  # this worker's driver: its arguments name this test's temp directory
                for line in sampler.matching(str(temp))
                if DRIVER in line and not re.search("spark-submit|SparkSubmit", line)
            ]:
                assert worker.poll() is None, "the worker ended before its driver started"
                assert time.monotonic() < deadline, "the worker's driver never started"
                time.sleep(0.5)
    finally:
        os.killpg(worker.pid, signal.SIGKILL)  # the worker, spark-submit and its JVM together
        worker.wait(30)
    left = [
        path for path in temp.rglob("*") if path.is_file() and password in path.read_text(errors="replace")
    ]
    try:
        assert left == [], f"the catalog's password is still on disk in {left}"
    finally:
        for path in temp.glob("airflow-iceberg-*"):
            subprocess.run(["rm", "-rf", str(path)], check=False)

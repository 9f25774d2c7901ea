"""A hostile review of the secrets guarantees (docs/guarantees.md, "## Secrets") with a real
spark-submit: what a real run leaves in Spark's event log and on the worker's disk.

Every test here fails on the code as reviewed; each docstring names the guarantee it breaks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from airflow_iceberg.exceptions import IcebergJobError, InvalidCatalogConfigError, InvalidSpecError
from tests.integration.airflow_runner import REPO, spark_connection
from tests.integration.catalog_connections import hadoop_connection
from tests.integration.event_logs import event_log_text
from tests.integration.in_process import execute
from tests.integration.process_sampler import CommandLineSampler
from tests.integration.test_secrets import spark_conf_dir_with_event_log

#: A secret of the deployment's, in its spark-defaults.conf, which its own pattern redacts.
DEPLOYMENT_SECRET = "SENTINEL-DEPLOY-41c9"
DEPLOYMENT_KEY = "spark.hadoop.fs.s3a.encryption.key"  # an S3A SSE-C key, for every job
DEPLOYMENT_PATTERN = r"(?i)secret|password|token|access[.]?key|encryption[.]key"
#: A catalog's SSE-C key in its Hadoop properties (the connection takes it: see the unit tests).
CATALOG_SECRET = "SENTINEL-CATALOG-8d02"
SPARK_SUBMIT_JVM = "org.apache.spark.deploy.SparkSubmit"


@pytest.fixture(scope="module")
def deployment_run(tmp_path_factory):
    """One real create-table run whose spark-defaults.conf holds a secret and its redaction pattern."""
    root = tmp_path_factory.mktemp("review-secrets")
    event_log = root / "event-log"
    conf_dir = spark_conf_dir_with_event_log(root, event_log)
    with (conf_dir / "spark-defaults.conf").open("a") as defaults:
        defaults.write(
            f"spark.redaction.regex  {DEPLOYMENT_PATTERN}\n{DEPLOYMENT_KEY}  {DEPLOYMENT_SECRET}\n"
        )
    connection = hadoop_connection(
        root / "warehouse", "lake", hadoop_properties={"fs.s3a.encryption.key": CATALOG_SECRET}
    )
    environment = {
        "SPARK_CONF_DIR": str(conf_dir),
        "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT": json.dumps(connection),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark_connection()),
    }
    from airflow_iceberg.operators import IcebergCreateTableOperator

    with pytest.MonkeyPatch.context() as patch:
        for key, value in environment.items():
            patch.setenv(key, value)
        create = IcebergCreateTableOperator(task_id="create", table="db.t", source_query="SELECT 1 AS id")
        with CommandLineSampler() as sampler:
            result = execute(create)
    assert result["added_records"] == 1
    return {"event_log": event_log_text(event_log), "sampler": sampler}


def test_the_deployments_own_redaction_pattern_is_replaced_and_its_secret_is_in_the_event_log(
    deployment_run,
):
    """Breaks "Spark's event log and UI hold secrets only redacted".

    A deployment keeps a secret of its own in spark-defaults.conf and extends
    ``spark.redaction.regex`` there to cover it (here an S3A SSE-C key for every job). The
    operator always passes ``--conf spark.redaction.regex=<the provider's>``, which wins over the
    properties file, and merges only the operator's ``conf``: the deployment's pattern is gone, and
    Spark's event log (and UI, History Server) shows the deployment's secret in clear as soon as
    the task runs. Without the provider the same spark-defaults.conf redacts it.
    """
    event_log = deployment_run["event_log"]
    assert DEPLOYMENT_KEY in event_log, "the event log must hold the environment update"
    assert DEPLOYMENT_SECRET not in event_log


def test_a_catalog_secret_the_detection_misses_is_in_the_command_line_and_the_event_log(deployment_run):
    """Breaks "Never on a command line" and "Spark's event log and UI hold secrets only redacted".

    The unit tests show the connection accepts an SSE-C key in Hadoop properties; this is what
    that means for real: spark-submit's JVM runs with ``--conf spark.sql.catalog.lake.hadoop.fs.
    s3a.encryption.key=<key>`` (any user's ``ps``) and the event log holds it in clear.
    """
    assert deployment_run["sampler"].matching(SPARK_SUBMIT_JVM), "the sampler must have seen spark-submit"
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


def test_a_sigkilled_worker_leaves_the_catalog_secrets_in_a_file_on_disk(tmp_path):
    """Breaks the promise that catalog secrets reach the driver in a file that lives only while the
    task runs (``operators/base.py``: "The directory is removed, with the file, when the task's
    ``execute`` ends"; docs/guarantees.md "Never on a command line" names the 0600 file).

    A worker killed with SIGKILL (the OOM killer, a node drain, ``kill -9`` of a stuck task) runs
    no ``finally``: ``airflow-iceberg-*/secret-conf.json`` stays in the worker's temp directory
    with the catalog's Password and Secret properties in clear, for good, readable by every
    later task of the same Unix user, whatever connections that task may use.
    """
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
        deadline = time.monotonic() + 180
        while not list(temp.glob("airflow-iceberg-*/secret-conf.json")):
            assert worker.poll() is None, "the worker ended before it wrote its secrets file"
            assert time.monotonic() < deadline, "the worker never wrote its secrets file"
            time.sleep(0.2)
        time.sleep(2)  # spark-submit is starting: the task is running, as a killed one would be
    finally:
        os.killpg(worker.pid, signal.SIGKILL)  # the worker, spark-submit and its JVM together
        worker.wait(30)
    left = [path for path in temp.glob("airflow-iceberg-*/secret-conf.json") if password in path.read_text()]
    try:
        assert left == [], f"the catalog's password is still on disk in {left}"
    finally:
        for path in temp.glob("airflow-iceberg-*"):
            subprocess.run(["rm", "-rf", str(path)], check=False)


# --------------------------------------------------------------------------- Spark Connect


class _RecordingCatalogServer:
    """An HTTP endpoint on loopback that records every request body (a stand-in for anyone's)."""

    def __init__(self) -> None:
        import http.server
        import threading

        bodies = self.bodies = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def _record(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                bodies.append(f"{self.command} {self.path} {self.headers}{self.rfile.read(length).decode()}")
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"error": "invalid_client"}')

            do_GET = do_POST = _record

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/catalog"

    def __enter__(self) -> _RecordingCatalogServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_any_task_can_send_the_connect_servers_catalog_secret_to_an_endpoint_of_its_choice(
    spark_connect_server, monkeypatch
):
    """Breaks "Per-task storage credentials are the task's own" and the Connect secrets design
    ("a catalog's secrets belong to the server ... every session inherits them").

    docs/spark-connect.md tells a deployment to put a catalog's secrets in the Connect server's
    SparkConf (``spark.sql.catalog.rest.credential``) and every task then sets the catalog's other
    settings on its own session. Nothing ties the two together: a task whose connection names the
    same catalog with another ``uri`` (any DAG author's connection, ``connect_server_credentials``
    on) gets a session whose catalog combines the server's OAuth2 client secret with that URI,
    and Iceberg's REST client posts ``client_secret=<it>`` there. The secret the server was
    trusted with reaches an endpoint of the task's choosing; the operator neither refuses an
    override of a server-defined catalog nor warns.
    """
    from airflow_iceberg.operators import IcebergAppendOperator
    from tests.servers.connect_catalog_secrets import REST_SECRET_KEY

    with _RecordingCatalogServer() as elsewhere:
        connection = {
            "conn_type": "iceberg_catalog",
            "host": elsewhere.uri,
            "extra": {"catalog_name": "rest", "catalog_type": "rest", "connect_server_credentials": True},
        }
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(spark_connect_server.connection()))
        monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", json.dumps(connection))
        append = IcebergAppendOperator(task_id="append", table="db.t", source_query="SELECT 1 AS id")
        try:
            execute(append)
        except (InvalidCatalogConfigError, InvalidSpecError):  # refused before a session: it held
            assert not elsewhere.bodies
            return
        except IcebergJobError:
            pass  # the session's catalog could not authenticate "elsewhere"
        received = "\n".join(elsewhere.bodies)
    assert received, "the session's catalog must have called the URI the task gave it"
    assert REST_SECRET_KEY not in received

"""Spark Connect mode, without a server: which settings reach the session, and what runs before it.

The real server tests are in tests/integration/test_spark_connect.py; these pin the decisions.
"""

from __future__ import annotations

import json
from unittest import mock

import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_iceberg.catalog.spark_settings import SparkSettings
from airflow_iceberg.exceptions import InvalidCatalogConfigError, InvalidSpecError
from airflow_iceberg.jobs.job_spec import JobRequest
from airflow_iceberg.operators import IcebergAppendOperator, IcebergMergeOperator
from airflow_iceberg.operators.connect import ConnectJob, is_spark_connect, session_settings

EXT = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"


@pytest.fixture
def connect_connections(iceberg_connection, monkeypatch):
    connection = {"conn_type": "spark_connect", "host": "127.0.0.1", "port": 1}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(connection))
    return iceberg_connection(
        password="SENTINEL-pw",
        extra={
            "catalog_name": "demo",
            "catalog_type": "hadoop",
            "warehouse": "file:///wh",
            "connect_server_credentials": True,  # the server defines the secret (S3A key)
        },
    )


def test_the_connection_type_picks_the_mode(monkeypatch, spark_connection):
    assert not is_spark_connect("spark_default")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark_connect", "host": "h"}))
    assert is_spark_connect("spark_default")


def test_session_settings_are_the_catalogs_and_the_users_without_server_only_ones():
    settings = SparkSettings(
        conf={
            "spark.sql.extensions": EXT,
            "spark.redaction.regex": "x",
            "spark.sql.catalog.demo": "org.apache.iceberg.spark.SparkCatalog",
            "spark.sql.catalog.demo.type": "hadoop",
        },
        secret_conf={"spark.sql.catalog.demo.credential": "SENTINEL"},
        catalog_names=("demo", "other"),
    )
    user_conf = {
        "spark.sql.catalog.demo.type": "rest",
        "spark.sql.shuffle.partitions": 3,
        "spark.sql.catalog.demo.token": "SENTINEL",  # secret-looking: the server's to set
    }
    conf = session_settings(settings, user_conf)
    assert conf == {
        "spark.sql.catalog.demo": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.demo.type": "rest",  # the user's conf wins, as in spark-submit mode
        "spark.sql.defaultCatalog": "demo",
        "spark.sql.shuffle.partitions": "3",
    }


def test_jvm_only_features_are_refused_before_any_session_opens(connect_connections):
    merge = IcebergMergeOperator(
        task_id="merge",
        table="db.t",
        source_query="SELECT 1 AS id",
        keys=["id"],
        clauses=[{"when": "matched", "then": "delete"}],
    )
    with (
        mock.patch.object(ConnectJob, "run") as run,
        mock.patch.object(SparkSubmitOperator, "execute") as submit,
        pytest.raises(InvalidSpecError, match=r"demo\.db\.t: MERGE INTO is spark-submit only"),
    ):
        merge.execute({})
    run.assert_not_called()
    submit.assert_not_called()


def test_bad_input_fails_before_any_session_opens(connect_connections):
    append = IcebergAppendOperator(task_id="a", table="db.t; DROP TABLE x", source_query="SELECT 1")
    with mock.patch.object(ConnectJob, "run") as run, pytest.raises(InvalidSpecError):
        append.execute({})
    run.assert_not_called()


def test_connect_mode_runs_no_spark_submit_and_keeps_secrets_out_of_files(connect_connections, tmp_path):
    seen = {}

    def run(self, settings, request: JobRequest, user_conf):
        seen["secrets"], seen["secret_file"] = settings.secret_conf, request.secret_conf_file
        with open(request.result_file, "w") as handle:
            json.dump({"status": "success", "table": "demo.db.t", "snapshot_id": 1}, handle)
        return 0

    append = IcebergAppendOperator(task_id="a", table="db.t", source_query="SELECT 1")
    with (
        mock.patch.object(ConnectJob, "run", run),
        mock.patch.object(SparkSubmitOperator, "execute") as submit,
    ):
        assert append.execute({})["snapshot_id"] == 1
    submit.assert_not_called()
    assert seen["secret_file"] is None  # secrets go from memory to the session, never to a file
    assert "SENTINEL-pw" in seen["secrets"].values()


def test_on_kill_interrupts_the_connect_job_not_spark_submit(connect_connections):
    append = IcebergAppendOperator(task_id="a", table="db.t", source_query="SELECT 1")
    job = mock.Mock(spec=ConnectJob)
    append._connect_job = job
    with mock.patch.object(SparkSubmitOperator, "on_kill") as submit_kill:
        append.on_kill()
    job.interrupt.assert_called_once_with()
    submit_kill.assert_not_called()


class FakeSession:
    """What ``ConnectJob.run`` uses of a Connect session: its conf (the server's), tags, stop."""

    def __init__(self, server_conf: dict[str, str]) -> None:
        self.server_conf = server_conf
        self.sent: dict[str, str] = {}
        self.session_id, self.is_stopped = "s1", False
        self.conf = mock.Mock()
        self.conf.get.side_effect = lambda key, default=None: self.sent.get(
            key, server_conf.get(key, default)
        )
        self.conf.set.side_effect = self.sent.__setitem__

    def addTag(self, tag: str) -> None:
        pass

    def stop(self) -> None:
        self.is_stopped = True


def _run_connect_job(monkeypatch, server_conf, settings, user_conf=None):
    """``ConnectJob.run`` against a fake server; returns the session and whether the job ran."""
    from pyspark.sql.connect.session import SparkSession

    session = FakeSession(server_conf)
    builder = mock.Mock()
    builder.remote.return_value.create.return_value = session
    monkeypatch.setattr(SparkSession, "Builder", lambda: builder)
    ran = mock.Mock(return_value=0)
    monkeypatch.setattr("airflow_iceberg.jobs.iceberg_job.run_job", ran)
    job = ConnectJob("spark_default", mock.Mock())
    try:
        job.run(settings, JobRequest(spec=mock.Mock(), result_file="/tmp/r.json"), user_conf)
    finally:
        assert session.is_stopped
    return session, ran


SECRET_SETTINGS = SparkSettings(
    conf={
        "spark.sql.catalog.demo": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.demo.type": "hadoop",
    },
    secret_conf={"spark.sql.catalog.demo.jdbc.pw": "SENTINEL-pw"},
    catalog_names=("demo",),
)


@pytest.mark.parametrize(
    ("extra", "conf", "message"),
    [
        (
            {},
            None,
            r"^Spark Connect: catalog 'demo' has secret setting\(s\) "
            r"spark\.sql\.catalog\.demo\.hadoop\.fs\.s3a\.secret\.key, and a task never sends a secret "
            r"per session: .* turn on connect_server_credentials",
        ),
        (
            {"connect_server_credentials": True},
            {"spark.hadoop.fs.s3a.secret.key": "SENTINEL-conf"},
            r"^Spark Connect: the operator's conf sets spark\.hadoop\.fs\.s3a\.secret\.key, which looks "
            r"like a secret, .* Define it on the Spark Connect server and remove it from conf",
        ),
    ],
)
def test_a_per_session_secret_is_refused_before_any_session_opens(
    iceberg_connection, monkeypatch, extra, conf, message
):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark_connect", "host": "h"}))
    iceberg_connection(
        password="SENTINEL-pw",
        extra={"catalog_name": "demo", "catalog_type": "hadoop", "warehouse": "file:///wh", **extra},
    )
    append = IcebergAppendOperator(task_id="a", table="db.t", source_query="SELECT 1", conf=conf)
    with (
        mock.patch.object(ConnectJob, "run") as run,
        pytest.raises(InvalidCatalogConfigError, match=message) as refused,
    ):
        append.execute({})
    run.assert_not_called()
    assert "SENTINEL" not in str(refused.value) and "spark-submit mode" in str(refused.value)


def test_a_secret_the_server_shows_in_clear_is_refused(connect_connections, monkeypatch):
    """Spark Connect hides a setting its redaction pattern matches; one it returns is unredacted."""
    with pytest.raises(InvalidCatalogConfigError) as refused:
        _run_connect_job(monkeypatch, {"spark.sql.catalog.demo.jdbc.pw": "the-servers"}, SECRET_SETTINGS)
    assert str(refused.value).startswith(
        "Spark Connect: the server shows its spark.sql.catalog.demo.jdbc.pw to any client, so its "
        "spark.redaction.regex does not match it"
    )
    assert "the-servers" not in str(refused.value)


def test_the_servers_own_secret_is_used_and_the_task_sends_none(connect_connections, monkeypatch):
    session, ran = _run_connect_job(monkeypatch, {}, SECRET_SETTINGS)  # {}: redacted settings read as unset
    ran.assert_called_once()
    assert session.sent == {
        "spark.sql.catalog.demo": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.demo.type": "hadoop",
        "spark.sql.defaultCatalog": "demo",
    }

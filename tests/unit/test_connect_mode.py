"""Spark Connect mode, without a server: which settings reach the session, and what runs before it.

The real server tests are in tests/integration/test_spark_connect.py; these pin the decisions.
"""

from __future__ import annotations

import json
from unittest import mock

import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_iceberg.catalog.spark_settings import SparkSettings
from airflow_iceberg.exceptions import InvalidSpecError
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
        extra={"catalog_name": "demo", "catalog_type": "hadoop", "warehouse": "file:///wh"},
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
    user_conf = {"spark.sql.catalog.demo.type": "rest", "spark.sql.shuffle.partitions": 3}
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

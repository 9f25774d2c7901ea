"""Spark Connect mode, without a server: which settings reach the session, and what runs before it.

The real server tests are in tests/integration/test_spark_connect.py; these pin the decisions.
"""

from __future__ import annotations

import json
import re
import uuid
from unittest import mock

import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_iceberg.catalog.spark_settings import SparkSettings
from airflow_iceberg.exceptions import InvalidCatalogConfigError, InvalidSpecError
from airflow_iceberg.jobs.spec.request import JobRequest
from airflow_iceberg.operators import (
    IcebergAppendOperator,
    IcebergDeleteOperator,
    IcebergMergeOperator,
    IcebergRemoveOrphanFilesOperator,
)
from airflow_iceberg.operators.connect import (
    PROGRESS_INTERVAL_KEY,
    ConnectJob,
    is_spark_connect,
    session_settings,
    with_user_id,
)
from airflow_iceberg.operators.connect_file_systems import shared_file_system_refusal
from airflow_iceberg.operators.connect_tries import CommitKeys, EarlierRuns, TryNumbers

EXT = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"


@pytest.fixture
def connect_connections(iceberg_connection, monkeypatch):
    connection = {"conn_type": "spark_connect", "host": "127.0.0.1", "port": 1}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(connection))
    return iceberg_connection(  # the password fills a property of its own, not S3A's secret key
        password="SENTINEL-pw",
        extra={
            "catalog_name": "demo",
            "catalog_type": "hadoop",
            "warehouse": "file:///wh",
            "pass_property": "p",
            "connect_server_credentials": True,  # the server defines the secret
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
    orphans = IcebergRemoveOrphanFilesOperator(
        task_id="orphans", table="db.t", older_than="2024-01-01T00:00:00+00:00", allow_recent_files=True
    )
    with (
        mock.patch.object(ConnectJob, "run") as run,
        mock.patch.object(SparkSubmitOperator, "execute") as submit,
        pytest.raises(InvalidSpecError, match=r"demo\.db\.t: orphan-file removal with allow_recent_files is"),
    ):
        orphans.execute({})
    run.assert_not_called()
    submit.assert_not_called()


def test_sql_commits_reach_the_job_over_connect_which_asks_the_server(connect_connections):
    """The operator cannot know the server's versions: MERGE and DELETE go to the job, which refuses
    an old server (:func:`test_a_sql_commit_is_refused_on_a_server_that_would_commit_it_untagged`)."""
    seen = []

    def run(self, settings, request: JobRequest, user_conf, tries):
        seen.append(type(request.spec).__name__)
        with open(request.result_file, "w") as handle:
            json.dump({"status": "success", "table": "demo.db.t", "snapshot_id": 1}, handle)
        return 0

    merge = IcebergMergeOperator(
        task_id="merge",
        table="db.t",
        source_query="SELECT 1 AS id",
        keys=["id"],
        clauses=[{"when": "matched", "then": "delete"}],
    )
    delete = IcebergDeleteOperator(task_id="delete", table="db.t", condition="id = 1")
    with mock.patch.object(ConnectJob, "run", run), mock.patch.object(SparkSubmitOperator, "execute"):
        merge.execute({})
        delete.execute({})
    assert seen == ["MergeSpec", "DeleteSpec"]


@pytest.mark.parametrize(
    ("spark_version", "iceberg_version", "refused"),
    [
        ("4.1.4", "1.12.0", None),
        ("4.0.1", "1.11.0", None),
        (
            "4.0.1",
            "1.10.2",
            "needs Iceberg 1.11 or later on the server, and demo.db.t's catalog runs Iceberg 1.10.2",
        ),
        ("3.5.7", "1.12.0", "needs a server on Spark 4.0 or later, and this one runs Spark 3.5.7"),
        ("4.1.4", None, "the server does not tell which release demo.db.t's catalog runs"),
    ],
)
def test_a_sql_commit_is_refused_on_a_server_that_would_commit_it_untagged(
    spark_version, iceberg_version, refused
):
    from airflow_iceberg.jobs import session_commit_tags
    from airflow_iceberg.jobs.spec.row_changes import DeleteSpec

    spec = DeleteSpec("demo.db.t", condition="id = 1").validated()
    spark = mock.Mock(version=spark_version)
    with (
        mock.patch.object(session_commit_tags.connect, "is_connect", return_value=True),
        mock.patch.object(session_commit_tags, "runtime_version", return_value=iceberg_version) as asked,
    ):
        if refused is None:
            session_commit_tags.require_session_tags(spark, spec)
        else:
            with pytest.raises(InvalidSpecError, match=re.escape(refused)) as error:
                session_commit_tags.require_session_tags(spark, spec)
            assert str(error.value).startswith("DELETE FROM over Spark Connect")
            assert str(error.value).endswith("Nothing was changed")
    asked.assert_called_once_with(spark, "demo.db.t")
    spark.sql.assert_not_called()  # nothing ran on the session but the question


def test_only_sql_commits_ask_the_server():
    from airflow_iceberg.jobs import session_commit_tags
    from tests.jobs.helpers import write_spec

    spark = mock.Mock(version="3.5.7")
    with (
        mock.patch.object(session_commit_tags.connect, "is_connect", return_value=True),
        mock.patch.object(session_commit_tags, "runtime_version", return_value="1.4.0") as asked,
    ):
        session_commit_tags.require_session_tags(spark, write_spec("demo.db.t", "create", "SELECT 1 AS id"))
        with pytest.raises(InvalidSpecError, match=r"^a create partitioned by truncate\(W, col\)"):
            spec = write_spec("demo.db.t", "create", "SELECT 'a' AS s", partition_by=["truncate(2, s)"])
            session_commit_tags.require_session_tags(spark, spec)
    asked.assert_called_once()


def test_bad_input_fails_before_any_session_opens(connect_connections):
    append = IcebergAppendOperator(task_id="a", table="db.t; DROP TABLE x", source_query="SELECT 1")
    with mock.patch.object(ConnectJob, "run") as run, pytest.raises(InvalidSpecError):
        append.execute({})
    run.assert_not_called()


def test_connect_mode_runs_no_spark_submit_and_keeps_secrets_out_of_files(connect_connections, tmp_path):
    seen = {}

    def run(self, settings, request: JobRequest, user_conf, tries):
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


def _run_connect_job(monkeypatch, server_conf, settings, user_conf=None, held=()):
    """``ConnectJob.run`` against a fake server; returns the session and whether the job ran.

    ``held``: the catalogs whose secrets the server holds (``connect_server_credentials``).
    """
    from pyspark.sql.connect.session import SparkSession

    session = FakeSession(server_conf)
    builder = mock.Mock()
    builder.remote.return_value._registerHook.return_value.create.return_value = session
    monkeypatch.setattr(SparkSession, "Builder", lambda: builder)
    ran = mock.Mock(return_value=0)
    monkeypatch.setattr("airflow_iceberg.jobs.iceberg_job.run_job", ran)
    job = ConnectJob("spark_default", mock.Mock(), held)
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
            r"spark\.sql\.catalog\.demo\.jdbc\.pw, and a task never sends a secret "
            r"per session: .* turn on connect_server_credentials",
        ),
        (
            {"connect_server_credentials": True},
            {"spark.sql.catalog.demo.credential": "SENTINEL-conf"},
            r"^Spark Connect: the operator's conf sets spark\.sql\.catalog\.demo\.credential, which looks "
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
        extra={
            "catalog_name": "demo",
            "catalog_type": "hadoop",
            "warehouse": "file:///wh",
            "pass_property": "jdbc.pw",  # not S3A's key, which is refused as a per-task file system setting
            **extra,
        },
    )
    append = IcebergAppendOperator(task_id="a", table="db.t", source_query="SELECT 1", conf=conf)
    with (
        mock.patch.object(ConnectJob, "run") as run,
        pytest.raises(InvalidCatalogConfigError, match=message) as refused,
    ):
        append.execute({})
    run.assert_not_called()
    assert "SENTINEL" not in str(refused.value) and "spark-submit mode" in str(refused.value)


ENDPOINT_SETTINGS = SparkSettings(
    conf={
        "spark.sql.catalog.rest": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.rest.type": "rest",
        "spark.sql.catalog.rest.uri": "https://rest.example/catalog",
        "spark.sql.catalog.rest.warehouse": "s3://lake",
    },
    catalog_names=("rest",),
)


@pytest.mark.parametrize(
    ("server_conf", "user_conf", "refused_keys"),
    [
        (  # another uri than the server's
            {
                "spark.sql.catalog.rest.uri": "https://the-servers.example/",
                "spark.sql.catalog.rest.warehouse": "s3://lake",
            },
            None,
            "spark.sql.catalog.rest.uri",
        ),
        (  # the operator's conf names another token endpoint
            {
                "spark.sql.catalog.rest.uri": "https://rest.example/catalog",
                "spark.sql.catalog.rest.warehouse": "s3://lake",
                "spark.sql.catalog.rest.oauth2-server-uri": "https://rest.example/catalog/v1/oauth/tokens",
                "spark.sql.catalog.rest.s3.endpoint": "https://s3.example",
            },
            {
                "spark.sql.catalog.rest.oauth2-server-uri": "https://elsewhere/token",
                "spark.sql.catalog.rest.s3.endpoint": "x",
            },
            "spark.sql.catalog.rest.oauth2-server-uri, spark.sql.catalog.rest.s3.endpoint",
        ),
    ],
    ids=["another-uri", "conf-endpoints"],
)
def test_a_server_held_catalog_is_never_pointed_elsewhere(
    connect_connections, monkeypatch, server_conf, user_conf, refused_keys
):
    """The server holds catalog ``rest``'s secret: an endpoint that is not exactly the server's is
    refused before the task sets anything or runs, and names the keys, never a value."""
    with pytest.raises(InvalidCatalogConfigError) as refused:
        _run_connect_job(monkeypatch, server_conf, ENDPOINT_SETTINGS, user_conf, held=("rest",))
    assert f"the task would set {refused_keys}, which the server defines otherwise" in str(refused.value)
    assert "elsewhere" not in str(refused.value) and "example" not in str(refused.value)


@pytest.mark.parametrize("shown", [True, False], ids=["shown", "unset-or-redacted"])
def test_a_server_held_catalogs_endpoints_are_the_servers_and_never_sent(
    connect_connections, monkeypatch, shown
):
    """Identical to the server's, or not shown by it (unset, or redacted by value): never sent."""
    server = {
        "spark.sql.catalog.rest.uri": "https://rest.example/catalog",
        "spark.sql.catalog.rest.warehouse": "s3://lake",
    }
    session, ran = _run_connect_job(monkeypatch, server if shown else {}, ENDPOINT_SETTINGS, held=("rest",))
    ran.assert_called_once()
    assert "spark.sql.catalog.rest.type" in session.sent
    assert not {"spark.sql.catalog.rest.uri", "spark.sql.catalog.rest.warehouse"} & set(session.sent)


@pytest.mark.parametrize(
    "key",
    [
        "spark.sql.catalog.rest.adls.connection-string.acct.dfs.core.windows.net",  # ADLS endpoint
        "spark.sql.catalog.rest.s3.access-points.lake",  # S3 access point: another bucket's host
        "spark.sql.catalog.rest.s3.signer",  # the signer the S3 client asks
    ],
)
def test_a_server_held_catalogs_storage_endpoints_are_never_sent(key):
    """Storage settings that say where the file IO connects, and so where the server's storage
    keys (an ADLS SAS token, S3 keys) go, are endpoints too."""
    from airflow_iceberg.operators.connect_secrets import server_held_endpoints

    conf = {key: "https://attacker.example/", "spark.sql.catalog.rest.s3.path-style-access": "true"}
    assert server_held_endpoints(["rest"], conf) == [key]


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
        PROGRESS_INTERVAL_KEY: "-1",
    }


# ----------------------------------------------------- exactly-once over Connect (issue 17)


def test_commit_keys_give_each_run_of_each_try_its_own_ids_which_the_secrets_key():
    secrets = ["token", "catalog-secret"]
    keys = CommitKeys("dag:task:run:-1:1:", secrets)
    first = keys.run(1, 0)
    assert first == CommitKeys("dag:task:run:-1:1:", secrets).run(1, 0)  # a retry finds it again
    others = [keys.run(2, 0), keys.run(1, 1), CommitKeys("dag:task:run:-1:2:", secrets).run(1, 0)]
    others.append(CommitKeys("dag:task:run:-1:1:", ["other-token", "catalog-secret"]).run(1, 0))
    assert len({ids.session_id for ids in [first, *others]}) == 5
    assert first.session_id != first.operation_id
    for value in (first.session_id, first.operation_id):
        assert uuid.UUID(value).version == 4  # the server and pyspark want UUIDs
    assert len(first.fingerprint) == 8 and first.fingerprint not in first.session_id


class FakeServer:
    """The few RPCs of :class:`RemoteOperations`, over a dict of sessions: {session id: state}."""

    def __init__(self, sessions, running=()):
        self.sessions = dict(sessions)
        self.running = set(running)  # operation ids that exist on the server
        self.calls = []

    def session_state(self, session_id):
        return self.sessions.get(session_id, "absent")

    def claim(self, ids):
        self.calls.append(("claim", ids.session_id))
        return ids.operation_id not in self.running

    def wait_until_ended(self, ids, timeout=None):
        self.calls.append(("wait", ids.session_id))
        self.running.discard(ids.operation_id)
        return True

    def release_session(self, session_id):
        self.calls.append(("release", session_id))
        self.sessions[session_id] = "closed"


def test_a_try_settles_every_earlier_run_before_it_takes_the_first_unseen_session():
    keys = CommitKeys("c", [""])
    try1, try1_again, try2 = keys.run(1, 0), keys.run(1, 1), keys.run(2, 0)
    # Try 1 ran twice: its first run is closed, its second was killed mid-write.
    server = FakeServer(
        {try1.session_id: "closed", try1_again.session_id: "open"}, running={try1_again.operation_id}
    )
    ids = EarlierRuns(server, keys, mock.Mock()).settle(1, 3)
    assert server.calls == [
        ("claim", try1_again.session_id),
        ("wait", try1_again.session_id),
        ("release", try1_again.session_id),
    ]
    assert ids == keys.run(3, 0) and try2.session_id not in server.sessions
    # The same try run again (``airflow tasks test``) settles its own first run, and takes the next.
    again = EarlierRuns(server, keys, mock.Mock()).settle(3, 3)
    assert again == ids
    server.sessions[ids.session_id] = "open"
    server.calls.clear()
    assert EarlierRuns(server, keys, mock.Mock()).settle(3, 3) == keys.run(3, 1)
    assert server.calls == [("claim", ids.session_id), ("release", ids.session_id)]  # no write to wait for


def test_the_hook_names_only_the_committing_request_once_and_refuses_any_after_a_kill():
    from pyspark.sql.connect import proto

    from airflow_iceberg.jobs.connect import committing
    from airflow_iceberg.operators.connect import commit_operation_hook

    job = ConnectJob("spark_default", mock.Mock())
    job.ids = CommitKeys("c", [""]).run(1, 0)
    hook = commit_operation_hook(job)(None)
    assert hook.on_execute_plan(proto.ExecutePlanRequest()).operation_id == ""  # a check, a read
    with committing():
        assert hook.on_execute_plan(proto.ExecutePlanRequest()).operation_id == job.ids.operation_id
        assert hook.on_execute_plan(proto.ExecutePlanRequest()).operation_id == ""  # only the first
    assert job.commit_started
    job.killed = True
    with pytest.raises(RuntimeError, match="the task was killed"):
        hook.on_execute_plan(proto.ExecutePlanRequest())


def test_a_retry_knows_its_try_and_the_first_try_of_its_commit(connect_connections):
    append = IcebergAppendOperator(task_id="a", table="db.t", source_query="SELECT 1", retries=3)
    ti = mock.Mock(try_number=4, max_tries=5)  # cleared after try 2 (max_tries = 2 + 3), now its retry
    assert append._try_numbers({"ti": ti}) == TryNumbers(first=3, current=4)
    assert append._commit_id({"ti": ti}).split(":")[4] == "3"
    assert append._try_numbers({}) is None
    append.idempotent = False
    assert append._try_numbers({"ti": ti}) is None


def test_without_a_login_every_try_uses_one_user_id():
    assert with_user_id("sc://h:1/", None) == "sc://h:1/;user_id=airflow-iceberg"
    assert with_user_id("sc://h:1/;user_id=etl;token=t", "etl") == "sc://h:1/;user_id=etl;token=t"


# ------------------------------------------------ per-task file system settings (issue 17 #12)


def test_per_catalog_hadoop_file_system_settings_are_refused_over_connect_before_any_session(
    iceberg_connection, monkeypatch
):
    connection = {"conn_type": "spark_connect", "host": "127.0.0.1", "port": 1}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(connection))
    iceberg_connection(
        login="AKIA",
        password="SENTINEL-s3a-secret",
        extra={
            "catalog_name": "lake",
            "catalog_type": "hadoop",
            "warehouse": "s3a://bucket/wh",
            "hadoop_properties": {"fs.s3a.endpoint": "http://s3", "hive.metastore.sasl.enabled": "false"},
        },
    )
    append = IcebergAppendOperator(task_id="a", table="db.t", source_query="SELECT 1")
    with mock.patch.object(ConnectJob, "run") as run, pytest.raises(InvalidSpecError) as refused:
        append.execute({})
    run.assert_not_called()
    message = str(refused.value)
    assert message.startswith("lake.db.t: per-task Hadoop file system settings cannot work over")
    assert "hadoop_properties 'fs.s3a.endpoint', login (it sets hadoop.fs.s3a.access.key)" in message
    assert "password (it sets hadoop.fs.s3a.secret.key)" in message
    assert "hive.metastore" not in message and "SENTINEL" not in message


def test_what_counts_as_a_per_task_file_system_setting():
    from airflow_iceberg.catalog.config import CatalogConfig

    s3_file_io = CatalogConfig(
        catalog_name="rest",
        catalog_type="rest",
        login="id",
        password="secret",
        io_impl="org.apache.iceberg.aws.s3.S3FileIO",
        catalog_properties={"s3.secret-access-key": "x", "hadoop.hive.metastore.uris": "thrift://h"},
    )
    assert shared_file_system_refusal([s3_file_io], {"spark.sql.shuffle.partitions": "4"}) is None
    hdfs = CatalogConfig(
        catalog_name="hdfs", secret_properties={"hadoop.dfs.client.read.shortcircuit": "true"}
    )
    user_conf = {
        "spark.hadoop.fs.s3a.secret.key": "x",
        "spark.sql.catalog.hadoop.hadoop.fs.gs.project.id": "p",  # a catalog named hadoop
        "spark.sql.catalog.lake.warehouse": "s3a://b",
    }
    refused = shared_file_system_refusal([hdfs], user_conf)
    assert refused is not None
    found = refused.split(": ", 1)[1].split(". ", 1)[0]
    assert found == (
        "secret_properties 'hadoop.dfs.client.read.shortcircuit', conf 'spark.hadoop.fs.s3a.secret.key', "
        "conf 'spark.sql.catalog.hadoop.hadoop.fs.gs.project.id'"
    )


# ----------------------------------------------------------- errors that say why (issue 17 #14)


def test_a_connect_error_names_its_root_cause():
    from pyspark.errors.exceptions.connect import SparkException

    from airflow_iceberg.jobs.iceberg_job import describe_error

    trace = "\n".join(
        [
            "org.apache.spark.SparkException",
            "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:1)",
            "Caused by: java.io.UncheckedIOException: Failed to close current writer",
            "\tat org.apache.iceberg.io.RollingFileWriter.closeCurrentWriter(RollingFileWriter.java:1)",
            "Caused by: software.amazon.awssdk.services.s3.model.S3Exception: Access Denied (Service: S3, "
            "Status Code: 403, Request ID: 1)",
            "\tat software.amazon.awssdk.services.s3.DefaultS3Client.putObject(DefaultS3Client.java:1)",
        ]
    )
    error = SparkException(
        "Job aborted due to stage failure: Failed to close current writer", server_stacktrace=trace
    )
    assert describe_error(error) == (
        "SparkException: Job aborted due to stage failure: Failed to close current writer "
        "(caused by S3Exception: Access Denied (Service: S3, Status Code: 403, Request ID: 1))"
    )
    assert describe_error(ValueError("plain")) == "ValueError: plain"


def test_a_lost_session_says_what_happened_and_what_to_do_without_its_id():
    from pyspark.errors import PySparkRuntimeError
    from pyspark.errors.exceptions.connect import UnknownException

    from airflow_iceberg.jobs.iceberg_job import describe_error

    handle = str(uuid.uuid4())
    lost = [
        UnknownException(
            f"[INVALID_HANDLE.SESSION_NOT_FOUND] The handle {handle} is invalid. Session not found.",
            errorClass="INVALID_HANDLE.SESSION_NOT_FOUND",
            messageParameters={"handle": handle},
        ),
        # pyspark's own error when a reattach after a server restart finds no session
        PySparkRuntimeError(
            errorClass="RESPONSE_ALREADY_RECEIVED",
            messageParameters={"error_type": "INVALID_HANDLE.SESSION_NOT_FOUND"},
        ),
    ]
    for error in lost:
        text = describe_error(error)
        assert text.startswith(
            "the Spark Connect server no longer has this task's session (INVALID_HANDLE.SESSION_NOT_FOUND): "
            "it restarted, or the session was released or expired"
        )
        assert "Retrying is safe" in text and handle not in text


def test_an_operation_cancelled_because_its_session_was_released_says_the_session_is_gone():
    """Releasing a session cancels its running write: the client sees OPERATION_CANCELED, and
    only the next call says SESSION_CLOSED. A cancel in a session that is still there stays as is."""
    from pyspark.errors.exceptions.connect import UnknownException

    from airflow_iceberg.jobs.iceberg_job import session_lost_under

    cancelled = UnknownException(
        "(org.apache.spark.SparkSQLException) [OPERATION_CANCELED] Operation has been canceled.",
        errorClass="OPERATION_CANCELED",
    )
    handle = str(uuid.uuid4())

    class Conf:
        def __init__(self, closed: bool) -> None:
            self.closed = closed

        def get(self, key: str) -> str:
            if self.closed:
                raise UnknownException(
                    f"[INVALID_HANDLE.SESSION_CLOSED] The handle {handle} is invalid. Session was closed.",
                    errorClass="INVALID_HANDLE.SESSION_CLOSED",
                )
            return "UTC"

    def session(closed: bool) -> object:
        remote = type("SparkSession", (), {"__module__": "pyspark.sql.connect.session"})()
        remote.conf = Conf(closed)
        return remote

    text = session_lost_under(session(closed=True), cancelled)
    assert text is not None and text.startswith(
        "the Spark Connect server no longer has this task's session (INVALID_HANDLE.SESSION_CLOSED)"
    )
    assert handle not in text
    assert session_lost_under(session(closed=False), cancelled) is None
    assert session_lost_under(session(closed=True), ValueError("another failure")) is None
    classic = type("SparkSession", (), {"__module__": "pyspark.sql.session"})()
    assert session_lost_under(classic, cancelled) is None


# ------------------------------------------------------------- from a hostile review of the ledger

SENTINEL = "SENTINEL-5e7a"


def test_a_secret_key_without_a_password_like_word_is_never_sent_per_session():
    """An S3 SSE-C key (``s3.sse.key``), in Secret properties or the operator's ``conf``, is a
    secret: never set on the session (the server copies session settings into every job's
    properties, in clear in its event log)."""
    from airflow_iceberg.catalog.config import config_from_fields
    from airflow_iceberg.catalog.spark_settings import combined_settings

    config = config_from_fields(
        extra={
            "catalog_name": "lake",
            "catalog_type": "hadoop",
            "warehouse": "file:///wh",
            "secret_properties": {"s3.sse.key": SENTINEL},
        }
    )
    sent = session_settings(combined_settings([config]), {"spark.sql.catalog.lake.s3.sse.key": SENTINEL})
    assert not [key for key, value in sent.items() if SENTINEL in value]


@pytest.mark.parametrize(
    "key,value",
    [
        ("fs.s3a.endpoint", "http://task-b-s3:8333"),
        ("fs.s3a.aws.credentials.provider", "org.apache.hadoop.fs.s3a.AnonymousAWSCredentialsProvider"),
        ("fs.s3a.bucket.lake.endpoint", "http://task-b-s3:8333"),
    ],
)
def test_a_bare_hadoop_key_in_conf_is_refused_like_the_prefixed_one(
    key, value, iceberg_connection, monkeypatch
):
    """Spark copies every session setting into the Hadoop Configuration of a catalog
    (``SessionState.newHadoopConf``), so ``conf={"fs.s3a.endpoint": ...}`` without ``spark.hadoop.``
    reaches the server-wide FileSystem cache like ``spark.hadoop.fs.s3a.endpoint``: refused too,
    before any session opens."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT",
        json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1", "port": 1}),
    )
    iceberg_connection(extra={"catalog_name": "lake", "catalog_type": "hadoop", "warehouse": "s3a://lake/wh"})
    append = IcebergAppendOperator(task_id="a", table="db.t", source_query="SELECT 1", conf={key: value})
    with (
        mock.patch.object(ConnectJob, "run", return_value=0) as run,
        pytest.raises(InvalidSpecError, match=f"conf '{key}'"),
    ):
        append.execute({})
    run.assert_not_called()


@pytest.mark.parametrize("host", ["", "sc://"])
def test_a_connect_connection_without_a_host_is_refused_without_quoting_its_url(
    host, iceberg_connection, monkeypatch
):
    """pyspark refuses a URL without a host by quoting it, token included, percent-encoded
    (``==`` as ``%3D%3D``), which Airflow's masker did not know. An empty Host is refused first,
    quoting no URL; the encoded token is registered with the masker as well."""
    from urllib.parse import quote

    from airflow.sdk._shared.secrets_masker import redact

    token = "c2VjcmV0LXRva2VuIQ=="  # base64, as Spark Connect tokens often are
    connection = {"conn_type": "spark_connect", "host": host, "port": 15002, "password": token}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(connection))
    iceberg_connection(extra={"catalog_type": "hadoop", "warehouse": "file:///wh"})
    append = IcebergAppendOperator(task_id="a", table="db.t", source_query="SELECT 1")
    with pytest.raises(Exception, match="Host is empty") as failed:
        append.execute({})
    assert "c2VjcmV0LXRva2VuIQ" not in str(failed.value)
    assert "c2VjcmV0LXRva2VuIQ" not in redact(f"any message quoting {quote(token)}")


def test_limit_without_a_secret_a_sessions_id_follows_from_the_commit_id():
    """A documented limit (docs/spark-connect.md "Limits"): the session and committing-operation
    ids are an HMAC keyed by the task's secrets (the Connect token, the catalogs' secret settings);
    a task with none (a server without authentication, a catalog whose secrets are all the
    server's) has a constant key, so the ids follow from the commit id, which its log shows. The
    server is the trust boundary: whoever reaches an unauthenticated server can use its catalogs."""
    from airflow_iceberg.catalog.config import config_from_fields
    from airflow_iceberg.catalog.spark_settings import combined_settings

    config = config_from_fields(
        extra={"catalog_name": "lake", "catalog_type": "hadoop", "warehouse": "file:///wh"}
    )
    commit_id = "sales:load:scheduled__2026-12-01T00:00:00+00:00:-1:1:2026-12-01T00:00:05.123456+00:00"
    request = JobRequest(spec=mock.Mock(), result_file="/tmp/r.json", commit_id=commit_id, reuse_commit=True)
    job = ConnectJob("spark_connect_default", mock.Mock())
    job._remote = mock.Mock(session_state=mock.Mock(return_value="absent"))
    ids = job._settle(request, combined_settings([config]), token=None, tries=TryNumbers(first=1, current=1))
    assert ids == CommitKeys(commit_id, [""]).run(1, 0)  # what a reader of the task log computes
    with_token = job._settle(request, combined_settings([config]), token="t0ken", tries=TryNumbers(1, 1))
    assert with_token != ids  # a token (any secret) keys them


class _Server:
    """Spark Connect sessions by id: "open" or "closed"; absent ones were never seen or forgotten."""

    def __init__(self, sessions, running):
        self.sessions, self.running, self.calls = dict(sessions), set(running), []

    def session_state(self, session_id):
        return self.sessions.get(session_id, "absent")

    def claim(self, ids):
        self.calls.append("claim")
        return ids.operation_id not in self.running

    def wait_until_ended(self, ids, timeout=None):
        self.calls.append("wait")
        self.running.discard(ids.operation_id)
        return True

    def release_session(self, session_id):
        self.calls.append("release")
        self.sessions[session_id] = "closed"


def test_limit_a_retry_stops_at_a_closed_session_the_server_forgot():
    """A documented limit (docs/spark-connect.md "Limits"): a closed session is remembered only as
    one of ``spark.connect.session.manager.closedSessionsTombstonesSize`` tombstones (1000 by
    default, across every client). Once run 0 of a try is forgotten, its id reads as never seen,
    and the retry stops scanning that try there: a run 1 of the same try (``airflow tasks test``
    next to the scheduler's run) that is still writing is not waited for."""
    keys = CommitKeys("dag:task:run:-1:1:2026-12-01T00:00:00+00:00", ["token"])
    killed_run = keys.run(1, 1)
    server = _Server({killed_run.session_id: "open"}, running={killed_run.operation_id})
    ids = EarlierRuns(server, keys, mock.Mock()).settle(1, 2)
    assert ids == keys.run(2, 0)
    assert server.calls == [], "the retry does not look past the forgotten run 0"


def test_on_kill_with_nothing_submitted_builds_no_hook_and_runs_no_post_submit_commands(
    connect_connections, tmp_path
):
    """A Connect task killed before or after its session (or a ref step killed in the worker) has
    nothing to kill: the provider's on_kill would build a hook on the connection and run the
    task's post_submit_commands."""
    ran = tmp_path / "post-submit-ran"
    append = IcebergAppendOperator(
        task_id="a", table="db.t", source_query="SELECT 1", post_submit_commands=[f"touch {ran}"]
    )
    with mock.patch.object(SparkSubmitOperator, "on_kill") as submit_kill:
        append.on_kill()
    submit_kill.assert_not_called()
    assert append._hook is None and not ran.exists()

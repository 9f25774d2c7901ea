"""A hostile review of the secrets and Spark Connect guarantees (docs/guarantees.md): each test
puts a secret where a user would, and finds it where the ledger says it never is.

Every test here fails on the code as reviewed; each docstring names the guarantee it breaks.
"""

from __future__ import annotations

import contextlib
import json
from unittest import mock

import pytest

from airflow_iceberg.catalog.config import config_from_fields
from airflow_iceberg.exceptions import InvalidCatalogConfigError
from airflow_iceberg.jobs.job_spec import JobRequest
from airflow_iceberg.operators import IcebergAppendOperator

SENTINEL = "SENTINEL-5e7a"
WAREHOUSE = {"warehouse": "file:///wh"}


def _spark_submit_argv(conn_id: str) -> list[str]:
    """The exact spark-submit command an append of ``conn_id``'s catalog runs (nothing is started)."""
    op = IcebergAppendOperator(
        task_id="append", table="db.t", iceberg_conn_id=conn_id, source_query="SELECT 1"
    )
    settings = op.catalog_settings()
    spec = op.qualify_spec(op.build_spec().validated(), settings.catalog_names).validated()
    request = JobRequest(spec=spec, result_file="/tmp/r.json", commit_id="c1", secret_conf_file="/tmp/s.json")
    op._configure_submit(settings, request, job_archive="/tmp/airflow-iceberg-x/jobs.zip")
    return op._get_hook()._build_spark_submit_command(op.application)


def _shown_by_the_rest_api(conn_id: str, connection: dict) -> dict:
    """The connection as Airflow's REST API (``GET /api/v2/connections/<id>``) and UI return it."""
    from airflow.api_fastapi.core_api.datamodels.connections import ConnectionResponse

    fields = {"conn_id": conn_id, "description": None, "schema": None, "port": None, "team_name": None}
    fields.update({key: connection.get(key) for key in ("conn_type", "host", "login", "password")})
    fields["extra"] = json.dumps(connection.get("extra", {}))
    return ConnectionResponse.model_validate(fields).model_dump(mode="json")


@pytest.fixture
def spark_default(spark_connection):
    return spark_connection


# --------------------------------------------------------------------------- never on a command line


@pytest.mark.parametrize(
    "host",
    [
        # MySQL Connector/J's key-value host form (dev.mysql.com "Connection URL Syntax").
        f"jdbc:mysql://(host=db,port=3306,user=etl,password={SENTINEL})/iceberg",
        f"jdbc:mysql://address=(host=db)(port=3306)(user=etl)(password={SENTINEL})/iceberg",
        # Teradata's comma-separated parameters after the host.
        f"jdbc:teradata://db/DATABASE=iceberg,USER=etl,PASSWORD={SENTINEL}",
    ],
    ids=["mysql-key-value", "mysql-address", "teradata"],
)
def test_a_jdbc_password_in_a_url_form_the_splitter_does_not_know_is_on_the_command_line(
    host, iceberg_connection, spark_default
):
    """Breaks "Never on a command line": a JDBC driver's own URL syntax for the password.

    ``split_jdbc_secrets`` and ``uri_secret_problem`` look for ``?``/``&``/``;``/``:`` before
    ``password=``, and for ``user:password@``. MySQL's documented key-value hosts,
    ``(host=..,password=..)`` and ``address=(..)(password=..)``, and Teradata's ``,PASSWORD=``
    match neither: the connection is accepted and the password is sent as
    ``--conf spark.sql.catalog.<name>.uri=...``, in ``ps``, in Spark's UI and event log in clear
    (``uri`` matches no redaction pattern), and per session over Spark Connect. It is also in the
    table's asset URI (``...&uri=jdbc%3Amysql...password%3D<it>``), which Airflow stores, shows to
    every UI user on its Assets page and hands to OpenLineage.
    """
    from airflow_iceberg.assets import table_asset_uri

    conn_id = iceberg_connection("mysql_kv", host=host, extra={"catalog_type": "jdbc", **WAREHOUSE})
    try:
        argv = _spark_submit_argv(conn_id)
    except InvalidCatalogConfigError as refused:
        assert SENTINEL not in str(refused)
        return
    asset_uri = table_asset_uri(
        config_from_fields(extra={"catalog_type": "jdbc", **WAREHOUSE}, host=host), "db.t"
    )
    assert not [arg for arg in argv if SENTINEL in arg]
    assert SENTINEL.lower() not in asset_uri.lower(), (
        f"the table's asset URI (Airflow UI, OpenLineage): {asset_uri}"
    )


@pytest.mark.parametrize(
    "host",
    [
        f"jdbc:mysql://(host=127.0.0.1,port=1,user=etl,password={SENTINEL})/iceberg",
        f"jdbc:mysql://address=(host=127.0.0.1)(port=1)(user=etl)(password={SENTINEL})/iceberg",
    ],
    ids=["mysql-key-value", "mysql-address"],
)
def test_the_test_button_answer_quotes_a_mysql_key_value_password(host):
    """Breaks "Never in the task log or an error message": the Test button's TCP probe takes the
    whole MySQL key-value authority for a host name and says ``TCP connection to
    (host=...,password=<it>):3306 ... failed``, in the UI and ``POST /api/v2/connections/test``.
    """
    from airflow_iceberg.catalog.connection_check import check_catalog

    try:
        config = config_from_fields(extra={"catalog_type": "jdbc", **WAREHOUSE}, host=host)
    except InvalidCatalogConfigError as refused:
        assert SENTINEL not in str(refused)
        return
    _, message = check_catalog(config)
    assert SENTINEL.lower() not in message.lower(), message


@pytest.mark.parametrize(
    "extra,host",
    [
        ({"catalog_type": "rest"}, f"https://etl:pa,{SENTINEL}@rest.example/catalog"),
        ({"catalog_type": "jdbc", **WAREHOUSE}, f"jdbc:mysql://etl:pa,{SENTINEL}@db:3306/iceberg"),
        ({"catalog_type": "hadoop", "warehouse": f"s3a://key:pa,{SENTINEL}@bucket/wh"}, None),
    ],
    ids=["rest-uri", "mysql-uri", "warehouse"],
)
def test_a_user_info_password_with_a_comma_is_on_the_command_line(
    extra, host, iceberg_connection, spark_default
):
    """Breaks "Never on a command line" (and "a password in user info is refused for every URI").

    ``uri_secret_problem`` splits every URI at ``,`` (for Hive's list of metastores) before it
    asks ``urlsplit`` for a password, so ``https://etl:pa,ss@host`` becomes ``https://etl:pa``
    and ``ss@host``, neither with a password. A password with a comma in it, in a REST or MySQL
    URI or in the warehouse, is accepted and put on spark-submit's command line in clear.
    """
    conn_id = iceberg_connection("comma_pw", host=host, extra=extra)
    try:
        argv = _spark_submit_argv(conn_id)
    except InvalidCatalogConfigError as refused:
        assert SENTINEL not in str(refused)
        return
    assert not [arg for arg in argv if SENTINEL in arg]


@pytest.mark.parametrize(
    "extra",
    [
        {"catalog_type": "hive", "catalog_properties": {"uri": f"thrift://etl:{SENTINEL}@metastore:9083"}},
        {"catalog_type": "hive", "catalog_properties": {"warehouse": f"s3a://AKIA:{SENTINEL}@bucket/wh"}},
        {
            "catalog_type": "hadoop",
            **WAREHOUSE,
            "hadoop_properties": {"fs.defaultFS": f"s3a://AKIA:{SENTINEL}@b"},
        },
        {
            "catalog_type": "rest",
            "catalog_properties": {"oauth2-server-uri": f"https://client:{SENTINEL}@idp.example/token"},
        },
    ],
    ids=["catalog-uri", "catalog-warehouse", "hadoop-default-fs", "oauth2-server-uri"],
)
def test_a_user_info_password_in_a_uri_property_is_on_the_command_line(
    extra, iceberg_connection, spark_default
):
    """Breaks "a password in user info is refused for every URI" (docs/connection.md) and "Never on a
    command line": only Host and Warehouse go through ``uri_secret_problem``. The same URI given as
    the ``uri`` or ``warehouse`` catalog property (a Hive catalog needs no Host), any ``*-uri`` /
    ``*-url`` property (which ``ABOUT_A_SECRET_RE`` declares "about a secret"), or a Hadoop
    ``fs.defaultFS`` is taken as it is and sent as ``--conf``, in clear in ``ps`` and Spark's UI.
    """
    host = "https://rest.example/catalog" if extra["catalog_type"] == "rest" else None
    conn_id = iceberg_connection("uri_property", host=host, extra=extra)
    try:
        argv = _spark_submit_argv(conn_id)
    except InvalidCatalogConfigError as refused:
        assert SENTINEL not in str(refused)
        return
    assert not [arg for arg in argv if SENTINEL in arg]


@pytest.mark.parametrize("field_name", ["extra_jars", "runtime_jar"])
def test_credentials_in_a_jar_url_are_on_the_command_line_and_shown_by_airflow(
    field_name, iceberg_connection, spark_default
):
    """Breaks "Never on a command line" and "Never in a connection field Airflow shows in clear".

    A private repository's jar is commonly given as ``https://user:token@repo/...jar``. Only Host
    and Warehouse are checked for user info; ``extra_jars`` and ``runtime_jar`` go to ``--jars``
    as they are, so the token is in ``ps``, in Spark's ``spark.jars`` (UI, event log: the key
    matches no redaction pattern) and in the connection's extras, which Airflow's REST API and UI
    return in clear.
    """
    connection = {
        "conn_type": "iceberg_catalog",
        "extra": {
            "catalog_type": "hadoop",
            **WAREHOUSE,
            field_name: f"https://ci:{SENTINEL}@repo.example/x.jar",
        },
    }
    shown = _shown_by_the_rest_api("jar_creds", connection)
    conn_id = iceberg_connection("jar_creds", **{k: v for k, v in connection.items() if k != "conn_type"})
    try:
        argv = _spark_submit_argv(conn_id)
    except InvalidCatalogConfigError as refused:
        assert SENTINEL not in str(refused)
        return
    assert SENTINEL not in json.dumps(shown), "Airflow shows the jar URL's credentials in clear"
    assert not [arg for arg in argv if SENTINEL in arg]


@pytest.mark.parametrize(
    "field_name,key",
    [
        # Iceberg S3FileIO, s3.sse.type=custom: the base64 AES-256 key (S3FileIOProperties.SSE_KEY).
        ("catalog_properties", "s3.sse.key"),
        # Iceberg REST: every header.<name> is sent with each request (RESTUtil.configHeaders).
        ("catalog_properties", "header.Cookie"),
        # Hadoop S3A SSE-C key, GCS connector customer-supplied key, WASB container SAS.
        ("hadoop_properties", "fs.s3a.encryption.key"),
        ("hadoop_properties", "fs.gs.encryption.key"),
        ("hadoop_properties", "fs.azure.sas.lake.account.blob.core.windows.net"),
    ],
)
def test_a_real_secret_property_the_detection_misses_is_in_clear_everywhere(
    field_name, key, iceberg_connection, spark_default
):
    """Breaks "Never in a connection field Airflow shows in clear" and "Never on a command line".

    ``is_secret_property`` knows a credential by words in its name (password, secret, token,
    credential, authorization, access/private/account/api key). Encryption keys, SAS entries
    keyed by container and cookies have none of them, so in Catalog or Hadoop properties they
    are neither refused nor treated as secret: Airflow's REST API shows them, spark-submit gets
    them as ``--conf``, and Spark's ``spark.redaction.regex`` (ours) does not match the key.
    """
    connection = {
        "conn_type": "iceberg_catalog",
        "extra": {"catalog_type": "hadoop", **WAREHOUSE, field_name: {key: SENTINEL}},
    }
    shown = _shown_by_the_rest_api("missed", connection)
    conn_id = iceberg_connection("missed", **{k: v for k, v in connection.items() if k != "conn_type"})
    try:
        argv = _spark_submit_argv(conn_id)
    except InvalidCatalogConfigError as refused:
        assert SENTINEL not in str(refused)
        return
    assert SENTINEL not in json.dumps(shown), f"Airflow shows {field_name} {key!r} in clear"
    assert not [arg for arg in argv if SENTINEL in arg]


def test_a_password_in_the_jdbc_url_host_is_shown_in_clear_by_airflows_rest_api():
    """Breaks "Never in a connection field Airflow shows in clear" as the ledger words it.

    The ledger counts a JDBC URI's ``?password=`` as a secret and promises that a secret in a
    field Airflow shows in clear is refused. The connection accepts it in Host, which Airflow's
    REST API and UI return unmasked (docs/connection.md admits this; the ledger does not).
    """
    connection = {
        "conn_type": "iceberg_catalog",
        "host": f"jdbc:postgresql://db:5432/iceberg?user=etl&password={SENTINEL}",
        "extra": {"catalog_type": "jdbc", **WAREHOUSE},
    }
    shown = _shown_by_the_rest_api("pg_url", connection)
    try:
        config_from_fields(extra=connection["extra"], host=connection["host"])
    except InvalidCatalogConfigError as refused:
        assert SENTINEL not in str(refused)
        return
    assert SENTINEL not in json.dumps(shown), "accepted, while GET /api/v2/connections shows it"


# --------------------------------------------------------------------------- never in an error message


@pytest.mark.parametrize(
    "extra,host,port",
    [
        # An unescaped '@' in a password: urlsplit (and so the driver) takes the last '@'.
        ({"catalog_type": "hive"}, f"thrift://etl:p@{SENTINEL}@metastore:9083", 9084),
        # Oracle's thin syntax with a quoted password holding '@' (Oracle JDBC docs).
        ({"catalog_type": "jdbc", **WAREHOUSE}, f'jdbc:oracle:thin:etl/"p@{SENTINEL}"@db:1521/svc', 1522),
    ],
    ids=["hive-user-info", "oracle-quoted"],
)
def test_a_password_with_an_at_sign_is_quoted_in_the_port_error(extra, host, port):
    """Breaks "Never in the task log or an error message": ``display_uri`` cuts at the first '@'.

    ``display_uri`` removes ``//[^/@]*@`` and Oracle's ``[^@]*@``, both up to the *first* '@',
    while the password runs to the last one. The Port check quotes ``display_uri(host)`` before
    the URI's secrets are refused, so a Port that disagrees with Host prints the password's
    tail: ``9084 differs from the port in the URI 'thrift://<tail>@metastore:9083'``. The Host
    is no Airflow-masked field, so the task log shows it as is.
    """
    with pytest.raises(InvalidCatalogConfigError) as refused:
        config_from_fields(extra=extra, host=host, port=port)
    assert SENTINEL not in str(refused.value)


# --------------------------------------------------------------------------- Spark Connect


def test_without_a_secret_a_tasks_session_id_follows_from_the_commit_id_its_log_shows():
    """Breaks "No task log grants access to a Spark Connect session" as the ledger words it.

    The ids of a try's session and committing operation are an HMAC keyed by the task's secrets
    (the Connect token, the catalogs' secret settings). Without any (a server started without
    authentication needs no token; a catalog without secrets, or with ``connect_server_credentials``
    and the secrets on the server only), the key is a constant and the ids follow from the commit
    id alone. The commit id is in the task log and XCom (``Iceberg job result ...`` carries the
    snapshot summary's ``airflow-iceberg.commit-id``) and in every snapshot summary, so anyone
    who reads either can join the running session (``sc://...;session_id=<id>``), change its
    catalog settings under the task, or take the committing operation id first. docs/spark-connect.md
    accepts this ("holds nothing ... they could not set up in a session of their own"), which
    overlooks tampering with *this* task's session; the ledger promises no such limit.
    """
    from airflow_iceberg.catalog.spark_settings import combined_settings
    from airflow_iceberg.operators.connect import ConnectJob
    from airflow_iceberg.operators.connect_tries import CommitKeys, TryNumbers

    config = config_from_fields(extra={"catalog_name": "lake", "catalog_type": "hadoop", **WAREHOUSE})
    settings = combined_settings([config])
    commit_id = "sales:load:scheduled__2026-12-01T00:00:00+00:00:-1:1:2026-12-01T00:00:05.123456+00:00"
    request = JobRequest(spec=mock.Mock(), result_file="/tmp/r.json", commit_id=commit_id, reuse_commit=True)

    job = ConnectJob("spark_connect_default", mock.Mock())
    job._remote = mock.Mock(session_state=mock.Mock(return_value="absent"))
    ids = job._settle(request, settings, token=None, tries=TryNumbers(first=1, current=1))

    from_the_log = CommitKeys(commit_id, [""]).run(1, 0)  # what a reader of the task log computes
    assert ids.session_id != from_the_log.session_id
    assert ids.operation_id != from_the_log.operation_id


def test_a_secret_key_the_detection_misses_is_sent_per_session_over_connect():
    """Breaks "a task never sends a secret" over Spark Connect (Spark's event log holds secrets
    only redacted): ``user_secret_keys`` and the catalog's secret split use the same name test, so
    an S3 SSE-C key in Catalog properties or the operator's ``conf`` is set on the session, and
    the server copies session settings into every job's properties, in clear in its event log.
    """
    from airflow_iceberg.catalog.spark_settings import combined_settings
    from airflow_iceberg.operators.connect import session_settings

    config = config_from_fields(
        extra={
            "catalog_name": "lake",
            "catalog_type": "hadoop",
            **WAREHOUSE,
            "catalog_properties": {"s3.sse.key": SENTINEL},
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
def test_a_bare_hadoop_key_in_conf_reaches_the_shared_file_system_over_connect_unrefused(
    key, value, iceberg_connection, monkeypatch
):
    """Breaks "Per-task storage credentials are the task's own, or refused before anything runs".

    Spark copies *every* session setting into the Hadoop Configuration it makes for a catalog
    (``SessionState.newHadoopConf``, which Iceberg's ``SparkUtil.hadoopConfCatalogOverrides``
    starts from; checked on Spark 3.5: ``spark.conf.set("fs.s3a.endpoint", x)`` then
    ``sessionState().newHadoopConf().get("fs.s3a.endpoint") == x``). So ``conf={"fs.s3a...": ...}``
    without ``spark.hadoop.`` is a per-task file system setting, served from the server-wide
    FileSystem cache exactly like the refused ones, yet only ``spark.hadoop.fs.*`` and
    ``spark.sql.catalog.<name>.hadoop.fs.*`` are refused: the task opens its session.
    """
    from airflow_iceberg.operators.connect import ConnectJob

    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT",
        json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1", "port": 1}),
    )
    iceberg_connection(extra={"catalog_name": "lake", "catalog_type": "hadoop", "warehouse": "s3a://lake/wh"})
    append = IcebergAppendOperator(task_id="a", table="db.t", source_query="SELECT 1", conf={key: value})
    # Refused, or the mocked session reported no result: either way execute() raises.
    with mock.patch.object(ConnectJob, "run", return_value=0) as run, contextlib.suppress(Exception):
        append.execute({})
    assert not run.called, f"a Spark Connect session was opened with conf {key!r} (refused: nothing)"


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


def test_a_retry_misses_a_running_write_once_the_server_forgot_an_earlier_closed_session():
    """Breaks "A retry commits once even when the worker died mid-write".

    Try 1 ran twice (``airflow tasks test`` next to the scheduler's run, say): run 0 ended and
    closed its session, run 1's worker died mid-write and its write goes on. A closed session is
    remembered only as a tombstone, ``spark.connect.session.manager.closedSessionsTombstonesSize``
    of them (1000 by default, across every client of the server); once evicted, run 0's id reads
    as never seen. ``EarlierRuns.settle`` stops scanning a try at its first unseen id, so try 2
    never looks at run 1: it neither claims nor waits for that write, and looks for the earlier
    commit while it may still land.
    """
    from airflow_iceberg.operators.connect_tries import CommitKeys, EarlierRuns

    keys = CommitKeys("dag:task:run:-1:1:2026-12-01T00:00:00+00:00", ["token"])
    killed_run = keys.run(1, 1)
    server = _Server({killed_run.session_id: "open"}, running={killed_run.operation_id})
    ids = EarlierRuns(server, keys, mock.Mock()).settle(1, 2)
    assert ids == keys.run(2, 0)
    assert server.calls == ["claim", "wait", "release"], "try 2 went ahead while try 1's write ran"


def test_a_dag_change_to_retries_between_two_tries_changes_the_commit_id_they_share(spark_default):
    """Breaks "A retry commits once even when the worker died mid-write" (and exactly-once retries
    in spark-submit mode): the retry must compute the commit id, and over Connect the session ids,
    of the try it follows.

    ``_first_try`` is ``ti.max_tries - self.retries + 1``. ``max_tries`` is stored when the task
    instance is created or cleared and never refreshed from the DAG (Airflow: "Do not set
    max_tries to task.retries here because max_tries is a cumulative value"); ``self.retries`` is
    the DAG file as parsed for this try. Raise ``retries`` from 1 to 3 (or ``[core]
    default_task_retries``) while try 1 runs, and try 2 computes first try -1 instead of 1: a
    different commit id, so it neither finds try 1's commit nor settles its running write.
    """
    from types import SimpleNamespace

    import pendulum

    started = SimpleNamespace(start_date=pendulum.datetime(2026, 12, 1, tz="UTC"))

    def commit_id(retries: int, try_number: int) -> str:
        op = IcebergAppendOperator(task_id="load", table="db.t", source_query="SELECT 1", retries=retries)
        ti = SimpleNamespace(dag_id="sales", task_id="load", run_id="r", map_index=-1, try_number=try_number)
        ti.max_tries = 1  # queued with retries=1
        return op._commit_id({"ti": ti, "dag_run": started})

    assert commit_id(retries=3, try_number=2) == commit_id(retries=1, try_number=1)


@pytest.mark.parametrize("host", ["", "sc://"])
def test_the_spark_connect_token_is_in_the_error_of_a_connection_without_a_host(
    host, iceberg_connection, monkeypatch
):
    """Breaks "Never in the task log or an error message" (docs/spark-connect.md: "The URL carries
    the token, so the operators never log it").

    A ``spark_connect`` connection whose Host is empty (a form left blank, a variable that did not
    expand) but has a Port: pyspark refuses the URL with ``Hostname is missing in the URL:
    '<the URL>'``, and the operator's ``IcebergJobError`` repeats it, token included. The
    provider percent-encodes the token into the URL, so a base64 token (``...==``) appears as
    ``...%3D%3D``, which Airflow's masker, knowing only the Password as typed, does not hide.
    """
    from airflow.sdk._shared.secrets_masker import redact

    token = "c2VjcmV0LXRva2VuIQ=="  # base64, as Spark Connect tokens often are
    connection = {"conn_type": "spark_connect", "host": host, "port": 15002, "password": token}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(connection))
    iceberg_connection(extra={"catalog_type": "hadoop", **WAREHOUSE})
    append = IcebergAppendOperator(task_id="a", table="db.t", source_query="SELECT 1")
    with pytest.raises(Exception) as failed:
        append.execute({})
    shown = redact(str(failed.value))  # what the task log shows, after Airflow's masking
    assert "c2VjcmV0LXRva2VuIQ" not in shown, shown


def test_a_hadoop_security_setting_in_hadoop_properties_loses_its_prefix_and_is_silently_dropped():
    """Breaks the documented mapping of Hadoop properties (docs/connection.md: ``<key>`` ->
    ``.hadoop.<key>``) for Hadoop's own ``hadoop.*`` keys, security ones included.

    ``_hadoop_prefixed`` leaves a key that already starts with ``hadoop.`` as it is, taking it for
    a catalog property. Iceberg strips ``spark.sql.catalog.<name>.hadoop.`` before it sets a key
    on the catalog's Hadoop Configuration (``SparkUtil.hadoopConfCatalogOverrides``), so
    ``hadoop.rpc.protection=privacy`` (encrypted RPC to the NameNode and metastore) arrives as
    ``rpc.protection``, which nothing reads: the catalog talks unencrypted, and no error says so.
    The same for ``hadoop.security.authentication`` and ``hadoop.security.credential.provider.path``.
    """
    config = config_from_fields(
        extra={
            "catalog_name": "lake",
            "catalog_type": "hadoop",
            "warehouse": "hdfs://nn/wh",
            "hadoop_properties": {"hadoop.rpc.protection": "privacy"},
        }
    )
    from airflow_iceberg.catalog.spark_settings import spark_settings

    conf = spark_settings(config).conf
    prefix = "spark.sql.catalog.lake.hadoop."  # what Iceberg strips
    hadoop_keys = {key.removeprefix(prefix): value for key, value in conf.items() if key.startswith(prefix)}
    assert hadoop_keys.get("hadoop.rpc.protection") == "privacy", (
        f"the catalog's Hadoop conf gets {hadoop_keys}"
    )

"""Cluster deploy mode on the Airflow side: refusals before spark-submit, the result from the catalog,
and ``durable``'s stored job kept for one commit id only.

spark-submit is replaced by a stand-in for the driver on the cluster: it reads its arguments as
the job does (``parse_argv``) and commits to a real catalog (pyiceberg's SQL catalog on SQLite,
which is also what the operator reads back through the ``iceberg_catalog`` connection), tagged
with the commit id the operator gave it. The end-to-end run on a real YARN cluster is in
``tests/integration``.
"""

from __future__ import annotations

import http.server
import json
import signal
import subprocess
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_iceberg.exceptions import IcebergJobError, InvalidCatalogConfigError, InvalidSpecError
from airflow_iceberg.jobs.spec.request import COMMIT_ID_PROPERTY, SOURCE_SNAPSHOT_PROPERTY, parse_argv
from airflow_iceberg.operators import (
    IcebergAppendOperator,
    IcebergDeleteOperator,
    IcebergExpireSnapshotsOperator,
    IcebergTimeTravelReadOperator,
)
from airflow_iceberg.operators.cluster_mode import SUBMITTED_FOR_KEY, forget_another_commits_job

ROWS = pa.table({"id": pa.array([1, 2], pa.int64()), "name": pa.array(["a", "b"])})


class _TaskInstance:
    def __init__(self, max_tries: int = 1, try_number: int = 1) -> None:
        self.dag_id, self.task_id, self.run_id, self.map_index = "d", "t", "manual__1", -1
        self.max_tries, self.try_number = max_tries, try_number
        self.stats_tags: dict[str, str] = {}


class _StateStore:
    """Airflow's task state store as the task sees it: get, set, delete."""

    def __init__(self, **values: object) -> None:
        self.values = dict(values)

    def get(self, key: str, default: object = None) -> object:
        return self.values.get(key, default)

    def set(self, key: str, value: object, **_: object) -> None:
        self.values[key] = value

    def delete(self, key: str) -> None:
        self.values.pop(key, None)


@pytest.fixture
def sqlite_catalog(iceberg_connection, spark_connection, tmp_path):
    """An ``iceberg_catalog`` connection on a SQLite JDBC catalog, and pyiceberg's own view of it."""
    from pyiceberg.catalog.sql import SqlCatalog

    database, warehouse = tmp_path / "catalog.db", tmp_path / "warehouse"
    warehouse.mkdir()
    conn_id = _lake_connection(iceberg_connection, tmp_path, "lake_catalog")
    catalog = SqlCatalog("lake", uri=f"sqlite:///{database}", warehouse=f"file://{warehouse}")
    catalog.create_namespace("db")
    catalog.create_table("db.orders", schema=ROWS.schema)
    return conn_id, catalog


def _lake_connection(iceberg_connection, tmp_path, conn_id: str, **extra: object) -> str:
    """An ``iceberg_catalog`` connection to the SQLite catalog ``lake`` in ``tmp_path``, with ``extra``."""
    return iceberg_connection(
        conn_id,
        host=f"jdbc:sqlite:{tmp_path / 'catalog.db'}",
        extra={
            "catalog_name": "lake",
            "catalog_type": "jdbc",
            "warehouse": f"file://{tmp_path / 'warehouse'}",
            **extra,
        },
    )


def _driver_on_the_cluster(catalog, seen: dict, commit: bool = True):
    """spark-submit in cluster mode: the job commits where the catalog is; nothing comes back."""

    def execute(self, context):
        request = parse_argv(self.application_args)
        seen["request"], seen["conf"] = request, dict(self.conf)
        seen["store_at_submit"] = dict(getattr(context.get("task_state_store"), "values", {}))
        if commit:
            table = catalog.load_table("db.orders")
            table.append(ROWS, snapshot_properties={COMMIT_ID_PROPERTY: request.commit_id})

    return execute


def _cluster_append(conn_id: str, **kwargs) -> IcebergAppendOperator:
    return IcebergAppendOperator(
        task_id="t", table="db.orders", iceberg_conn_id=conn_id, source_query="SELECT 1",
        deploy_mode="cluster", **kwargs,
    )


def test_a_cluster_mode_write_returns_its_commit_read_back_from_the_catalog(sqlite_catalog, monkeypatch):
    conn_id, catalog = sqlite_catalog
    seen: dict = {}
    monkeypatch.setattr(SparkSubmitOperator, "execute", _driver_on_the_cluster(catalog, seen))
    # A concurrent writer's commit lands after ours: the result is still ours, found by commit id.
    original = SparkSubmitOperator.execute

    def then_a_neighbour_commits(self, context):
        original(self, context)
        catalog.load_table("db.orders").append(ROWS, snapshot_properties={COMMIT_ID_PROPERTY: "neighbour"})

    monkeypatch.setattr(SparkSubmitOperator, "execute", then_a_neighbour_commits)
    result = _cluster_append(conn_id).execute({"ti": _TaskInstance()})

    assert seen["request"].result_file is None  # a worker's path means nothing on a cluster node
    table = catalog.load_table("db.orders")
    ours = next(s for s in table.snapshots() if s.summary[COMMIT_ID_PROPERTY] == seen["request"].commit_id)
    assert result["status"] == "success" and result["committed"] is True
    assert result["table"] == "lake.db.orders" and result["mode"] == "append"
    assert result["snapshot_id"] == ours.snapshot_id != table.current_snapshot().snapshot_id
    assert result["added_records"] == 2 and result["total_records"] == 2
    assert result["summary"][COMMIT_ID_PROPERTY] == seen["request"].commit_id


def test_a_cluster_mode_job_that_committed_nothing_says_so(sqlite_catalog, monkeypatch):
    conn_id, catalog = sqlite_catalog
    monkeypatch.setattr(SparkSubmitOperator, "execute", _driver_on_the_cluster(catalog, {}, commit=False))
    result = _cluster_append(conn_id).execute({"ti": _TaskInstance()})
    assert result["committed"] is False and result["snapshot_id"] is None


def test_a_failed_cluster_application_points_at_the_driver_log(sqlite_catalog, monkeypatch):
    conn_id, catalog = sqlite_catalog

    def failed(self, context):
        raise RuntimeError("YARN application application_1_0002 finished with FAILED")

    monkeypatch.setattr(SparkSubmitOperator, "execute", failed)
    failure = r"application_1_0002 finished with FAILED\. In cluster deploy mode .*yarn logs"
    with pytest.raises(IcebergJobError, match=failure):
        _cluster_append(conn_id).execute({"ti": _TaskInstance()})
    assert catalog.load_table("db.orders").current_snapshot() is None


@pytest.mark.parametrize(
    ("operator", "kwargs", "message"),
    [
        (IcebergTimeTravelReadOperator, {"snapshot_id": 1}, "only as a batch copy into a sink_table"),
        (IcebergExpireSnapshotsOperator, {}, "expiresnapshots tasks cannot run in cluster deploy mode"),
        (IcebergAppendOperator, {"source_query": "SELECT 1", "partition_events": True}, "partition_events"),
    ],
)
def test_what_cluster_mode_cannot_report_is_refused_before_spark_submit(
    sqlite_catalog, monkeypatch, operator, kwargs, message
):
    conn_id, _ = sqlite_catalog
    monkeypatch.setattr(SparkSubmitOperator, "execute", lambda self, context: pytest.fail("submitted"))
    op = operator(task_id="t", table="db.orders", iceberg_conn_id=conn_id, deploy_mode="cluster", **kwargs)
    with pytest.raises(InvalidSpecError, match=message):
        op.execute({"ti": _TaskInstance()})


def test_a_cluster_mode_copy_into_a_sink_table_reports_the_sink_commit_and_the_snapshot_it_read(
    sqlite_catalog, monkeypatch
):
    conn_id, catalog = sqlite_catalog
    source = catalog.load_table("db.orders")
    source.append(ROWS, snapshot_properties={COMMIT_ID_PROPERTY: "an-earlier-task"})
    read_at = source.current_snapshot().snapshot_id
    sink = catalog.create_table("db.copy", schema=ROWS.schema)

    def driver(self, context):  # the job copies the snapshot and tags the sink commit with it
        request = parse_argv(self.application_args)
        assert request.spec.preview_rows == 0
        tags = {COMMIT_ID_PROPERTY: request.commit_id, SOURCE_SNAPSHOT_PROPERTY: str(read_at)}
        sink.append(ROWS, snapshot_properties=tags)

    monkeypatch.setattr(SparkSubmitOperator, "execute", driver)
    op = IcebergTimeTravelReadOperator(
        task_id="t", table="db.orders", iceberg_conn_id=conn_id, deploy_mode="cluster",
        snapshot_id=read_at, sink_table="db.copy", sink_mode="append", preview_rows=3,
    )
    result = op.execute({"ti": _TaskInstance()})
    assert "preview" not in result  # the rows stay with the driver; the job was not asked for them
    copied = catalog.load_table("db.copy").current_snapshot()
    assert result["snapshot_id"] == read_at and result["row_count"] == 2
    assert result["sink"]["table"] == "lake.db.copy" and result["sink"]["snapshot_id"] == copied.snapshot_id


def test_a_catalog_pyiceberg_cannot_read_is_refused_in_cluster_mode(iceberg_connection, spark_connection):
    conn_id = iceberg_connection(
        "nessie", host="http://127.0.0.1:19120/api/v2",
        extra={"catalog_name": "nes", "catalog_type": "nessie", "warehouse": "file:///wh"},
    )
    op = IcebergDeleteOperator(
        task_id="t", table="db.orders", iceberg_conn_id=conn_id, condition="id = 1", conf={
            "spark.submit.deployMode": "cluster"
        },
    )
    with pytest.raises(InvalidSpecError, match="a nessie catalog cannot run in cluster deploy mode"):
        op.execute({"ti": _TaskInstance()})


def test_a_retry_keeps_the_stored_spark_job_and_a_clear_forgets_it(sqlite_catalog, monkeypatch):
    """``durable`` reconnects a retry to its running driver; a cleared task must submit again.

    Airflow keeps task state across a clear, so the provider would find the earlier run's succeeded
    application and submit nothing; the operator drops a stored job that ran for another commit id.
    """
    conn_id, catalog = sqlite_catalog
    seen: dict = {}
    monkeypatch.setattr(SparkSubmitOperator, "execute", _driver_on_the_cluster(catalog, seen))
    op = _cluster_append(conn_id, retries=2)
    store = _StateStore()
    op.execute({"ti": _TaskInstance(max_tries=2), "task_state_store": store})
    first_commit = seen["request"].commit_id
    assert store.values == {SUBMITTED_FOR_KEY: first_commit}
    store.set("spark_job_id", "application_1_0001")  # what the provider stored for that submit

    # A retry (same max_tries: same commit id) reaches the provider with the job it must reconnect to.
    op.execute({"ti": _TaskInstance(max_tries=2, try_number=2), "task_state_store": store})
    assert seen["request"].commit_id == first_commit
    assert seen["store_at_submit"]["spark_job_id"] == "application_1_0001"

    # A clear (max_tries raised): a new commit id, and the earlier run's job is gone before submit.
    op.execute({"ti": _TaskInstance(max_tries=5, try_number=3), "task_state_store": store})
    assert seen["request"].commit_id != first_commit
    assert "spark_job_id" not in seen["store_at_submit"]
    assert seen["store_at_submit"][SUBMITTED_FOR_KEY] == seen["request"].commit_id


def test_forgetting_touches_only_a_stored_job_of_another_commit():
    store = _StateStore(**{SUBMITTED_FOR_KEY: "a", "spark_job_id": "app-1", "k8s_driver_status": "Succeeded"})
    assert forget_another_commits_job(store, "a", ("spark_job_id", "k8s_driver_status")) is False
    assert store.values["spark_job_id"] == "app-1"
    assert forget_another_commits_job(store, "b", ("spark_job_id", "k8s_driver_status")) is True
    assert store.values == {SUBMITTED_FOR_KEY: "b"}


@pytest.fixture
def yarn_connection(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_YARN_CLUSTER",
        '{"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster", '
        '"yarn_resourcemanager_webapp_address": "http://127.0.0.1:8088"}}',
    )
    return "yarn_cluster"


@pytest.fixture
def secret_sqlite_catalog(sqlite_catalog, iceberg_connection, tmp_path):
    """The SQLite catalog again, with a secret S3 key the job must receive (and argv must not)."""
    _, catalog = sqlite_catalog
    secret = {"s3.secret-access-key": "SENTINEL-s3-key"}
    conn_id = _lake_connection(iceberg_connection, tmp_path, "lake_with_secret", secret_properties=secret)
    return conn_id, catalog


def test_on_yarn_the_secrets_travel_as_a_file_in_the_applications_staging_dir(
    secret_sqlite_catalog, yarn_connection, monkeypatch
):
    """spark-submit's own command (the provider builds it) ships the secrets file with ``--files``
    under a fixed name; the job reads that name in its container. No secret on the command line."""
    conn_id, catalog = secret_sqlite_catalog
    seen: dict = {}
    commit = _driver_on_the_cluster(catalog, seen)

    def execute(self, context):
        hook = self._get_hook()
        seen["command"] = hook._build_spark_submit_command(self.application)
        files = seen["command"][seen["command"].index("--files") + 1]
        secret_path = files.rsplit(",", 1)[-1].removesuffix("#airflow-iceberg-secret-conf.json")
        seen["shipped"] = json.loads(Path(secret_path).read_text())  # what spark-submit uploads
        commit(self, context)

    monkeypatch.setattr(SparkSubmitOperator, "execute", execute)
    op = IcebergAppendOperator(
        task_id="t", table="db.orders", iceberg_conn_id=conn_id, conn_id=yarn_connection,
        source_query="SELECT 1", files="/etc/app/lookup.csv", yarn_track_via_rm_api=True,
    )
    result = op.execute({"ti": _TaskInstance(), "task_state_store": _StateStore()})

    command = seen["command"]
    assert command[command.index("--master") + 1] == "yarn"
    assert command[command.index("--deploy-mode") + 1] == "cluster"
    files = command[command.index("--files") + 1].split(",")
    assert files[0] == "/etc/app/lookup.csv" and files[1].endswith("#airflow-iceberg-secret-conf.json")
    assert seen["request"].secret_conf_file == "airflow-iceberg-secret-conf.json"
    assert seen["shipped"] == {"spark.sql.catalog.lake.s3.secret-access-key": "SENTINEL-s3-key"}
    assert "SENTINEL" not in " ".join(command)
    assert result["committed"] is True


def test_a_kept_staging_dir_would_keep_the_secrets_and_is_refused(
    secret_sqlite_catalog, yarn_connection, monkeypatch
):
    conn_id, _ = secret_sqlite_catalog
    monkeypatch.setattr(SparkSubmitOperator, "execute", lambda self, context: pytest.fail("submitted"))
    op = IcebergAppendOperator(
        task_id="t", table="db.orders", iceberg_conn_id=conn_id, conn_id=yarn_connection,
        source_query="SELECT 1", conf={"spark.yarn.preserve.staging.files": "true"},
    )
    with pytest.raises(InvalidCatalogConfigError, match=r"preserve\.staging\.files=true would keep"):
        op.execute({"ti": _TaskInstance()})


@pytest.fixture
def k8s_connection(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_K8S_CLUSTER",
        '{"conn_type": "spark", "host": "k8s://https://127.0.0.1:6443", '
        '"extra": {"deploy-mode": "cluster", "namespace": "spark-jobs"}}',
    )
    return "k8s_cluster"


@pytest.fixture
def k8s_secret_catalog(sqlite_catalog, iceberg_connection, tmp_path):
    """The SQLite catalog, its secrets in a Kubernetes secret the connection names (none in Airflow)."""
    _, catalog = sqlite_catalog
    secret_name = {"kubernetes_credentials": "lake-catalog"}
    conn_id = _lake_connection(iceberg_connection, tmp_path, "lake_on_k8s", **secret_name)
    return conn_id, catalog


class _Pods:
    """The Kubernetes API as the provider's backend asks it: the driver pod's phase."""

    def __init__(self) -> None:
        self.reads = 0

    def read_namespaced_pod(self, name, namespace):
        from types import SimpleNamespace

        self.reads += 1
        return SimpleNamespace(status=SimpleNamespace(phase="Succeeded", container_statuses=[]))


def test_on_kubernetes_the_providers_backend_submits_once_and_a_retry_reports_the_same_commit(
    k8s_secret_catalog, k8s_connection, monkeypatch
):
    """The apache-spark provider's own Kubernetes backend (``track_driver_via_k8s_api``, ``durable``):
    spark-submit returns once the driver pod exists, the pod is polled, and a retry after the
    worker died finds it succeeded, submits nothing, and reports the commit that pod made."""
    from airflow.providers.apache.spark.hooks import spark_submit as hook_module

    conn_id, catalog = k8s_secret_catalog
    pods, submits = _Pods(), []

    def submit(hook, application, **kwargs):
        command = hook._build_spark_submit_command(application)
        submits.append(command)
        request = parse_argv(command[command.index(application) + 1 :])  # the job's own arguments
        tags = {COMMIT_ID_PROPERTY: request.commit_id}
        catalog.load_table("db.orders").append(ROWS, snapshot_properties=tags)
        hook._kubernetes_driver_pod = f"orders-driver-{len(submits)}"

    monkeypatch.setattr(hook_module.SparkSubmitHook, "submit", submit)
    monkeypatch.setattr(hook_module.kube_client, "get_kube_client", lambda *a, **k: pods)
    store = _StateStore()

    def run(ti):
        op = IcebergAppendOperator(
            task_id="t", table="db.orders", iceberg_conn_id=conn_id, conn_id=k8s_connection,
            source_query="SELECT 1", track_driver_via_k8s_api=True, retries=2,
        )
        return op.execute({"ti": ti, "task_state_store": store})

    first = run(_TaskInstance(max_tries=2))
    command = submits[0]
    conf = dict(command[i + 1].split("=", 1) for i, arg in enumerate(command) if arg == "--conf")
    assert command[command.index("--master") + 1] == "k8s://https://127.0.0.1:6443"
    assert conf["spark.kubernetes.namespace"] == "spark-jobs"
    assert conf["spark.kubernetes.submission.waitAppCompletion"] == "false"  # the backend's own
    assert conf["spark.kubernetes.driver.secrets.lake-catalog"] == "/opt/airflow-iceberg/secrets/lake"
    job_argv = command[next(i for i, arg in enumerate(command) if arg.endswith("iceberg_job.py")) + 1 :]
    assert parse_argv(job_argv).secret_mounts == {"lake": "/opt/airflow-iceberg/secrets/lake"}
    assert "--secret-conf-file" not in job_argv  # nothing secret leaves the worker
    assert store.values["spark_job_id"] == "spark-jobs:orders-driver-1"
    assert store.values["k8s_driver_status"] == "Succeeded"
    assert first["committed"] is True and first["added_records"] == 2

    # The worker died after the pod succeeded: the retry submits nothing and reports that commit.
    again = run(_TaskInstance(max_tries=2, try_number=2))
    assert len(submits) == 1 and again["snapshot_id"] == first["snapshot_id"]
    assert len(catalog.load_table("db.orders").snapshots()) == 1

    # A clear: a new commit id, a new driver pod, a second commit.
    cleared = run(_TaskInstance(max_tries=5, try_number=3))
    assert len(submits) == 2 and cleared["snapshot_id"] != first["snapshot_id"]
    assert store.values["spark_job_id"] == "spark-jobs:orders-driver-2"


def test_durable_on_yarn_polls_the_resource_manager_or_is_refused(
    sqlite_catalog, yarn_connection, monkeypatch
):
    """The provider refuses ``durable`` in YARN cluster mode without ``yarn_track_via_rm_api``;
    the operator turns it on when the Spark connection names the ResourceManager, else refuses
    before anything is submitted, saying what to set."""
    conn_id, catalog = sqlite_catalog
    seen: dict = {}
    commit = _driver_on_the_cluster(catalog, seen)

    def execute(self, context):
        seen["tracks_via_rm"] = self._get_hook()._should_track_yarn_application_via_rm_api()
        commit(self, context)

    monkeypatch.setattr(SparkSubmitOperator, "execute", execute)
    op = IcebergAppendOperator(
        task_id="t", table="db.orders", iceberg_conn_id=conn_id, conn_id=yarn_connection,
        source_query="SELECT 1",
    )
    assert op.durable is True  # Airflow 3.3's default
    assert op.execute({"ti": _TaskInstance(), "task_state_store": _StateStore()})["committed"] is True
    assert seen["tracks_via_rm"] is True

    no_rm = '{"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}'
    monkeypatch.setenv("AIRFLOW_CONN_YARN_NO_RM", no_rm)
    op = IcebergAppendOperator(
        task_id="t", table="db.orders", iceberg_conn_id=conn_id, conn_id="yarn_no_rm",
        source_query="SELECT 1",
    )
    with pytest.raises(InvalidSpecError, match="set yarn_resourcemanager_webapp_address in the Spark"):
        op.execute({"ti": _TaskInstance()})


@pytest.fixture
def plain_yarn_connection(monkeypatch):
    """A YARN connection that says nothing of the deploy mode (spark-submit's default is client)."""
    monkeypatch.setenv("AIRFLOW_CONN_YARN_PLAIN", '{"conn_type": "spark", "host": "yarn"}')
    return "yarn_plain"


@pytest.mark.parametrize("route", ["properties_file", "spark_defaults", "env_vars", "worker_env"])
def test_cluster_mode_set_outside_the_operator_is_seen_and_refused_before_spark_submit(
    sqlite_catalog, plain_yarn_connection, monkeypatch, tmp_path, route
):
    """spark-submit takes its deploy mode from ``--deploy-mode``, else ``spark.submit.deployMode``
    from ``--conf`` or the properties file (``--properties-file`` or ``spark-defaults.conf``), else
    the ``DEPLOY_MODE`` environment variable (checked with Spark 3.5's spark-submit: each makes
    ``--master local`` fail with "Cluster deploy mode is not compatible"). A cluster mode the
    operator misses runs the job with a worker-local result file and /proc secrets path."""
    conn_id, _ = sqlite_catalog
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("spark.submit.deployMode   cluster\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "empty-conf"))
    kwargs: dict = {}
    if route == "properties_file":
        kwargs["properties_file"] = str(conf_dir / "spark-defaults.conf")
    elif route == "spark_defaults":
        monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    elif route == "env_vars":
        kwargs["env_vars"] = {"DEPLOY_MODE": "cluster"}
    else:
        monkeypatch.setenv("DEPLOY_MODE", "cluster")
    monkeypatch.setattr(SparkSubmitOperator, "execute", lambda self, context: pytest.fail("submitted"))
    op = IcebergTimeTravelReadOperator(
        task_id="t", table="db.orders", iceberg_conn_id=conn_id, conn_id=plain_yarn_connection,
        snapshot_id=1, **kwargs,
    )
    with pytest.raises(InvalidSpecError, match="a read runs in cluster deploy mode only as a batch copy"):
        op.execute({"ti": _TaskInstance()})


@pytest.mark.parametrize("route", ["spark_defaults", "spark_submit_opts"])
def test_a_staging_dir_kept_by_the_deployment_is_refused_too(
    secret_sqlite_catalog, yarn_connection, monkeypatch, tmp_path, route
):
    """``spark.yarn.preserve.staging.files`` from ``spark-defaults.conf``, or as a ``-D`` system property
    in ``SPARK_SUBMIT_OPTS`` (SparkConf loads ``spark.*`` system properties: checked with Spark 3.5),
    keeps the secrets file in HDFS as surely as the operator's ``conf``."""
    conn_id, _ = secret_sqlite_catalog
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    if route == "spark_defaults":
        (conf_dir / "spark-defaults.conf").write_text("spark.yarn.preserve.staging.files=TRUE\n")
    else:
        monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-Xmx1g -Dspark.yarn.preserve.staging.files=true")
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    monkeypatch.setattr(SparkSubmitOperator, "execute", lambda self, context: pytest.fail("submitted"))
    op = IcebergAppendOperator(
        task_id="t", table="db.orders", iceberg_conn_id=conn_id, conn_id=yarn_connection,
        source_query="SELECT 1", durable=False,
    )
    with pytest.raises(InvalidCatalogConfigError, match=r"preserve\.staging\.files=true would keep"):
        op.execute({"ti": _TaskInstance()})


def test_a_non_idempotent_retry_still_reconnects_to_its_running_driver(sqlite_catalog, monkeypatch):
    """``idempotent=False`` gives every try a new commit id, so a retry looked like a clear: the
    provider's stored application was dropped and a second driver submitted beside the first one,
    still running on the cluster after the worker died (two commits), and the result was looked up
    under the new id (``committed: false`` for the driver that did commit). ``durable`` is the
    provider's promise, not the commit id's: a retry keeps its job and that job's commit id; a
    clear still submits again."""
    conn_id, catalog = sqlite_catalog
    seen: dict = {}
    monkeypatch.setattr(SparkSubmitOperator, "execute", _driver_on_the_cluster(catalog, seen))
    op = _cluster_append(conn_id, retries=2, idempotent=False)
    store = _StateStore()
    op.execute({"ti": _TaskInstance(max_tries=2), "task_state_store": store})
    first_commit = seen["request"].commit_id
    store.set("spark_job_id", "application_1_0001")

    op.execute({"ti": _TaskInstance(max_tries=2, try_number=2), "task_state_store": store})
    assert seen["store_at_submit"].get("spark_job_id") == "application_1_0001"
    assert seen["request"].commit_id == first_commit

    op.execute({"ti": _TaskInstance(max_tries=5, try_number=3), "task_state_store": store})
    assert "spark_job_id" not in seen["store_at_submit"]
    assert seen["request"].commit_id != first_commit


class _ResourceManager(http.server.ThreadingHTTPServer):
    """A ResourceManager's REST API on loopback: each application's state (404 when unknown), and kills."""

    def __init__(self) -> None:
        self.states: dict[str, str] = {}
        self.kills: list[str] = []
        super().__init__(("127.0.0.1", 0), _ResourceManagerHandler)

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _ResourceManagerHandler(http.server.BaseHTTPRequestHandler):
    server: _ResourceManager

    def do_GET(self) -> None:
        application_id = self.path.rstrip("/").rsplit("/", 1)[-1]
        state = self.server.states.get(application_id)
        body = json.dumps({"app": {"state": state, "finalStatus": "KILLED"}}).encode() if state else b"{}"
        self.send_response(200 if state else 404)
        self.end_headers()
        self.wfile.write(body)

    def do_PUT(self) -> None:
        application_id = self.path.rstrip("/").split("/")[-2]
        self.server.kills.append(application_id)
        self.server.states[application_id] = "KILLED"
        self.send_response(202)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def resource_manager():
    server = _ResourceManager()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def yarn_staging(secret_sqlite_catalog, resource_manager, tmp_path, monkeypatch):
    """A cluster-mode append on YARN with a secret, its staging root, and the ResourceManager's answers.

    The application's staging directory is made as spark-submit makes it (``<stagingDir>/<user>/
    .sparkStaging/<id>``, the secrets file in it) on the local file system; Hadoop's real
    ``FsShell`` (the worker's ``spark-class``) is what must delete it.
    """
    import getpass

    conn_id, _ = secret_sqlite_catalog
    staging = tmp_path / "staging"
    monkeypatch.setenv(
        "AIRFLOW_CONN_YARN_WITH_RM",
        json.dumps({"conn_type": "spark", "host": "yarn", "extra": {
            "deploy-mode": "cluster", "yarn_resourcemanager_webapp_address": resource_manager.address,
        }}),
    )

    def application_dir(application_id: str, root: Path = staging) -> Path:
        folder = root / getpass.getuser() / ".sparkStaging" / application_id
        folder.mkdir(parents=True)
        (folder / "7").write_text('{"spark.sql.catalog.lake.s3.secret-access-key": "SENTINEL-s3-key"}')
        return folder

    def operator(root: Path = staging, **kwargs: object) -> IcebergAppendOperator:
        return IcebergAppendOperator(
            task_id="t", table="db.orders", iceberg_conn_id=conn_id, conn_id="yarn_with_rm",
            source_query="SELECT 1", yarn_track_via_rm_api=True,
            conf={"spark.yarn.stagingDir": root.as_uri()}, **kwargs,
        )

    return application_dir, operator, resource_manager.states


def _ends_with(state: str, application_id: str = "application_1_0001"):
    """spark-submit's stand-in: the application was submitted, then the provider's polling saw ``state``."""

    def execute(self, context):
        self._hook = self._get_hook()
        self._hook._yarn_application_id = application_id
        raise RuntimeError(f"YARN application {application_id} ended with state: {state}")

    return execute


def _gone(folder: Path, seconds: float = 90) -> bool:
    """Whether ``folder`` is deleted within ``seconds`` (a watcher process deletes it after the task)."""
    deadline = time.monotonic() + seconds
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.3)
    return not folder.exists()


def test_a_killed_yarn_application_leaves_no_secrets_in_its_staging_dir(yarn_staging, monkeypatch):
    """Spark deletes the staging directory only when the application ends by itself; one killed
    (``yarn application -kill``, the ResourceManager's UI) keeps the secrets file. The failed task
    deletes it, and only that application's."""
    application_dir, operator, states = yarn_staging
    killed, neighbour = application_dir("application_1_0001"), application_dir("application_1_0002")
    states.update(application_1_0001="KILLED", application_1_0002="RUNNING")
    monkeypatch.setattr(SparkSubmitOperator, "execute", _ends_with("KILLED"))
    with pytest.raises(IcebergJobError, match="ended with state: KILLED"):
        operator().execute({"ti": _TaskInstance(), "task_state_store": _StateStore()})
    assert not killed.exists()
    assert (neighbour / "7").exists()


@pytest.mark.parametrize("state", ["RUNNING", "ACCEPTED", None])  # None: the RM does not answer
def test_a_yarn_application_that_may_still_run_keeps_its_staging_dir(yarn_staging, monkeypatch, state):
    """The provider gives up polling after ten ResourceManager errors in a row; the application
    may be running, and a new attempt of it (or the retry, reconnecting) needs its files."""
    application_dir, operator, states = yarn_staging
    running = application_dir("application_1_0001")
    if state:
        states["application_1_0001"] = state
    else:
        monkeypatch.setenv(
            "AIRFLOW_CONN_YARN_WITH_RM",
            '{"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster", '
            '"yarn_resourcemanager_webapp_address": "http://127.0.0.1:9"}}',
        )
    monkeypatch.setattr(SparkSubmitOperator, "execute", _ends_with("unknown: 10 consecutive RM failures"))
    with pytest.raises(IcebergJobError):
        operator().execute({"ti": _TaskInstance(), "task_state_store": _StateStore()})
    assert (running / "7").exists()


def test_an_application_spark_submit_never_submitted_leaves_no_secrets(yarn_staging, monkeypatch):
    """spark-submit names the application's staging directory while it uploads, before it submits;
    killed there, the ResourceManager never hears of it (404), and nothing will run it."""
    application_dir, operator, _ = yarn_staging
    folder = application_dir("application_1_0001")
    monkeypatch.setattr(SparkSubmitOperator, "execute", _ends_with("spark-submit exited with 137"))
    with pytest.raises(IcebergJobError):
        operator().execute({"ti": _TaskInstance(), "task_state_store": _StateStore()})
    assert not folder.exists()


def test_on_kill_deletes_the_staging_dir_once_the_application_ended(yarn_staging, resource_manager):
    """Marked failed, cleared or timed out: the task's ``on_kill`` has the provider kill the
    application through the ResourceManager, and a watcher process of its own (Airflow sends
    SIGKILL five seconds after SIGTERM) deletes the staging directory once it ended."""
    application_dir, operator, states = yarn_staging
    folder = application_dir("application_1_0001")
    states["application_1_0001"] = "RUNNING"
    op = operator()
    op._secrets_shipped_to_yarn = True
    op._hook = op._get_hook()
    op._hook._yarn_application_id = "application_1_0001"
    op.on_kill()
    assert resource_manager.kills == ["application_1_0001"]
    assert _gone(folder)


def test_on_kill_keeps_the_staging_dir_while_the_application_still_runs(yarn_staging, resource_manager):
    """The kill was refused (ACLs: HTTP 403) or is slow: a new attempt of the application would
    need its files, so the watcher waits for the end, and deletes only then."""
    application_dir, operator, states = yarn_staging
    folder = application_dir("application_1_0001")
    op = operator()
    op._secrets_shipped_to_yarn = True
    op._hook = op._get_hook()
    op._hook._yarn_application_id = "application_1_0001"
    op._hook._kill_yarn_application = lambda application_id: None  # the kill did nothing
    states["application_1_0001"] = "RUNNING"
    op.on_kill()
    time.sleep(8)  # the watcher asks every few seconds
    assert (folder / "7").exists()
    states["application_1_0001"] = "FINISHED"  # it ended by itself (Spark would have deleted it)
    assert _gone(folder)


def test_on_kill_stops_a_spark_submit_still_uploading(yarn_staging):
    """The provider's YARN kill goes to the ResourceManager only; a spark-submit still uploading
    would submit the application after the task was stopped."""
    _, operator, _ = yarn_staging
    op = operator()
    op._hook = op._get_hook()
    op._hook._submit_sp = subprocess.Popen(["sleep", "300"])
    op.on_kill()
    assert op._hook._submit_sp.wait(10) == -signal.SIGKILL


def test_a_retry_that_reconnected_to_its_application_can_kill_it(yarn_staging, monkeypatch):
    """A retry reconnects to the stored application without running spark-submit, so the
    provider's hook never learns its id, and the provider's ``on_kill`` would kill nothing."""
    _, operator, _ = yarn_staging
    polled: list[str] = []
    monkeypatch.setattr(
        "airflow.providers.apache.spark.hooks.spark_submit.SparkSubmitHook._start_yarn_application_status_tracking",
        lambda hook, application_id: polled.append(application_id),
    )
    op = operator()
    op._hook = op._get_hook()
    op.poll_until_complete("application_1_0003", {})
    assert polled == ["application_1_0003"]
    assert op._hook._yarn_application_id == "application_1_0003"


@pytest.mark.parametrize("state", ["KILLED", None])  # None: the ResourceManager forgot it (404)
def test_a_retry_deletes_the_staging_dir_an_earlier_try_left(yarn_staging, monkeypatch, state):
    """The worker died (SIGKILL: no ``on_kill``), and its application was killed later, or ended
    so long ago that the ResourceManager forgot it. The retry deletes its staging directory
    before submitting."""
    application_dir, operator, states = yarn_staging
    folder = application_dir("application_1_0001")
    if state:
        states["application_1_0001"] = state
    seen: dict = {}

    def submit(self, context):
        seen["left_at_submit"] = folder.exists()

    monkeypatch.setattr(SparkSubmitOperator, "execute", submit)
    monkeypatch.setattr("airflow_iceberg.operators.base.result_from_catalog", lambda *a: {"status": "ok"})
    op = operator()
    store = _StateStore(spark_job_id="application_1_0001")
    op.execute({"ti": _TaskInstance(max_tries=2, try_number=2), "task_state_store": store})
    assert seen == {"left_at_submit": False}


def test_the_properties_files_hadoop_settings_reach_the_deletion(yarn_staging, monkeypatch, tmp_path):
    """``spark.hadoop.*`` in ``spark-defaults.conf`` decide where Spark staged (``fs.defaultFS``),
    so FsShell gets them as spark-submit did."""
    _, operator, _ = yarn_staging
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("spark.hadoop.fs.defaultFS viewfs://c/\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    op = operator()
    op._hook = op._get_hook()
    argv = op._staging_deletion(op._hook, "application_1_0001").argv
    assert argv is not None and argv[argv.index("-D") + 1] == "fs.defaultFS=viewfs://c/"


def test_the_connections_principal_is_the_user_whose_staging_dir_is_deleted(yarn_staging, monkeypatch):
    """The provider takes the Kerberos principal from the Spark connection's extra too."""
    _, operator, _ = yarn_staging
    monkeypatch.setattr("airflow.security.kerberos.renew_from_kt", lambda *a, **k: None)
    op = operator()
    op._hook = op._get_hook()
    op._hook._connection = {**op._hook._connection, "principal": "etl@EXAMPLE.COM", "keytab": "/k"}
    deletion = op._staging_deletion(op._hook, "application_1_0001")
    assert "/etl/.sparkStaging/application_1_0001" in deletion.path


def test_without_secrets_a_failed_applications_staging_dir_is_left_to_yarn(
    sqlite_catalog, yarn_connection, monkeypatch
):
    """Nothing of the connection's is in it: the operator starts no deletion."""
    conn_id, _ = sqlite_catalog
    monkeypatch.setattr(SparkSubmitOperator, "execute", _ends_with("KILLED"))
    monkeypatch.setattr(
        "airflow_iceberg.operators.yarn_staging_mixin.StagingDeletion.plan",
        lambda *a, **k: pytest.fail("deleted"),
    )
    op = IcebergAppendOperator(
        task_id="t", table="db.orders", iceberg_conn_id=conn_id, conn_id=yarn_connection,
        source_query="SELECT 1", yarn_track_via_rm_api=True,
    )
    with pytest.raises(IcebergJobError):
        op.execute({"ti": _TaskInstance(), "task_state_store": _StateStore()})


def test_secrets_on_yarn_without_the_resourcemanager_address_are_refused(
    secret_sqlite_catalog, monkeypatch
):
    """Without it no one can tell when the application ended, and its staging directory (the
    secrets file in it) could never be deleted safely."""
    conn_id, _ = secret_sqlite_catalog
    monkeypatch.setenv(
        "AIRFLOW_CONN_YARN_NO_RM",
        '{"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}',
    )
    monkeypatch.setattr(SparkSubmitOperator, "execute", lambda self, context: pytest.fail("submitted"))
    op = IcebergAppendOperator(
        task_id="t", table="db.orders", iceberg_conn_id=conn_id, conn_id="yarn_no_rm",
        source_query="SELECT 1", durable=False, idempotent=False,
    )
    with pytest.raises(InvalidCatalogConfigError, match="yarn_resourcemanager_webapp_address"):
        op.execute({"ti": _TaskInstance()})


def test_a_jdbc_catalog_pyiceberg_cannot_read_is_refused_before_spark_submit(
    iceberg_connection, spark_connection, monkeypatch
):
    """A JDBC catalog on MySQL is a ``jdbc`` catalog, one of pyiceberg's kinds, but pyiceberg reads
    JDBC catalogs on SQLite and PostgreSQL only: the job was submitted, committed, and the lookup
    then failed ("pyiceberg reads JDBC catalogs on SQLite or PostgreSQL only"), on every retry."""
    conn_id = iceberg_connection(
        "lake_mysql", host="jdbc:mysql://127.0.0.1:3306/iceberg",
        extra={"catalog_name": "lake", "catalog_type": "jdbc", "warehouse": "file:///wh"},
    )
    monkeypatch.setattr(SparkSubmitOperator, "execute", lambda self, context: pytest.fail("submitted"))
    op = _cluster_append(conn_id)
    with pytest.raises((InvalidSpecError, InvalidCatalogConfigError), match="cluster deploy mode"):
        op.execute({"ti": _TaskInstance()})


@pytest.mark.parametrize(
    ("connection", "kwargs", "store"),
    [
        ("k8s_connection", {}, True),  # the provider's default: spark-submit waits, nothing stored
        ("yarn_connection", {"durable": False}, True),
        ("yarn_connection", {"yarn_track_via_rm_api": True}, False),  # Airflow < 3.3: no task state
    ],
)
def test_a_cluster_driver_no_retry_can_find_is_refused_before_spark_submit(
    sqlite_catalog, request, monkeypatch, connection, kwargs, store
):
    """Without the provider's durable tracking, a worker killed mid-job leaves its driver running
    on the cluster; the retry (same commit id) finds no commit yet and submits a second driver:
    two commits. In client mode the driver dies with the worker."""
    conn_id, _ = sqlite_catalog
    monkeypatch.setattr(SparkSubmitOperator, "execute", lambda self, context: pytest.fail("submitted"))
    op = IcebergAppendOperator(
        task_id="t", table="db.orders", iceberg_conn_id=conn_id, source_query="SELECT 1",
        conn_id=request.getfixturevalue(connection), **kwargs,
    )
    context = {"ti": _TaskInstance(), **({"task_state_store": _StateStore()} if store else {})}
    with pytest.raises(InvalidSpecError, match="needs the apache-spark provider's durable tracking"):
        op.execute(context)

"""Operators: template rendering, the exact spark-submit argv, results, and failing before Spark."""

from __future__ import annotations

import json
import os
from pathlib import Path
from unittest import mock

import pendulum
import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG

from airflow_iceberg.catalog.spark_settings import REDACTION_REGEX
from airflow_iceberg.exceptions import IcebergJobError, InvalidCatalogConfigError, InvalidSpecError
from airflow_iceberg.jobs import ICEBERG_JOB_PATH
from airflow_iceberg.jobs.spec.request import JobRequest, parse_argv
from airflow_iceberg.operators import (
    IcebergAppendOperator,
    IcebergCreateTableOperator,
    IcebergOverwriteOperator,
    IcebergOverwritePartitionsOperator,
    IcebergTimeTravelReadOperator,
)

EXT = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
REGEX = REDACTION_REGEX


@pytest.fixture
def jdbc_catalog(iceberg_connection, spark_connection):
    return iceberg_connection(
        "pg_catalog",
        host="jdbc:postgresql://127.0.0.1:5432/iceberg",
        login="etl",
        password="SENTINEL-pw",
        extra={
            "catalog_name": "pg",
            "catalog_type": "jdbc",
            "warehouse": "file:///wh",
            "runtime_jar": "/jars/iceberg.jar",
            "extra_jars": "/usr/share/java/postgresql.jar",
        },
    )


def _dag():
    return DAG("d", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC"))


class _TaskInstance:
    """Just enough of a task instance for templates (Jinja's sandbox refuses Mock methods)."""

    def __init__(self, task_id: str, xcoms: dict | None = None) -> None:
        self.dag_id, self.task_id, self.run_id, self.map_index, self.try_number = (
            "d",
            task_id,
            "manual__1",
            -1,
            1,
        )
        self._xcoms = xcoms or {}

    def xcom_pull(self, task_ids: str, key: str = "return_value", **_: object):
        return self._xcoms.get(task_ids)


def _ti(task_id="t", xcoms=None):
    return _TaskInstance(task_id, xcoms)


def test_exact_spark_submit_argv_without_secrets(jdbc_catalog):
    op = IcebergAppendOperator(
        task_id="append",
        table="db.orders",
        iceberg_conn_id=jdbc_catalog,
        source_query="SELECT 1 AS id",
        write_options={"isolation-level": "snapshot"},
        conf={"spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension"},
        executor_memory="2g",
        name="job",
    )
    spec = op.qualify_spec(op.build_spec().validated(), ("pg",)).validated()
    settings = op.catalog_settings()
    request = JobRequest(spec=spec, result_file="/tmp/r.json", commit_id="c1")
    op._configure_submit(settings, request, job_archive="/tmp/airflow-iceberg-x/airflow_iceberg_jobs.zip")
    command = op._get_hook()._build_spark_submit_command(op.application)
    assert command == [
        "spark-submit",
        "--master",
        "local[2]",
        "--conf",
        f"spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension,{EXT}",
        "--conf",
        "spark.sql.catalog.pg=org.apache.iceberg.spark.SparkCatalog",
        "--conf",
        f"spark.redaction.regex={REGEX}",
        "--conf",
        "spark.sql.catalog.pg.type=jdbc",
        "--conf",
        "spark.sql.catalog.pg.warehouse=file:///wh",
        "--conf",
        "spark.sql.catalog.pg.uri=jdbc:postgresql://127.0.0.1:5432/iceberg",
        "--conf",
        "spark.sql.catalog.pg.jdbc.schema-version=V1",
        "--conf",
        "spark.sql.catalog.pg.jdbc.user=etl",
        "--conf",
        "spark.sql.defaultCatalog=pg",
        "--py-files",
        "/tmp/airflow-iceberg-x/airflow_iceberg_jobs.zip",
        "--jars",
        "/jars/iceberg.jar,/usr/share/java/postgresql.jar",
        "--executor-memory",
        "2g",
        "--name",
        "job",
        str(ICEBERG_JOB_PATH),
        "--result-file",
        "/tmp/r.json",
        "--commit-id",
        "c1",
        "write",
        "--table",
        "pg.db.orders",
        "--mode",
        "append",
        "--source-query",
        "SELECT 1 AS id",
        "--write-option",
        "isolation-level=snapshot",
    ]
    assert settings.secret_conf == {"spark.sql.catalog.pg.jdbc.password": "SENTINEL-pw"}
    assert "SENTINEL" not in " ".join(command)


def test_templates_render_including_xcom_and_dates(jdbc_catalog):
    with _dag():
        op = IcebergTimeTravelReadOperator(
            task_id="read",
            table="db.{{ params.table }}",
            iceberg_conn_id=jdbc_catalog,
            snapshot_id="{{ ti.xcom_pull(task_ids='append')['snapshot_id'] }}",
            filter="order_date = DATE'{{ ds }}'",
            sink_path="/out/{{ ds_nodash }}",
            params={"table": "orders"},
        )
    ti = _ti("read", {"append": {"snapshot_id": 6754764947717687654}})
    op.render_template_fields(
        context={"ti": ti, "ds": "2024-01-02", "ds_nodash": "20240102", "params": {"table": "orders"}}
    )
    assert (op.table, op.snapshot_id, op.filter, op.sink_path, op.name) == (
        "db.orders",
        "6754764947717687654",
        "order_date = DATE'2024-01-02'",
        "/out/20240102",
        "airflow-iceberg-d.read",
    )
    spec = op.build_spec().validated()
    assert spec.snapshot_id == 6754764947717687654


def test_list_and_dict_arguments_are_kept_as_given_until_rendered(jdbc_catalog):
    """Templates and XComArgs survive parsing; the rendered text becomes the list or dict."""
    from airflow.sdk import task

    with _dag():

        @task
        def options() -> dict:
            return {"write-format": "avro"}

        chosen = options()
        create = IcebergCreateTableOperator(
            task_id="create",
            table="db.t",
            iceberg_conn_id=jdbc_catalog,
            extra_iceberg_conn_ids="{{ params.more }}",
            source_query="SELECT 1 AS id",
            partition_by="{{ params.partition_by }}",
            table_properties="{{ params.properties | tojson }}",
            write_options=chosen,  # an XComArg: a TypeError at parse time before
            params={"partition_by": ["bucket(4, id)", "id"], "more": "iceberg_hive", "properties": {}},
        )
        read = IcebergTimeTravelReadOperator(
            task_id="read", table="db.t", iceberg_conn_id=jdbc_catalog, columns="{{ params.columns }}"
        )
    params = {"partition_by": ["bucket(4, id)", "id"], "more": "iceberg_hive",
              "properties": {"format-version": "2"}, "columns": "id"}
    context = {"ti": _ti("create", {"options": {"write-format": "avro"}}), "params": params}
    create.render_template_fields(context=context)
    read.render_template_fields(context=context)

    spec = create.build_spec().validated()
    assert spec.partition_by == ("bucket(4, id)", "id")
    assert spec.table_properties == {"format-version": "2"}
    assert spec.write_options == {"write-format": "avro"}
    assert [hook.iceberg_conn_id for hook in create.catalog_hooks] == [jdbc_catalog, "iceberg_hive"]
    assert read.build_spec().columns == ("id",)


def test_a_rendered_value_of_the_wrong_shape_names_the_argument(jdbc_catalog):
    op = IcebergAppendOperator(
        task_id="append", table="db.t", iceberg_conn_id=jdbc_catalog, source_query="SELECT 1",
        write_options="[1, 2]",
    )
    with pytest.raises(InvalidSpecError, match="write_options must be a mapping"):
        op.build_spec()


def test_as_of_timestamp_renders_from_data_interval_end(jdbc_catalog):
    with _dag():
        op = IcebergTimeTravelReadOperator(
            task_id="read",
            table="db.t",
            iceberg_conn_id=jdbc_catalog,
            as_of_timestamp="{{ data_interval_end }}",
        )
    op.render_template_fields(
        context={"ti": _ti(), "data_interval_end": pendulum.datetime(2024, 1, 2, tz="UTC")}
    )
    assert op.build_spec().as_of_timestamp == 1704153600000


def test_template_fields_cover_every_user_facing_sql_and_name():
    assert {
        "table",
        "source_query",
        "source_table",
        "source_path",
        "write_options",
        "partition_by",
        "table_properties",
        "conf",
        "application_args",
    } <= set(IcebergCreateTableOperator.template_fields)
    assert "condition" in IcebergOverwriteOperator.template_fields
    assert {"snapshot_id", "as_of_timestamp", "branch", "tag", "filter", "sink_table"} <= set(
        IcebergTimeTravelReadOperator.template_fields
    )


def _fake_submit(result):
    """Stand in for spark-submit: write what the job would write, and capture the environment."""
    seen = {}

    def execute(self, context):
        args = self.application_args
        seen["argv"] = list(args)
        secret_file = Path(args[args.index("--secret-conf-file") + 1])
        seen["secret_file_mode"] = secret_file.stat().st_mode & 0o777
        seen["secrets"] = json.loads(secret_file.read_text())
        seen["secret_file"] = secret_file
        seen["secret_file_target"] = os.readlink(secret_file) if secret_file.is_symlink() else None
        seen["environ"] = dict(os.environ)
        Path(args[args.index("--result-file") + 1]).write_text(json.dumps(result))

    return seen, mock.patch.object(SparkSubmitOperator, "execute", execute)


def test_execute_returns_the_result_and_hands_secrets_over_in_a_private_file(jdbc_catalog):
    result = {
        "status": "success",
        "table": "pg.db.orders",
        "snapshot_id": 7,
        "operation": "append",
        "added_records": 3,
        "total_records": 9,
    }
    seen, patch = _fake_submit(result)
    op = IcebergAppendOperator(
        task_id="append", table="db.orders", iceberg_conn_id=jdbc_catalog, source_query="SELECT 1"
    )
    with patch:
        assert op.execute({"ti": _ti()}) == result
    assert seen["secrets"] == {"spark.sql.catalog.pg.jdbc.password": "SENTINEL-pw"}
    assert seen["secret_file_mode"] == 0o600
    # In memory, never on disk (a SIGKILLed worker leaves nothing), and closed when execute ends.
    assert str(seen["secret_file"]).startswith(f"/proc/{os.getpid()}/fd/")
    assert seen["secret_file_target"].startswith("/memfd:airflow-iceberg-secret-conf")
    path, target = seen["secret_file"], seen["secret_file_target"]
    assert not path.exists() or os.readlink(path) != target
    # not in this process's environment, which post_submit_commands and other children inherit
    # (the test's own AIRFLOW_CONN_* variable holds the connection, as a deployment's might)
    leaked = [k for k, v in seen["environ"].items() if "SENTINEL" in v and not k.startswith("AIRFLOW_CONN_")]
    assert leaked == []
    assert "--commit-property" in seen["argv"] and "airflow.task-id=t" in seen["argv"]
    assert "SENTINEL" not in " ".join(seen["argv"]) + " ".join(map(str, op.conf.values()))


@pytest.mark.parametrize("where", ["operator", "conf"])
def test_catalog_secrets_in_cluster_deploy_mode_are_refused_before_spark_submit(jdbc_catalog, where):
    """In cluster deploy mode the driver runs on the cluster, where the worker's private file or
    ``/proc/<pid>/fd/<n>`` is missing, or names another process's descriptor."""
    seen, patch = _fake_submit({"status": "success"})
    in_conf = {"conf": {"spark.submit.deployMode": "cluster"}}
    cluster = {"deploy_mode": "cluster"} if where == "operator" else in_conf
    op = IcebergAppendOperator(
        task_id="append", table="db.orders", iceberg_conn_id=jdbc_catalog, source_query="SELECT 1", **cluster
    )
    with patch, pytest.raises(InvalidCatalogConfigError, match="reach a driver on the cluster only on YARN"):
        op.execute({"ti": _ti()})
    assert "argv" not in seen  # spark-submit never ran


def test_a_reported_job_failure_becomes_a_clear_error(jdbc_catalog):
    def execute(self, context):
        args = self.application_args
        Path(args[args.index("--result-file") + 1]).write_text(
            json.dumps({"status": "failed", "error": "TableStateError: table pg.db.orders does not exist"})
        )
        raise RuntimeError("Cannot execute: spark-submit ... Error code is: 1.")

    op = IcebergAppendOperator(
        task_id="append", table="db.orders", iceberg_conn_id=jdbc_catalog, source_query="SELECT 1"
    )
    with (
        mock.patch.object(SparkSubmitOperator, "execute", execute),
        pytest.raises(
            IcebergJobError, match=r"pg\.db\.orders: TableStateError: table pg\.db\.orders does not exist"
        ),
    ):
        op.execute({"ti": _ti()})


@pytest.mark.parametrize(
    ("operator", "kwargs", "error", "message"),
    [
        (
            IcebergAppendOperator,
            {"table": "db.t; DROP TABLE x", "source_query": "SELECT 1"},
            InvalidSpecError,
            "invalid part",
        ),
        (
            IcebergAppendOperator,
            {"table": "db.t", "source_query": "DROP TABLE db.t"},
            InvalidSpecError,
            "must be a query",
        ),
        (
            IcebergCreateTableOperator,
            {"table": "db.t", "source_query": "SELECT 1", "mode": "append"},
            InvalidSpecError,
            "mode must be one of create",
        ),
        (
            IcebergCreateTableOperator,
            {"table": "db.t", "source_query": "SELECT 1", "partition_by": ["weeks(ts)"]},
            InvalidSpecError,
            "partition_by",
        ),
        (
            IcebergOverwriteOperator,
            {"table": "db.t", "source_query": "SELECT 1", "condition": "1=1; DROP TABLE t"},
            InvalidSpecError,
            "without ';'",
        ),
        (IcebergOverwritePartitionsOperator, {"table": "db.t"}, InvalidSpecError, "give one of source_query"),
        (
            IcebergTimeTravelReadOperator,
            {"table": "db.t", "snapshot_id": 1, "as_of_timestamp": 2},
            InvalidSpecError,
            "exactly one of",
        ),
        (
            IcebergTimeTravelReadOperator,
            {"table": "db.t", "as_of_timestamp": "last tuesday"},
            InvalidSpecError,
            "as_of_timestamp",
        ),
    ],
)
def test_bad_input_fails_before_spark_starts(jdbc_catalog, operator, kwargs, error, message):
    op = operator(task_id="t", iceberg_conn_id=jdbc_catalog, **kwargs)
    with mock.patch.object(SparkSubmitOperator, "execute") as submit, pytest.raises(error, match=message):
        op.execute({"ti": _ti()})
    submit.assert_not_called()


def test_bad_connection_fails_before_spark_starts(iceberg_connection, spark_connection):
    conn_id = iceberg_connection("broken", extra={"catalog_type": "hadoop"})
    op = IcebergAppendOperator(task_id="t", table="db.t", iceberg_conn_id=conn_id, source_query="SELECT 1")
    with (
        mock.patch.object(SparkSubmitOperator, "execute") as submit,
        pytest.raises(InvalidCatalogConfigError, match=r"'Warehouse' \(warehouse\): is required"),
    ):
        op.execute({"ti": _ti()})
    submit.assert_not_called()


@pytest.mark.parametrize(
    ("field", "value", "key"),
    [
        ("catalog_properties", {"credential": "SENTINEL-cp"}, "credential"),
        ("catalog_properties", '{"rest.auth.token": "SENTINEL-cp"}', "rest.auth.token"),  # a JSON string
        ("hadoop_properties", '{"fs.s3a.secret.key": "SENTINEL-hp"}', "fs.s3a.secret.key"),
    ],
)
def test_a_secret_airflow_shows_in_clear_fails_before_spark_starts(
    iceberg_connection, spark_connection, field, value, key
):
    conn_id = iceberg_connection("clear", extra={"catalog_type": "hadoop", "warehouse": "/wh", field: value})
    op = IcebergAppendOperator(task_id="t", table="db.t", iceberg_conn_id=conn_id, source_query="SELECT 1")
    with (
        mock.patch.object(SparkSubmitOperator, "execute") as submit,
        pytest.raises(InvalidCatalogConfigError) as refused,
    ):
        op.execute({"ti": _ti()})
    submit.assert_not_called()
    assert f"({field}): key {key!r} looks like a secret" in str(refused.value)
    assert "move it to Secret properties (JSON) (secret_properties)" in str(refused.value)
    assert "SENTINEL" not in str(refused.value)


def test_constructing_operators_reads_no_connection(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("connection looked up at DAG parse time")

    monkeypatch.setattr("airflow.sdk.bases.hook.BaseHook.get_connection", forbidden)
    IcebergAppendOperator(task_id="t", table="db.t", iceberg_conn_id="nowhere", source_query="SELECT 1")
    IcebergTimeTravelReadOperator(task_id="r", table="db.t", iceberg_conn_id="nowhere", snapshot_id="{{ x }}")


def test_the_job_and_its_arguments_cannot_be_overridden():
    with pytest.raises(TypeError, match="submits its own PySpark job"):
        IcebergAppendOperator(task_id="t", table="db.t", source_query="SELECT 1", application="/my.py")


def test_table_from_another_catalog_is_left_qualified(jdbc_catalog, iceberg_connection):
    other = iceberg_connection(
        "hive_cat",
        host="thrift://127.0.0.1:9083",
        extra={"catalog_name": "hive_prod", "catalog_type": "hive"},
    )
    op = IcebergAppendOperator(
        task_id="t",
        table="db.t",
        iceberg_conn_id=jdbc_catalog,
        extra_iceberg_conn_ids=[other],
        source_table="hive_prod.sales.raw",
    )
    settings = op.catalog_settings()
    spec = op.qualify_spec(op.build_spec().validated(), settings.catalog_names)
    assert (spec.table, spec.source.table) == ("pg.db.t", "hive_prod.sales.raw")
    assert settings.conf["spark.sql.catalog.hive_prod.uri"] == "thrift://127.0.0.1:9083"


@pytest.mark.parametrize(
    ("table", "qualified"),
    [
        ("`pg`.`sales-eu`.Orders", "`pg`.`sales-eu`.Orders"),  # a quoted catalog is still the catalog
        ("raw.events.v2_2024", "pg.raw.events.v2_2024"),  # no catalog raw: a nested namespace of pg
        ("ventes.commandes_été", "pg.ventes.commandes_été"),
        ("hive_prod.`my.ns`.t", "hive_prod.`my.ns`.t"),
    ],
)
def test_real_world_table_names_are_qualified_by_their_first_part(jdbc_catalog, table, qualified):
    op = IcebergAppendOperator(
        task_id="t", table=table, iceberg_conn_id=jdbc_catalog, source_query="SELECT 1"
    )
    spec = op.qualify_spec(op.build_spec().validated(), ("pg", "hive_prod")).validated()
    assert spec.table == qualified
    assert parse_argv(JobRequest(spec=spec).to_argv()).spec.table == qualified  # argv carries it as written


def test_commits_are_tagged_with_the_task_instance_so_retries_find_them(jdbc_catalog):
    seen, patch = _fake_submit({"status": "success", "table": "pg.db.orders", "snapshot_id": 1})
    op = IcebergAppendOperator(
        task_id="append", table="db.orders", iceberg_conn_id=jdbc_catalog, source_query="SELECT 1"
    )
    with patch:
        op.execute({"ti": _ti("append")})
    argv = seen["argv"]
    assert argv[argv.index("--commit-id") + 1] == "d:append:manual__1:-1:1:"
    assert "--reuse-commit" in argv


def test_non_idempotent_writes_get_a_fresh_commit_id_every_try(jdbc_catalog):
    seen, patch = _fake_submit({"status": "success", "table": "pg.db.orders", "snapshot_id": 1})
    op = IcebergAppendOperator(
        task_id="append",
        table="db.orders",
        iceberg_conn_id=jdbc_catalog,
        source_query="SELECT 1",
        idempotent=False,
    )
    ids = []
    with patch:
        for _ in range(2):
            op.execute({"ti": _ti("append")})
            ids.append(seen["argv"][seen["argv"].index("--commit-id") + 1])
    assert "--reuse-commit" not in seen["argv"]
    assert ids[0] != ids[1] and all(len(i) == 32 for i in ids)


def test_source_schema_is_templated_and_reaches_the_job_for_writes_and_merges():
    from airflow_iceberg.operators import IcebergMergeOperator

    with DAG("schema_dag", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC")):
        append = IcebergAppendOperator(
            task_id="append", table="db.t", source_path="/in/{{ ds }}", source_format="json",
            source_schema="{{ params.schema }}",
        )
        merge = IcebergMergeOperator(
            task_id="merge", table="db.t", source_path="/in", source_format="json", source_schema="table",
            keys=["id"],
        )
    append.render_template_fields(
        context={"ti": _ti(), "ds": "2024-01-02", "params": {"schema": "id INT, day DATE"}}
    )
    for op, schema in ((append, "id INT, day DATE"), (merge, "table")):
        assert "source_schema" in op.template_fields
        request = JobRequest(spec=op.build_spec().validated())
        assert parse_argv(request.to_argv()).spec.source.schema == schema

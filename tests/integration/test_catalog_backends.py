"""Real catalog back ends end to end: real Airflow CLI, real spark-submit, real catalog servers.

Every run is judged by pyiceberg (HiveCatalog / SqlCatalog / RestCatalog / StaticTable) talking to
the same catalog, or by plain Spark, the raw metastore thrift API and the S3 API, never by our own
job's report.
The Hadoop catalog's example-DAG run lives in ``test_example_dag.py`` and is not repeated here.

Spark is the slow part (each spark-submit takes 10-25 s), so each back end runs the example DAG
once, module-scoped, and every other scenario is one task (``airflow tasks test``) or a two-task
test DAG from ``tests/integration/dags``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
import subprocess
import textwrap
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from scripts.show_table import load_table
from tests.integration.airflow_runner import REPO, AirflowRunner, spark_connection
from tests.integration.catalog_connections import (
    JDBC_CATALOG_IMPL,
    custom_jdbc_connection,
    hadoop_connection,
    hive_connection,
    hive_reader,
    nessie_connection,
    postgres_connection,
    postgres_reader,
    rest_reader,
    rest_spark_connection,
    s3_filesystem,
    s3_objects,
    s3a_connection,
    session_catalog_connection,
)
from tests.integration.process_sampler import CommandLineSampler

EXAMPLE_DAG = "iceberg_daily_orders"
TEST_DAGS = REPO / "tests" / "integration" / "dags"
SPARK_SUBMIT = REPO / ".spark-venv" / "bin" / "spark-submit"


def run_airflow(runner: AirflowRunner, *args: str, test_dags: bool = False, **kwargs: Any):
    """Run the Airflow CLI; ``test_dags`` points the DAGs folder at this suite's own test DAGs."""
    env = {"AIRFLOW__CORE__DAGS_FOLDER": str(TEST_DAGS)} if test_dags else None
    return runner.airflow(*args, env=env, **kwargs)


def succeeded(completed: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    """Assert a CLI run succeeded; ``airflow tasks test`` exits 0 even when the task fails."""
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, (completed.stdout[-6000:], completed.stderr[-6000:])
    assert "Task failed with exception" not in output, output[-6000:]
    return completed


def sorted_rows(arrow_table: Any, *keys: str) -> list[tuple]:
    ordered = arrow_table.sort_by([(key, "ascending") for key in keys])
    return [tuple(row.values()) for row in ordered.to_pylist()]


def order_rows(table: Any, snapshot_id: int | None = None) -> list[tuple]:
    return sorted_rows(table.scan(snapshot_id=snapshot_id).to_arrow(), "order_date", "order_id")


# --------------------------------------------------------------------------- example DAG per back end


@dataclass
class BackendRun:
    """One back end after the example DAG ran on it: the pyiceberg catalog and the tasks' XComs."""

    name: str
    catalog: Any
    xcoms: dict[str, Any]
    output: str
    command_lines: set[str]


def backend_under_test(request: pytest.FixtureRequest, root: Path) -> tuple[dict, Any]:
    """The connection for ``request.param`` and pyiceberg's reader of the same catalog.

    Servers are fetched lazily, so running one back end (``-k hive``) starts only its server.
    """
    warehouse = root / "warehouse"
    if request.param == "rest":
        # The default path: no runtime_jar, so the runtime and iceberg-aws-bundle go through --packages.
        rest = request.getfixturevalue("rest_catalog")
        return rest_spark_connection(rest), rest_reader(rest)
    if request.param == "hive":
        metastore = request.getfixturevalue("hive_metastore")
        return hive_connection(metastore), hive_reader(metastore)
    if request.param == "postgres":
        server = request.getfixturevalue("postgres_server")
        return postgres_connection(server, warehouse), postgres_reader(server, warehouse)
    raise ValueError(f"no back end {request.param!r}")


#: The SQLite JDBC catalog runs the same example DAG, checked the same way by pyiceberg, in
#: ``test_secrets.py`` (with sentinel secrets); it is not run a second time here.
LOGICAL_DATES = {"hive": "2024-02-01", "postgres": "2024-02-02", "rest": "2024-02-09"}
#: The time-travel read goes through the catalog like any read; one back end (REST, the one on
#: S3) runs it, and the others mark it successful without running it (one spark-submit fewer each).
TIME_TRAVEL_BACKEND = "rest"


@pytest.fixture(scope="module", params=list(LOGICAL_DATES))
def backend_run(request, airflow_runner, tmp_path_factory) -> BackendRun:
    connection, catalog = backend_under_test(request, tmp_path_factory.mktemp(f"backend-{request.param}"))
    # Only the REST run carries S3 and OAuth2 secrets worth watching every command line for.
    sampler = CommandLineSampler()
    time_travel = request.param == TIME_TRAVEL_BACKEND
    skip_time_travel = () if time_travel else ("--mark-success-pattern", "^snapshot_before_correction$")
    with sampler if request.param == "rest" else contextlib.nullcontext():
        completed = succeeded(
            run_airflow(
                airflow_runner,
                "dags",
                "test",
                EXAMPLE_DAG,
                LOGICAL_DATES[request.param],
                *skip_time_travel,
                connections={"iceberg_catalog_default": connection, "spark_default": spark_connection()},
            )
        )
    tasks = ("create_orders", "append_day_two", "correct_day_one")
    if time_travel:
        tasks += ("snapshot_before_correction",)
    # Read now: the runner returns the newest XCom per task, and the next back end overwrites it.
    xcoms = {task: airflow_runner.xcom(EXAMPLE_DAG, task) for task in tasks}
    output = completed.stdout + completed.stderr
    return BackendRun(request.param, catalog, xcoms, output, sampler.command_lines)


def test_example_dag_history_seen_by_pyiceberg(backend_run):
    orders = backend_run.catalog.load_table("db.orders")
    history = [
        (s.summary.operation.value, s.summary.get("added-records"), s.summary.get("total-records"))
        for s in orders.snapshots()
    ]
    assert history == [("overwrite", "100", "100"), ("append", "80", "180"), ("overwrite", "90", "170")]
    assert [orders.scan(snapshot_id=s.snapshot_id).to_arrow().num_rows for s in orders.snapshots()] == [
        100,
        180,
        170,
    ]
    assert str(orders.spec().fields[0].transform) == "day"
    day_one = [r for r in orders.scan().to_arrow().to_pylist() if r["order_date"] == date(2024, 1, 1)]
    assert len(day_one) == 90 and {r["order_id"]: r["amount"] for r in day_one}[0] == Decimal("1.10")
    writes = [backend_run.xcoms[t] for t in ("create_orders", "append_day_two", "correct_day_one")]
    assert [w["snapshot_id"] for w in writes] == [s.snapshot_id for s in orders.snapshots()]


def test_runtime_travels_as_packages_by_default_and_as_a_local_jar_when_set(backend_run):
    """REST runs the default path (Maven coordinates through --packages); the others a local jar.

    Ivy resolves --packages through the cache setup warmed (``spark.jars.ivy``). Whether it also
    downloads is not asserted: Ivy's cache is not safe for resolutions running at once (the suite
    runs several spark-submits side by side), and one that reads another's half-written cache
    entry downloads again, as a busy worker would (docs/cluster.md).
    """
    submits = [line for line in backend_run.output.splitlines() if "Spark-Submit cmd:" in line]
    assert submits, backend_run.output[-3000:]
    runtime, runtime_jar = os.environ["ICEBERG_RUNTIME_COORDINATE"], os.environ["ICEBERG_RUNTIME_JAR"]
    if backend_run.name == "rest":
        packages = f"--packages {runtime},{os.environ['ICEBERG_AWS_BUNDLE_COORDINATE']}"
        assert all(packages in line and "--jars" not in line for line in submits), submits[0]
        assert f"found org.apache.iceberg#{runtime.split(':')[1]};" in backend_run.output
    else:
        assert all(f"--jars {runtime_jar}" in line and "--packages" not in line for line in submits)


def test_rest_tables_live_in_s3_and_no_secret_leaks(backend_run, request, airflow_runner):
    """REST on S3: the files are in the S3 bucket; the OAuth2 client secret (which SeaweedFS also
    uses as the S3 secret key) appears in no command line, log, rendered field or XCom."""
    if backend_run.name != "rest":
        pytest.skip("REST only")
    rest = request.getfixturevalue("rest_catalog")
    orders = backend_run.catalog.load_table("db.orders")
    assert orders.metadata_location.startswith(f"{rest.warehouse}/db/orders/metadata/")
    data_files = [path for path in s3_objects(rest, rest.bucket) if path.endswith(".parquet")]
    assert any(path.startswith(f"{rest.bucket}/db/orders/data/") for path in data_files)
    assert "spark.sql.catalog.rest.io-impl=org.apache.iceberg.aws.s3.S3FileIO" in backend_run.output
    spark_submits = [
        line for line in backend_run.command_lines if "deploy.SparkSubmit" in line and rest.uri in line
    ]
    assert spark_submits, "the sampler must have seen spark-submit's JVM"
    assert rest.secret_key not in backend_run.output
    assert not [line for line in backend_run.command_lines if rest.secret_key in line]
    assert not [line for line in spark_submits if "access-key-id" in line or "credential=" in line]
    # `airflow dags test` runs tasks in-process: the task log is the CLI output; files, if any, too.
    logs = [p.read_text(errors="replace") for p in (airflow_runner.home / "logs").rglob("*") if p.is_file()]
    assert "Committed snapshot" in backend_run.output, "the task logs must have been captured"
    assert not [log for log in logs if rest.secret_key in log]
    with sqlite3.connect(airflow_runner.home / "airflow.db") as db:
        stored = [
            str(row)
            for table in ("rendered_task_instance_fields", "xcom")
            for row in db.execute(f"SELECT * FROM {table}")
        ]
    assert stored and not [row for row in stored if rest.secret_key in row]


def test_time_travel_copy_equals_the_append_snapshot(backend_run):
    if backend_run.name != TIME_TRAVEL_BACKEND:
        pytest.skip(f"the time-travel read runs on {TIME_TRAVEL_BACKEND} only")
    orders = backend_run.catalog.load_table("db.orders")
    appended = orders.snapshots()[1].snapshot_id
    copy = backend_run.catalog.load_table("db.orders_before_correction")
    assert order_rows(copy) == order_rows(orders, appended)
    assert len(order_rows(copy)) == 180
    assert backend_run.xcoms["snapshot_before_correction"]["snapshot_id"] == appended


# --------------------------------------------------------------------------- the password travels


def test_wrong_postgres_password_fails_the_task_and_leaves_the_table_alone(
    airflow_runner, postgres_server, tmp_path
):
    """A wrong password must fail the task before anything is written.

    The PostgreSQL run of the example DAG (and the catalog-impl test) prove the right password
    gets through; this is the other half. The guarded table is made by pyiceberg, so the failed
    ``create_or_replace`` would visibly have replaced it, had it got through.
    """
    import pyarrow as pa

    warehouse = tmp_path / "warehouse"
    server = postgres_server
    reader = postgres_reader(server, warehouse, catalog_name="pg_guarded")
    reader.create_namespace_if_not_exists("db")
    rows = pa.table({"order_id": pa.array([1, 2, 3], pa.int64())})
    guarded = reader.create_table("db.orders", schema=rows.schema)
    guarded.append(rows)
    before = reader.load_table("db.orders").metadata_location
    files_before = sorted(warehouse.rglob("*"))

    wrong = postgres_connection(server, warehouse, catalog_name="pg_guarded", password="not-the-password")
    completed = run_airflow(
        airflow_runner,
        "tasks",
        "test",
        EXAMPLE_DAG,
        "create_orders",
        "2024-02-04",
        connections={"iceberg_catalog_default": wrong, "spark_default": spark_connection()},
    )
    output = completed.stdout + completed.stderr
    # `airflow tasks test` exits 0 whatever the task did; the task's own state is in its log.
    assert "Task failed with exception" in output and "new_state=failed" in output, output[-5000:]
    # Our one-line error names the table and the database it could not log in to; the driver's log
    # carries PostgreSQL's reason (the apache-spark provider's masking may print "password ******").
    failure = f"pg_guarded.db.orders: UncheckedSQLException: Failed to connect: {server.jdbc_uri}"
    assert f"IcebergJobError: {failure}" in output, output[-5000:]
    assert "PSQLException: FATAL: password" in output, output[-5000:]
    assert f'failed for user "{server.user}"' in output, output[-5000:]
    after = reader.load_table("db.orders")
    assert after.metadata_location == before
    assert sorted(warehouse.rglob("*")) == files_before
    assert after.scan().to_arrow().num_rows == 3


def rest_catalog_state(reader: Any) -> dict[str, str]:
    """Every table of a REST catalog with its current metadata file: what a commit would change."""
    return {
        ".".join((*namespace, name)): reader.load_table((*namespace, name)).metadata_location
        for namespace in reader.list_namespaces()
        for *_, name in reader.list_tables(namespace)
    }


def test_wrong_oauth2_secret_fails_the_spark_task_before_anything_is_written(airflow_runner, rest_catalog):
    """Spark presents the connection's OAuth2 client credentials, and the server enforces them.

    The REST run of the example DAG proves the right secret gets through (with the default
    --packages path); this runs the local-jar path with a wrong secret. Nothing in the catalog or
    in its S3 bucket may change: not a table, not a metadata file, not an object.
    """
    rest = rest_catalog
    reader = rest_reader(rest)
    tables_before, objects_before = rest_catalog_state(reader), s3_objects(rest, rest.bucket)
    wrong = rest_spark_connection(rest, packages=False, secret="not-the-client-secret")
    completed = run_airflow(
        airflow_runner,
        "tasks",
        "test",
        EXAMPLE_DAG,
        "create_orders",
        "2024-02-10",
        connections={"iceberg_catalog_default": wrong, "spark_default": spark_connection()},
    )
    output = completed.stdout + completed.stderr
    assert "Task failed with exception" in output and "new_state=failed" in output, output[-5000:]
    assert f"--jars {os.environ['ICEBERG_RUNTIME_JAR']},{os.environ['ICEBERG_AWS_BUNDLE_JAR']}" in output
    assert "NotAuthorizedException" in output, output[-5000:]
    assert "not-the-client-secret" not in output and rest.secret_key not in output
    assert rest_catalog_state(reader) == tables_before
    assert s3_objects(rest, rest.bucket) == objects_before


# --------------------------------------------------------------------------- S3A


def test_hadoop_catalog_on_s3a_gets_endpoint_path_style_and_keys_from_the_connection(
    airflow_runner, rest_catalog
):
    """A Hadoop catalog on ``s3a://`` (hadoop-aws) against the SeaweedFS S3 endpoint.

    Endpoint, path-style access and region come from ``hadoop_properties`` and travel on argv;
    the S3 keys are the connection's Login and Password and never appear in any command line.
    """
    from pyiceberg.table import StaticTable

    rest, bucket = rest_catalog, "s3a-lake"
    s3 = s3_filesystem(rest, allow_bucket_creation=True)
    s3.create_dir(bucket)
    with CommandLineSampler() as sampler:
        completed = succeeded(
            run_airflow(
                airflow_runner,
                "tasks",
                "test",
                EXAMPLE_DAG,
                "create_orders",
                "2024-02-11",
                connections={
                    "iceberg_catalog_default": s3a_connection(rest, bucket),
                    "spark_default": spark_connection(),
                },
            )
        )
    output = completed.stdout + completed.stderr
    prefix = "spark.sql.catalog.lake.hadoop.fs.s3a"
    assert f"{prefix}.endpoint={rest.s3_endpoint}" in output
    assert f"{prefix}.path.style.access=true" in output
    # Other Spark jobs may run on the machine; ours is the one that talks to this S3 endpoint.
    spark_submits = [line for line in sampler.matching("deploy.SparkSubmit") if rest.s3_endpoint in line]
    assert spark_submits and all("hadoop-aws-3.3.4.jar" in line for line in spark_submits)
    assert not [line for line in sampler.command_lines if rest.secret_key in line or "fs.s3a.secret" in line]
    assert not [line for line in spark_submits if "fs.s3a.access.key" in line]
    assert rest.secret_key not in output

    metadata = f"{bucket}/warehouse/db/orders/metadata"
    with s3.open_input_stream(f"{metadata}/version-hint.text") as hint:
        version = hint.read().decode().strip()
    orders = StaticTable.from_metadata(
        f"s3://{metadata}/v{version}.metadata.json",
        properties={
            "s3.endpoint": rest.s3_endpoint,
            "s3.access-key-id": rest.access_key,
            "s3.secret-access-key": rest.secret_key,
            "s3.region": rest.region,
        },
    )
    assert orders.location() == f"s3a://{bucket}/warehouse/db/orders"
    assert [s.summary.operation.value for s in orders.snapshots()] == ["overwrite"]
    assert orders.scan().to_arrow().num_rows == 100
    data = [path for path in s3_objects(rest, bucket) if path.endswith(".parquet")]
    assert data and all(path.startswith(f"{bucket}/warehouse/db/orders/data/order_date_") for path in data)


# --------------------------------------------------------------------------- Nessie


def test_nessie_writes_on_main_and_a_branch_ref_keeps_its_commits_off_main(
    airflow_runner, nessie_server, tmp_path
):
    """``catalog_type: nessie``: create on ``main``, then append through a connection whose ``ref``
    is branch ``etl``. Nessie's own API says which metadata file each branch points at, and
    pyiceberg reads those files: main still has the create only, etl has create and append.
    """
    from pyiceberg.table import StaticTable

    warehouse = tmp_path / "warehouse"

    def task(task_id: str, day: str, ref: str | None = None) -> str:
        connection = nessie_connection(nessie_server, warehouse, ref=ref)
        completed = succeeded(
            run_airflow(
                airflow_runner,
                "tasks",
                "test",
                EXAMPLE_DAG,
                task_id,
                day,
                connections={"iceberg_catalog_default": connection, "spark_default": spark_connection()},
            )
        )
        return completed.stdout + completed.stderr

    created = task("create_orders", "2024-02-12")
    assert f"spark.sql.catalog.nessie.uri={nessie_server.api_uri}" in created
    nessie_server.create_branch("etl")
    appended = task("append_day_two", "2024-02-13", ref="etl")
    assert "spark.sql.catalog.nessie.ref=etl" in appended

    main = StaticTable.from_metadata(nessie_server.metadata_location("main", "db.orders"))
    etl = StaticTable.from_metadata(nessie_server.metadata_location("etl", "db.orders"))
    assert [s.summary.operation.value for s in main.snapshots()] == ["overwrite"]
    assert [s.summary.operation.value for s in etl.snapshots()] == ["overwrite", "append"]
    assert etl.snapshots()[0].snapshot_id == main.snapshots()[0].snapshot_id
    assert (main.scan().to_arrow().num_rows, etl.scan().to_arrow().num_rows) == (100, 180)
    assert urlparse(main.metadata_location).path.startswith(f"{warehouse}/db/orders")


# --------------------------------------------------------------------------- custom catalog-impl


def test_custom_catalog_impl_jdbc_catalog_end_to_end(airflow_runner, postgres_server, tmp_path):
    """``catalog_impl`` with no ``catalog_type``: Login/Password reach ``jdbc.user``/``jdbc.password``."""
    warehouse = tmp_path / "warehouse"
    completed = succeeded(
        run_airflow(
            airflow_runner,
            "tasks",
            "test",
            EXAMPLE_DAG,
            "create_orders",
            "2024-02-05",
            connections={
                "iceberg_catalog_default": custom_jdbc_connection(postgres_server, warehouse),
                "spark_default": spark_connection(),
            },
        )
    )
    output = completed.stdout + completed.stderr
    assert f"spark.sql.catalog.custom_pg.catalog-impl={JDBC_CATALOG_IMPL}" in output
    assert "spark.sql.catalog.custom_pg.type=" not in output
    assert f"spark.sql.catalog.custom_pg.jdbc.user={postgres_server.user}" in output
    orders = postgres_reader(postgres_server, warehouse, catalog_name="custom_pg").load_table("db.orders")
    assert [s.summary.operation.value for s in orders.snapshots()] == ["overwrite"]
    assert orders.scan().to_arrow().num_rows == 100
    assert urlparse(orders.metadata_location).path.startswith(f"{warehouse}/db/orders/metadata/")


# --------------------------------------------------------------------------- session catalog

PLAIN_SPARK_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pyspark.sql import SparkSession

    action, result_file = sys.argv[1], sys.argv[2]
    spark = SparkSession.builder.enableHiveSupport().getOrCreate()
    if action == "create":
        spark.sql("CREATE DATABASE IF NOT EXISTS db")
        spark.sql("DROP TABLE IF EXISTS db.plain")
        spark.sql(
            "CREATE TABLE db.plain USING parquet AS "
            "SELECT id, CONCAT('item-', CAST(id AS STRING)) AS name FROM range(25)"
        )
    rows = [list(r) for r in spark.sql("SELECT id, name FROM db.plain ORDER BY id").collect()]
    details = {r.col_name: r.data_type for r in spark.sql("DESCRIBE TABLE EXTENDED db.plain").collect()}
    tables = sorted(r.tableName for r in spark.sql("SHOW TABLES IN db").collect())
    with open(result_file, "w") as handle:
        json.dump({"rows": rows, "provider": details.get("Provider"), "tables": tables}, handle)
    spark.stop()
    """
)


def plain_spark(metastore: Any, action: str, workdir: Path) -> dict[str, Any]:
    """Run Spark with Hive support and no Iceberg at all, as a non-Iceberg user of the metastore would."""
    script, result = workdir / "plain_table.py", workdir / f"{action}.json"
    script.write_text(PLAIN_SPARK_SCRIPT)
    conf = {
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.hive.metastore.uris": metastore.uri,
        "spark.sql.warehouse.dir": metastore.warehouse,
    }
    completed = subprocess.run(
        [
            str(SPARK_SUBMIT),
            "--master",
            "local[1]",
            *(arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")),
            str(script),
            action,
            str(result),
        ],
        cwd=workdir,  # any stray derby.log stays in the test's folder
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-5000:]
    return json.loads(result.read_text())


def metastore_table_parameters(metastore: Any, database: str, table: str) -> dict[str, str]:
    """A table's parameters straight from the metastore's thrift API (no Spark, no Iceberg)."""
    from hive_metastore.ThriftHiveMetastore import Client
    from thrift.protocol import TBinaryProtocol
    from thrift.transport import TSocket, TTransport

    sock = TSocket.TSocket(metastore.host, metastore.port)
    sock.setTimeout(10_000)
    transport = TTransport.TBufferedTransport(sock)
    transport.open()
    try:
        return dict(Client(TBinaryProtocol.TBinaryProtocol(transport)).get_table(database, table).parameters)
    finally:
        transport.close()


def test_session_catalog_serves_plain_and_iceberg_tables_with_two_part_names(
    airflow_runner, hive_metastore, tmp_path
):
    from pyiceberg.exceptions import NoSuchIcebergTableError, NoSuchPropertyException

    created = plain_spark(hive_metastore, "create", tmp_path)
    assert created["provider"] == "parquet" and len(created["rows"]) == 25

    completed = succeeded(
        run_airflow(
            airflow_runner,
            "tasks",
            "test",
            "iceberg_session_catalog",
            "copy_plain",
            "2024-02-06",
            test_dags=True,
            connections={
                "iceberg_session": session_catalog_connection(hive_metastore),
                "spark_default": spark_connection(),
            },
        )
    )
    assert "to spark_catalog.db.plain_iceberg (overwrite): 25 records added" in completed.stdout

    # The metastore itself: one Iceberg table, and the plain table left as it was.
    assert metastore_table_parameters(hive_metastore, "db", "plain_iceberg")["table_type"] == "ICEBERG"
    assert "table_type" not in metastore_table_parameters(hive_metastore, "db", "plain")
    # pyiceberg: the copy holds the plain table's rows; the plain table is not Iceberg.
    reader = hive_reader(hive_metastore)
    copy = reader.load_table("db.plain_iceberg")
    assert [list(r) for r in sorted_rows(copy.scan().to_arrow(), "id")] == created["rows"]
    with pytest.raises((NoSuchIcebergTableError, NoSuchPropertyException), match=r"db\.plain"):
        reader.load_table("db.plain")
    # Plain Spark, without the Iceberg runtime, still reads the plain table afterwards.
    after = plain_spark(hive_metastore, "read", tmp_path)
    assert after["rows"] == created["rows"] and after["provider"] == "parquet"
    assert {"plain", "plain_iceberg"} <= set(after["tables"])


# --------------------------------------------------------------------------- two catalogs, hadoop.*

#: ``fs.file.impl.disable.cache`` is what makes the umask observable: Spark has created the
#: process-wide cached local FileSystem before any catalog loads, and a cached FileSystem keeps
#: the configuration it was created with; per-catalog ``hadoop.*`` settings only reach a new one.
RESTRICTED = {"fs.permissions.umask-mode": "077", "fs.file.impl.disable.cache": "true"}


def file_modes(table_dir: Path) -> set[int]:
    return {stat.S_IMODE(p.stat().st_mode) for p in table_dir.rglob("*") if p.is_file()}


def test_read_from_hive_write_to_hadoop_with_per_catalog_hadoop_properties(
    airflow_runner, hive_metastore, tmp_path
):
    """One job loads the Hive source catalog and a Hadoop target catalog (``extra_iceberg_conn_ids``).

    The two targets differ only in ``hadoop_properties``: the restricted one's files are created
    with umask 077 (0600), the control's with Hadoop's default umask 022 (0644). The target's name
    (``emea.`sales-eu`.Orders_Copié``) is one real catalogs allow: a nested namespace, a dash,
    upper case, a non-ASCII letter; it lands under exactly those directories, and its asset URI
    percent-encodes it.
    """
    import pyarrow as pa

    source_rows = pa.table(
        {
            "order_id": pa.array(range(30), pa.int64()),
            "amount": pa.array([Decimal(f"{i}.25") for i in range(30)], pa.decimal128(10, 2)),
            "order_date": pa.array([date(2024, 3, 1 + i % 3) for i in range(30)], pa.date32()),
        }
    )
    reader = hive_reader(hive_metastore)
    reader.create_namespace_if_not_exists("xsrc")
    reader.create_table("xsrc.orders", schema=source_rows.schema).append(source_rows)

    warehouses = {name: tmp_path / name for name in ("restricted", "shared")}
    succeeded(
        run_airflow(
            airflow_runner,
            "dags",
            "test",
            "iceberg_cross_catalog",
            "2024-02-07",
            test_dags=True,
            connections={
                "iceberg_hive": hive_connection(hive_metastore),
                "iceberg_restricted": hadoop_connection(warehouses["restricted"], "restricted", RESTRICTED),
                "iceberg_shared": hadoop_connection(warehouses["shared"], "shared"),
                "spark_default": spark_connection(),
            },
        )
    )
    expected = sorted_rows(reader.load_table("xsrc.orders").scan().to_arrow(), "order_id")
    target = ("emea", "sales-eu", "Orders_Copié")
    for name, warehouse in warehouses.items():
        copy = load_table(warehouse.joinpath(*target[:-1]), target[-1])
        assert sorted_rows(copy.scan().to_arrow(), "order_id") == expected, name
    restricted = file_modes(warehouses["restricted"].joinpath(*target))
    shared = file_modes(warehouses["shared"].joinpath(*target))
    assert restricted == {0o600}, sorted(oct(m) for m in restricted)
    assert shared == {0o644}, sorted(oct(m) for m in shared)
    assert list(warehouses["restricted"].joinpath(*target, "data").rglob("*.parquet"))
    events = airflow_runner.xcom("iceberg_cross_catalog", "copy_to_shared")
    assert events["table"] == "shared.emea.`sales-eu`.Orders_Copié"  # as written, the catalog put in front
    with sqlite3.connect(airflow_runner.home / "airflow.db") as db:
        uris = {uri for (uri,) in db.execute("SELECT uri FROM asset WHERE uri LIKE 'iceberg://hadoop/emea/%'")}
    assert {uri.split("?")[0] for uri in uris} == {"iceberg://hadoop/emea/sales-eu/Orders_Copi%C3%A9"}

"""The daily-orders example DAG and the README quickstart, end to end: real Airflow, real
spark-submit, the real Iceberg jar.

Every result is checked by pyiceberg reading the table's own metadata files, not by the job.
``make test`` runs this module on Spark 3.5 and again with ``SPARK_LINE=4.0`` (scripts/local_env.sh
then puts Spark 4.0's spark-submit, SPARK_HOME and the 4.0_2.13 runtime jar in place, as on a
worker with Spark 4).
"""

from __future__ import annotations

import os
from datetime import date
from decimal import Decimal

import pytest
from pyiceberg.table import StaticTable

from scripts.show_table import load_table
from tests.docs_snippets import documented_keys, listed_keys, snippet
from tests.heavy_modules import KUBERNETES, PYSPARK, SPARK_SUBMIT, loaded
from tests.integration.airflow_runner import (
    hadoop_catalog_connection,
    recorded_imports,
    recording_imports,
    spark_connection,
)

DAG_ID = "iceberg_daily_orders"


def rows(table: StaticTable, snapshot_id: int | None = None) -> list[tuple]:
    arrow = (
        table.scan(snapshot_id=snapshot_id)
        .to_arrow()
        .sort_by([("order_date", "ascending"), ("order_id", "ascending")])
    )
    return [tuple(r.values()) for r in arrow.to_pylist()]


@pytest.fixture(scope="module")
def daily_orders_run(airflow_runner, tmp_path_factory):
    warehouse = tmp_path_factory.mktemp("warehouse")
    completed = airflow_runner.airflow(
        "dags",
        "test",
        DAG_ID,
        "2024-01-02",
        connections={
            "iceberg_catalog_default": hadoop_catalog_connection(warehouse),
            "spark_default": spark_connection(),
        },
        env=recording_imports(_imports_file(warehouse)),
    )
    assert completed.returncode == 0, completed.stdout[-5000:] + completed.stderr[-5000:]
    return warehouse, completed


def _imports_file(warehouse):
    return warehouse.with_name(f"{warehouse.name}-imports.jsonl")


def test_a_dag_file_loads_nothing_heavy_and_a_spark_submit_task_only_what_it_runs(daily_orders_run):
    """In the task process (tests/integration/plugins/imported_modules.py): the DAG file, loaded before
    the first task starts, imported none of tests/heavy_modules.py's HEAVY; spark-submit's tasks
    then imported the provider's spark-submit modules (and, through its hook, Kubernetes), never
    pyspark: the PySpark job runs in spark-submit's own Python."""
    warehouse, _ = daily_orders_run
    records = recorded_imports(_imports_file(warehouse))
    assert [r["when"] for r in records[:2]] == ["started", "succeeded"], records
    assert records[0]["heavy"] == [], "the DAG file imported these before its first task ran"
    ended = records[-1]["heavy"]
    assert set(SPARK_SUBMIT) | {"airflow.providers.cncf.kubernetes.kube_client"} <= set(ended), records
    assert loaded(PYSPARK, ended) == [] and set(KUBERNETES) & set(ended), records


def test_history_is_create_append_overwrite(daily_orders_run):
    warehouse, _ = daily_orders_run
    orders = load_table(warehouse, "db.orders")
    history = [
        (
            s.summary.operation.value,
            s.summary.get("added-records"),
            s.summary.get("deleted-records"),
            s.summary.get("total-records"),
        )
        for s in orders.snapshots()
    ]
    assert history == [
        ("overwrite", "100", None, "100"),
        ("append", "80", None, "180"),
        ("overwrite", "90", "100", "170"),
    ]
    assert str(orders.spec().fields[0].transform) == "day"


def test_every_commit_was_made_by_the_workers_spark_and_runtime(daily_orders_run):
    warehouse, _ = daily_orders_run
    spark_line = os.environ.get("SPARK_LINE", "3.5")
    runtime = os.path.basename(os.environ["ICEBERG_RUNTIME_JAR"])  # iceberg-spark-runtime-4.0_2.13-1.10.2.jar
    assert runtime.startswith(f"iceberg-spark-runtime-{spark_line}_")
    iceberg_version = runtime.rsplit("-", 1)[1].removesuffix(".jar")
    for name in ("db.orders", "db.orders_before_correction"):
        for snapshot in load_table(warehouse, name).snapshots():
            assert snapshot.summary["engine-name"] == "spark"
            assert snapshot.summary["engine-version"].startswith(f"{spark_line}.")
            assert snapshot.summary["iceberg-version"].startswith(f"Apache Iceberg {iceberg_version} ")


def test_rows_after_each_step(daily_orders_run):
    warehouse, _ = daily_orders_run
    orders = load_table(warehouse, "db.orders")
    created, appended, corrected = (s.snapshot_id for s in orders.snapshots())
    first = orders.scan(snapshot_id=created).to_arrow()
    assert first.num_rows == 100 and set(first["order_date"].to_pylist()) == {date(2024, 1, 1)}
    second = orders.scan(snapshot_id=appended).to_arrow()
    assert second.num_rows == 180
    current = orders.scan().to_arrow()
    assert current.num_rows == 170
    day_one = [r for r in current.to_pylist() if r["order_date"] == date(2024, 1, 1)]
    assert len(day_one) == 90
    # the correction re-priced day one by 10%: order 0 was 1.00 and is now 1.10
    assert {r["order_id"]: r["amount"] for r in day_one}[0] == Decimal("1.10")
    assert orders.current_snapshot().snapshot_id == corrected


def test_time_travel_copy_equals_the_snapshot_it_read(daily_orders_run, airflow_runner):
    warehouse, _ = daily_orders_run
    orders = load_table(warehouse, "db.orders")
    appended = orders.snapshots()[1].snapshot_id
    copy = load_table(warehouse, "db.orders_before_correction")
    assert rows(copy) == rows(orders, appended)
    read_result = airflow_runner.xcom(DAG_ID, "snapshot_before_correction")
    assert read_result["snapshot_id"] == appended
    assert read_result["row_count"] == 180
    assert len(read_result["preview"]) == 3


def test_write_xcoms_report_the_committed_snapshots(daily_orders_run, airflow_runner):
    warehouse, _ = daily_orders_run
    snapshots = load_table(warehouse, "db.orders").snapshots()
    results = [
        airflow_runner.xcom(DAG_ID, task) for task in ("create_orders", "append_day_two", "correct_day_one")
    ]
    assert [r["snapshot_id"] for r in results] == [s.snapshot_id for s in snapshots]
    assert [(r["operation"], r["added_records"], r["total_records"]) for r in results] == [
        ("overwrite", 100, 100),
        ("append", 80, 180),
        ("overwrite", 90, 170),
    ]
    # each commit carries the Airflow identity of the task that made it
    assert snapshots[1].summary["airflow.task-id"] == "append_day_two"
    assert snapshots[1].summary["airflow.dag-id"] == DAG_ID


def test_the_spark_application_carries_the_operators_name(daily_orders_run, airflow_runner):
    """spark-submit's --name (the templated ``name``) reaches Spark: the job does not override it."""
    _, completed = daily_orders_run
    logs = [p.read_text(errors="replace") for p in (airflow_runner.home / "logs").rglob("*") if p.is_file()]
    text = "\n".join([completed.stdout, completed.stderr, *logs])
    assert "(airflow-iceberg-iceberg_daily_orders.create_orders)" in text
    assert "Spark application local-" in text


def test_client_deploy_mode_returns_the_same_result(airflow_runner, tmp_path):
    completed = airflow_runner.airflow(
        "tasks",
        "test",
        DAG_ID,
        "create_orders",
        "2024-01-02",
        connections={
            "iceberg_catalog_default": hadoop_catalog_connection(tmp_path),
            "spark_default": spark_connection(**{"deploy-mode": "client"}),
        },
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output[-5000:]
    assert "--deploy-mode client" in output
    snapshot = load_table(tmp_path, "db.orders").current_snapshot()
    assert (
        f"Committed snapshot {snapshot.snapshot_id} to demo.db.orders (overwrite): 100 records added"
        in output
    )


def test_documented_read_xcom_keys(airflow_runner, daily_orders_run):
    """docs/operators.md lists a read's XCom keys; a read with a sink and a preview has them all."""
    always = listed_keys("docs/operators.md", "The XCom: `{")
    assert always == {"status", "table", "snapshot_id", "selector", "row_count"}
    read_result = airflow_runner.xcom(DAG_ID, "snapshot_before_correction")
    assert set(read_result) == always | {"sink", "preview"}


# ---------------------------------------------------------------------- the README quickstart

QUICKSTART_ORDERS = [(1, date(2024, 1, 2), Decimal("10.00")), (2, date(2024, 1, 2), Decimal("20.50"))]
QUICKSTART_LATE = [
    '{"order_id": 3, "order_date": "2024-01-02", "amount": 7.25}',
    '{"order_id": 4, "order_date": "2024-01-02", "amount": 1}',
]


def readme_connections(localize) -> dict[str, str]:
    """The ``AIRFLOW_CONN_*`` variables the README's quickstart exports, with local paths."""
    import shlex

    words = shlex.split(snippet("README.md", "export AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT").text)
    pairs = [word.split("=", 1) for word in words if word.startswith("AIRFLOW_CONN_")]
    return {name: localize(value) for name, value in pairs}


@pytest.fixture(scope="module")
def readme_quickstart(airflow_runner, tmp_path_factory):
    """The README's connections and DAG as a user copies them, paths made local; day 2024-01-02."""
    if os.environ.get("SPARK_LINE", "3.5") != "3.5":
        pytest.skip("the README's connection names no spark_version, so it is for Spark 3.5, the default")
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("quickstart")
    landing, warehouse, dags = root / "landing", root / "warehouse", root / "dags"

    def localize(text: str) -> str:
        return text.replace("/landing/", f"{landing}/").replace("/data/warehouse", str(warehouse))

    (landing / "orders" / "2024-01-02").mkdir(parents=True)
    columns = list(zip(*QUICKSTART_ORDERS, strict=True))
    pq.write_table(
        pa.table(
            {
                "order_id": pa.array(columns[0], pa.int32()),
                "order_date": pa.array(columns[1], pa.date32()),
                "amount": pa.array(columns[2], pa.decimal128(10, 2)),
            }
        ),
        landing / "orders" / "2024-01-02" / "part-0.parquet",
    )
    (landing / "late" / "2024-01-02").mkdir(parents=True)
    (landing / "late" / "2024-01-02" / "part-0.json").write_text("\n".join(QUICKSTART_LATE) + "\n")
    dags.mkdir()
    (dags / "quickstart.py").write_text(localize(snippet("README.md", "IcebergAppendOperator(").text))
    completed = airflow_runner.airflow(
        "dags",
        "test",
        "orders",
        "2024-01-02",
        env={**readme_connections(localize), "AIRFLOW__CORE__DAGS_FOLDER": str(dags)},
    )
    assert completed.returncode == 0, completed.stdout[-5000:] + completed.stderr[-5000:]
    return warehouse


def test_readme_quickstart_runs_as_written(readme_quickstart):
    orders = load_table(readme_quickstart, "db.orders")
    assert [s.summary.operation.value for s in orders.snapshots()] == ["overwrite", "append"]
    assert str(orders.spec().fields[0].transform) == "day"
    late = [(3, date(2024, 1, 2), Decimal("7.25")), (4, date(2024, 1, 2), Decimal("1.00"))]
    assert rows(orders) == [*QUICKSTART_ORDERS, *late]


def test_documented_xcom_keys(readme_quickstart, airflow_runner):
    """The README's XCom example shows keys the quickstart's append really returns, and its status."""
    shown = documented_keys(snippet("README.md", '"status": "success"'))
    result = airflow_runner.xcom("orders", "append")
    assert shown <= set(result), shown - set(result)
    assert (result["status"], result["mode"], result["operation"]) == ("success", "append", "append")

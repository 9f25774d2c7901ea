"""Scale-out: the example DAG on a real Spark standalone cluster (a master and two workers).

The Spark connection points at ``spark://127.0.0.1:<port>`` with deploy mode ``client``: the
driver (and so the job's result file and the catalog secrets in its environment) stays on the
Airflow worker, while the executors run in the workers' JVMs. The Iceberg runtime jar reaches
them through ``--jars`` (the connection's ``runtime_jar``), served by the driver.

Python applications cannot use ``cluster`` deploy mode on a standalone master (spark-submit
refuses), so client mode is the scale-out mode to test here.
"""

from __future__ import annotations

import re
import shutil

import pytest

from scripts.show_table import load_table
from tests.integration.airflow_runner import hadoop_catalog_connection
from tests.integration.spark_cluster import spark_conf_dir, standalone_cluster, standalone_connection

DAG_ID = "iceberg_daily_orders"
SPARK_REFUSES_PYTHON_CLUSTER_MODE = (
    "Cluster deploy mode is currently not supported for python applications on standalone clusters"
)
TASKS = ("create_orders", "append_day_two", "correct_day_one", "snapshot_before_correction")
@pytest.fixture(scope="module")
def cluster_run(airflow_runner, tmp_path_factory):
    if not shutil.which("spark-class"):
        pytest.fail("spark-class must be on PATH: run through `make test`")
    root = tmp_path_factory.mktemp("standalone")
    warehouse = root / "warehouse"
    with standalone_cluster(root / "cluster", workers=2, cores=1, memory="1g") as cluster:
        completed = airflow_runner.airflow(
            "dags",
            "test",
            DAG_ID,
            "2024-01-02",
            connections={
                "iceberg_catalog_default": hadoop_catalog_connection(warehouse),
                "spark_default": standalone_connection(cluster),
            },
            env={"SPARK_CONF_DIR": str(spark_conf_dir(root / "spark-conf"))},
        )
        output = completed.stdout + completed.stderr
        assert completed.returncode == 0, output[-8000:]
        yield cluster, warehouse, output
    # leaving the block stopped every daemon and checked that their ports are free again
    assert not any(
        process.group_alive() for process in (cluster.master, *(w.process for w in cluster.workers))
    )


def test_tasks_were_submitted_to_the_standalone_master_in_client_mode(cluster_run):
    cluster, _, output = cluster_run
    submits = [line for line in output.splitlines() if "Spark-Submit cmd:" in line]
    assert len(submits) == len(TASKS)
    for line in submits:
        assert f"--master {cluster.master_url}" in line
        assert "--deploy-mode client" in line
        assert "--jars " in line and "iceberg-spark-runtime" in line


def test_executors_ran_on_both_workers(cluster_run):
    cluster, _, _ = cluster_run
    apps_per_worker = [{p.name for p in worker.app_dirs()} for worker in cluster.workers]
    # one application per task; each got an executor on each worker
    assert all(len(apps) == len(TASKS) for apps in apps_per_worker), apps_per_worker
    assert apps_per_worker[0] == apps_per_worker[1]
    for worker in cluster.workers:
        ran = [
            log for log in worker.executor_logs() if re.search(r"Running task \S+ in stage", log.read_text())
        ]
        assert ran, f"no executor on {worker.work_dir} ran a task"


def test_table_history_and_rows_match_local_runs(cluster_run):
    _, warehouse, _ = cluster_run
    orders = load_table(warehouse, "db.orders")
    history = [(s.summary.operation.value, s.summary.get("total-records")) for s in orders.snapshots()]
    assert history == [("overwrite", "100"), ("append", "180"), ("overwrite", "170")]
    assert orders.scan().to_arrow().num_rows == 170
    appended = orders.snapshots()[1].snapshot_id
    copy = load_table(warehouse, "db.orders_before_correction")
    key = [("order_date", "ascending"), ("order_id", "ascending")]
    assert (
        copy.scan().to_arrow().sort_by(key).to_pylist()
        == orders.scan(snapshot_id=appended).to_arrow().sort_by(key).to_pylist()
    )


def test_cluster_deploy_mode_is_refused_for_python_applications(cluster_run, airflow_runner, tmp_path):
    """Documents Spark's limit (see README): on standalone, Python drivers must run in client mode."""
    cluster, _, _ = cluster_run
    completed = airflow_runner.airflow(
        "tasks",
        "test",
        DAG_ID,
        "create_orders",
        "2024-01-02",
        connections={
            "iceberg_catalog_default": hadoop_catalog_connection(tmp_path),
            "spark_default": standalone_connection(cluster, deploy_mode="cluster"),
        },
    )
    output = completed.stdout + completed.stderr
    # `airflow tasks test` exits 0 even when the task fails; the task's final state says it
    assert "new_state=failed" in output and "new_state=success" not in output, output[-5000:]
    assert SPARK_REFUSES_PYTHON_CLUSTER_MODE in output
    assert not (tmp_path / "db" / "orders").exists()


def test_every_application_finished_on_the_master(cluster_run):
    cluster, _, _ = cluster_run
    state = cluster.state()
    assert state["activeapps"] == []
    assert len(state["completedapps"]) == len(TASKS)
    assert {app["state"] for app in state["completedapps"]} == {"FINISHED"}

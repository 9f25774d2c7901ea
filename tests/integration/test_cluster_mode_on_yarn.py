"""YARN cluster deploy mode on a real YARN cluster: results from the catalog, and a killed worker.

A ResourceManager and a NodeManager run on loopback (:class:`tests.servers.yarn.YarnCluster`).
The Spark connection is ``yarn`` with ``deploy-mode: cluster`` and the ResourceManager's web
address, so every task's driver runs in a YARN container, and the apache-spark provider's
``durable`` execution (Airflow 3.3's default) tracks it through the ResourceManager's REST API.
Two stories, one YARN cluster:

* **The example DAG** (``dags/iceberg_daily_orders.py``, unchanged) under ``airflow dags test``:
  create, append, overwrite a partition, and copy a past snapshot aside. No result file comes
  back from the cluster; every XCom is the commit read back from the catalog, which pyiceberg
  (the independent reader) must agree with, and every commit is an asset event.
* **A worker killed mid-job.** An append's Airflow task is SIGKILLed (the whole process group:
  the worker dies) while its driver runs on YARN. The retry of the same task instance must
  reconnect to that application, wait for it, and report its commit: one application, one
  commit, never two.
* **A task stopped mid-job** (marked failed, cleared, timed out): SIGTERM, and five seconds later
  SIGKILL, as Airflow's supervisor does. The task's ``on_kill`` must kill its application, and
  the application's staging directory must not keep the catalog's secrets file (Spark deletes it
  only for an application that ends by itself). The table stays as it was.

The catalog connection of the last two carries a sentinel secret, so the secrets file travels
with every one of their applications.

(The file's name sorts it among the first integration modules: ``--dist loadfile`` hands files
out in that order, and this one's several minutes of YARN applications should not be the tail.)
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
import urllib.parse
from pathlib import Path

import pytest

from scripts.show_table import load_table
from tests.integration.airflow_runner import AirflowRunner, hadoop_catalog_connection
from tests.integration.task_processes import (
    run_task,
    run_task_to_end,
    task_succeeded,
    trigger_dag_run,
    wait_until,
)
from tests.servers.fixtures import spark_home
from tests.servers.yarn import YarnCluster

pytestmark = pytest.mark.integration

DAG_ID = "iceberg_daily_orders"
TASKS = ("create_orders", "append_day_two", "correct_day_one", "snapshot_before_correction")
COMMIT_ID = "airflow-iceberg.commit-id"
KILL_DAG, KILL_RUN, STOP_RUN = "robust_retry", "yarn_worker_killed", "yarn_task_stopped"
SENTINEL = "SENTINEL-yarn-staging-secret"
#: Airflow's supervisor sends SIGKILL this long after the SIGTERM that runs the task's on_kill.
SIGKILL_AFTER_SIGTERM_SECONDS = 5
#: A cluster-mode application takes about a minute here (two containers to start); bounded waits.
APPLICATION_SECONDS = 420


def yarn_connection(yarn: YarnCluster) -> dict:
    return {
        "conn_type": "spark",
        "host": "yarn",
        "extra": {"deploy-mode": "cluster", "yarn_resourcemanager_webapp_address": yarn.rm_webapp_address},
    }


def yarn_spark_conf_dir(yarn: YarnCluster, target: Path) -> Path:
    """The checkout's loopback defaults, plus what this YARN cluster needs (``spark-defaults.conf``)."""
    target.mkdir(parents=True, exist_ok=True)
    base = Path(os.environ["SPARK_CONF_DIR"]) / "spark-defaults.conf"
    lines = [base.read_text()] if base.exists() else []
    python = Path(os.environ["PYSPARK_PYTHON"])
    lines += [f"{key} {value}\n" for key, value in yarn.spark_conf(spark_home(), python).items()]
    (target / "spark-defaults.conf").write_text("".join(lines))
    return target


def asset_events(runner: AirflowRunner, table: str, warehouse: Path) -> list[dict]:
    """The ``extra`` of every asset event of a Hadoop catalog table's ``iceberg://`` asset, oldest first."""
    with sqlite3.connect(runner.home / "airflow.db") as db:
        rows = db.execute(
            "SELECT asset.uri, asset_event.extra FROM asset_event "
            "JOIN asset ON asset.id = asset_event.asset_id ORDER BY asset_event.id"
        ).fetchall()
    events = []
    for uri, extra in rows:
        parts = urllib.parse.urlsplit(uri)
        query = urllib.parse.parse_qs(parts.query)
        if (parts.scheme, parts.path) == ("iceberg", "/" + table.replace(".", "/")) and query.get(
            "warehouse"
        ) == [f"file://{warehouse}"]:
            events.append(json.loads(extra) if isinstance(extra, str) else extra)
    return events


@pytest.fixture(scope="module")
def yarn_runner(yarn_cluster, tmp_path_factory) -> AirflowRunner:
    """An Airflow of its own, its spark-submit pointed at the YARN cluster.

    Not the session's: its database holds what earlier test files left, such as the run of
    ``robust_retry`` on 2024-01-02 that test_retries_and_kills.py's killed ``tasks test`` leaves,
    which this file's trigger of the same DAG and date would collide with.
    """
    runner = AirflowRunner.create(tmp_path_factory.mktemp("yarn-airflow-home"))
    conf_dir = yarn_spark_conf_dir(yarn_cluster, tmp_path_factory.mktemp("yarn-spark-conf"))
    runner.base_env.update({**yarn_cluster.spark_env(), "SPARK_CONF_DIR": str(conf_dir)})
    return runner


@pytest.fixture(scope="module")
def yarn_runs(yarn_runner, yarn_cluster, tmp_path_factory):
    """Both stories on one YARN cluster: the example DAG, then the killed worker and its retry."""
    airflow_runner = yarn_runner
    root = tmp_path_factory.mktemp("yarn-cluster-mode")
    apps_before = {app["id"] for app in yarn_cluster.apps()}

    story_warehouse = root / "story"
    connections = {
        "iceberg_catalog_default": hadoop_catalog_connection(story_warehouse),
        "spark_default": yarn_connection(yarn_cluster),
    }
    story = airflow_runner.airflow("dags", "test", DAG_ID, "2024-01-02", connections=connections)
    story_output = story.stdout + story.stderr
    story_apps = [app for app in yarn_cluster.apps() if app["id"] not in apps_before]
    assert story.returncode == 0 and "new_state=failed" not in story_output, story_output[-8000:]

    warehouse, logs = root / "kill", root / "kill-logs"
    logs.mkdir()
    catalog = hadoop_catalog_connection(warehouse)
    catalog["extra"]["secret_properties"] = {"s3.secret-access-key": SENTINEL}
    connections = {"iceberg_catalog_default": catalog, "spark_default": yarn_connection(yarn_cluster)}
    kill = _kill_the_worker_mid_job(airflow_runner, yarn_cluster, warehouse, logs, connections)
    stop = _stop_the_task_mid_job(airflow_runner, yarn_cluster, warehouse, logs, connections)
    return {
        "story": (story_warehouse, story_output, story_apps),
        "kill": kill,
        "stop": stop,
    }


def _kill_the_worker_mid_job(
    airflow_runner: AirflowRunner, yarn: YarnCluster, warehouse: Path, logs: Path, connections: dict
) -> dict:
    # The table, from a run of its own (which also registers the DAG); then the run whose append
    # is killed, so that its every try is the same task instance (same commit id).
    code, output = run_task_to_end(airflow_runner, logs, KILL_DAG, "create_orders", "2024-01-01", connections)
    assert task_succeeded(code, output), output[-6000:]
    trigger_dag_run(airflow_runner, KILL_DAG, KILL_RUN, "2024-01-02")
    before = {app["id"] for app in yarn.apps()}

    def running_application() -> dict | None:
        new = [app for app in yarn.apps() if app["id"] not in before]
        return next((app for app in new if app["state"] == "RUNNING"), None)

    with run_task(airflow_runner, logs, KILL_DAG, "append_day_two", KILL_RUN, connections) as first:
        wait_until(running_application, APPLICATION_SECONDS, "the append's application", while_running=first)
        killed_app = running_application()
        first.signal_group(signal.SIGKILL)  # the worker dies; its driver keeps running on YARN
        assert first.wait(30) == -signal.SIGKILL
        killed_output = first.output()
    snapshots_when_killed = len(load_table(warehouse, "db.orders").snapshots())
    state_when_killed = yarn.app(killed_app["id"])["state"]

    code, retry_output = run_task_to_end(
        airflow_runner, logs, KILL_DAG, "append_day_two", KILL_RUN, connections
    )
    assert task_succeeded(code, retry_output), retry_output[-6000:]
    return {
        "warehouse": warehouse,
        "killed_app": killed_app,
        "state_when_killed": state_when_killed,
        "snapshots_when_killed": snapshots_when_killed,
        "killed_output": killed_output,
        "retry_output": retry_output,
        "append_apps": [app for app in yarn.apps() if app["id"] not in before],
        "retry_xcom": run_xcom(airflow_runner, KILL_DAG, KILL_RUN, "append_day_two"),
        "append_events": [
            event
            for event in asset_events(airflow_runner, "db.orders", warehouse)
            if ":append_day_two:" in event["commit_id"]
        ],
    }


def _stop_the_task_mid_job(
    airflow_runner: AirflowRunner, yarn: YarnCluster, warehouse: Path, logs: Path, connections: dict
) -> dict:
    """SIGTERM the task while its application runs, then SIGKILL its process group five seconds
    later (Airflow's supervisor escalates so), and watch the application's staging directory."""
    trigger_dag_run(airflow_runner, KILL_DAG, STOP_RUN, "2024-01-03")
    before = {app["id"] for app in yarn.apps()}
    snapshots_before = [s.snapshot_id for s in load_table(warehouse, "db.orders").snapshots()]

    def running_application() -> dict | None:
        new = [app for app in yarn.apps() if app["id"] not in before]
        return next((app for app in new if app["state"] == "RUNNING"), None)

    with run_task(airflow_runner, logs, KILL_DAG, "append_day_two", STOP_RUN, connections) as task:
        wait_until(running_application, APPLICATION_SECONDS, "the append's application", while_running=task)
        app = running_application()
        staged = staging_dirs(yarn, app["id"])
        secret_was_staged = any(SENTINEL in _text(path) for path in staged_files(staged))
        os.kill(task.pid, signal.SIGTERM)  # the task runner's handler calls on_kill
        time.sleep(SIGKILL_AFTER_SIGTERM_SECONDS)
        task.signal_group(signal.SIGKILL)
        task.wait(30)
        output = task.output()
    final = wait_until(
        lambda: (a := yarn.app(app["id"]))["state"] in ("KILLED", "FAILED", "FINISHED") and a,
        APPLICATION_SECONDS,
        "the stopped task's application to end",
    )
    deadline = time.monotonic() + 120  # the deletion may outlive the SIGKILL: give it time to finish
    while secrets_in_staging(yarn) and time.monotonic() < deadline:
        time.sleep(0.5)
    return {
        "app": final,
        "secret_was_staged": secret_was_staged,
        "output": output,
        "snapshots_before": snapshots_before,
        "snapshots_after": [s.snapshot_id for s in load_table(warehouse, "db.orders").snapshots()],
        "left_in_staging": secrets_in_staging(yarn),
    }


def staging_dirs(yarn: YarnCluster, application_id: str) -> list[Path]:
    """The application's staging directory (``<stagingDir>/<user>/.sparkStaging/<id>``)."""
    return list(yarn.staging_dir.glob(f"*/.sparkStaging/{application_id}"))


def staged_files(folders: list[Path]) -> list[Path]:
    return [path for folder in folders for path in folder.rglob("*") if path.is_file()]


def secrets_in_staging(yarn: YarnCluster) -> list[Path]:
    """Every file under the staging root, of any application, that holds the sentinel secret."""
    return [path for path in staged_files([yarn.staging_dir]) if SENTINEL in _text(path)]


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:  # deleted between the listing and the read
        return ""


def run_xcom(runner: AirflowRunner, dag_id: str, run_id: str, task_id: str) -> object:
    """The task's ``return_value`` XCom in one run (other modules run the same DAG in this database)."""
    with sqlite3.connect(runner.home / "airflow.db") as db:
        [(value,)] = db.execute(
            "SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = ? AND key = 'return_value'",
            (dag_id, run_id, task_id),
        ).fetchall()
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def test_every_task_ran_its_driver_on_yarn_and_no_result_file_came_back(yarn_runs, yarn_cluster):
    _, output, apps = yarn_runs["story"]
    submits = [line for line in output.splitlines() if "Spark-Submit cmd:" in line]
    assert len(submits) == len(TASKS)
    for line in submits:
        assert "--master yarn" in line and "--deploy-mode cluster" in line
        assert "--result-file" not in line  # the job writes no result on the cluster
    assert sorted(app["name"] for app in apps) == sorted(f"airflow-iceberg-{DAG_ID}.{task}" for task in TASKS)
    assert {(app["state"], app["finalStatus"]) for app in apps} == {("FINISHED", "SUCCEEDED")}
    # the driver ran in the ApplicationMaster's container, not in the Airflow task
    assert "airflow-iceberg result:" in yarn_cluster.container_logs(apps[0]["id"])


def test_the_xcoms_are_the_commits_pyiceberg_reads(yarn_runs, yarn_runner):
    airflow_runner = yarn_runner
    warehouse, _, _ = yarn_runs["story"]
    orders = load_table(warehouse, "db.orders")
    snapshots = orders.snapshots()
    results = [airflow_runner.xcom(DAG_ID, task) for task in TASKS[:3]]
    assert [r["snapshot_id"] for r in results] == [s.snapshot_id for s in snapshots]
    assert [(r["operation"], r["added_records"], r["total_records"]) for r in results] == [
        ("overwrite", 100, 100),
        ("append", 80, 180),
        ("overwrite", 90, 170),
    ]
    for result, snapshot in zip(results, snapshots, strict=True):
        assert result["summary"][COMMIT_ID] == snapshot.summary[COMMIT_ID]
        assert result["parent_snapshot_id"] == snapshot.parent_snapshot_id
    assert orders.scan().to_arrow().num_rows == 170


def test_the_copy_reports_the_snapshot_it_read_and_its_sink_commit(yarn_runs, yarn_runner):
    airflow_runner = yarn_runner
    warehouse, _, _ = yarn_runs["story"]
    appended = load_table(warehouse, "db.orders").snapshots()[1]
    copy = load_table(warehouse, "db.orders_before_correction")
    read = airflow_runner.xcom(DAG_ID, "snapshot_before_correction")
    assert read["snapshot_id"] == appended.snapshot_id and read["row_count"] == 180
    assert read["sink"]["snapshot_id"] == copy.current_snapshot().snapshot_id
    assert "preview" not in read  # preview rows stay with the driver in cluster mode
    assert copy.scan().to_arrow().num_rows == 180


def test_every_commit_is_an_asset_event(yarn_runs, yarn_runner):
    airflow_runner = yarn_runner
    warehouse, _, _ = yarn_runs["story"]
    committed = [s.snapshot_id for s in load_table(warehouse, "db.orders").snapshots()]
    assert [e["snapshot_id"] for e in asset_events(airflow_runner, "db.orders", warehouse)] == committed
    [copied] = asset_events(airflow_runner, "db.orders_before_correction", warehouse)
    copy = load_table(warehouse, "db.orders_before_correction")
    assert copied["snapshot_id"] == copy.current_snapshot().snapshot_id


def test_a_killed_worker_reconnects_to_its_running_driver_and_reports_its_one_commit(yarn_runs):
    kill = yarn_runs["kill"]
    orders = load_table(kill["warehouse"], "db.orders")
    # The worker died while the driver was running and before it committed.
    assert kill["state_when_killed"] == "RUNNING"
    assert kill["snapshots_when_killed"] == 1
    # One application for the append, not two: the retry reconnected to it.
    assert [app["id"] for app in kill["append_apps"]] == [kill["killed_app"]["id"]]
    retry = kill["retry_output"]
    assert "Reconnecting to existing job" in retry or "Job already completed" in retry
    assert "Spark-Submit cmd:" not in kill["retry_output"]
    # One commit, the one that application made, and that is what the retry reports.
    appends = [s for s in orders.snapshots() if s.summary.operation.value == "append"]
    assert len(appends) == 1 and orders.scan().to_arrow().num_rows == 180
    result = kill["retry_xcom"]
    assert [e["snapshot_id"] for e in kill["append_events"]] == [appends[0].snapshot_id]
    assert result["snapshot_id"] == appends[0].snapshot_id and result["added_records"] == 80
    assert result["summary"][COMMIT_ID] == appends[0].summary[COMMIT_ID]


def test_a_stopped_task_kills_its_application_and_leaves_no_secrets_in_staging(yarn_runs):
    """Marked failed, cleared or timed out, the task's on_kill kills its YARN application and
    deletes the application's staging directory, which held the catalog's secrets file. A killed
    application's ApplicationMaster never deletes it (YARN gives its shutdown hook 250 ms)."""
    stop = yarn_runs["stop"]
    assert stop["secret_was_staged"]  # the fault is real: the secrets file was there
    assert stop["app"]["state"] == "KILLED", stop["output"][-4000:]
    assert stop["left_in_staging"] == []  # nowhere under the staging root, every application's
    assert stop["snapshots_after"] == stop["snapshots_before"]  # the killed job committed nothing

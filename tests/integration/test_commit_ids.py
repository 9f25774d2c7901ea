"""The commit id on real Airflow: the same for a retry, new after the task instance is cleared.

No Spark: the probe DAG records the id an Iceberg write would carry on each try. ``airflow dags
test`` runs the first try (it fails on purpose) and Airflow's retry; ``airflow tasks clear``
clears the task instance as a user repairing it would; ``airflow tasks test`` runs it again.

A task instance cleared while it *runs* is restarted, not cleared: Airflow's own
``clear_task_instances`` (on a real metadata database) leaves its ``max_tries`` alone, so the
write keeps its commit id and the snapshot sensor its baseline, as across a retry.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime

import pyarrow as pa

from airflow_iceberg.operators import IcebergAppendOperator
from airflow_iceberg.sensors.snapshot import IcebergSnapshotSensor
from tests.integration.robustness_dags.commit_id_probe import LOG_ENV
from tests.integration.task_processes import ROBUSTNESS_DAGS, task_instance_state

DAG_ID = "robust_commit_ids"
DATE = "2024-01-05"


def test_a_retry_keeps_the_commit_id_and_a_clear_gives_a_new_one(airflow_runner, tmp_path):
    log = tmp_path / "tries.jsonl"
    env = {"AIRFLOW__CORE__DAGS_FOLDER": str(ROBUSTNESS_DAGS), LOG_ENV: str(log)}

    def airflow(*args: str) -> None:
        completed = airflow_runner.airflow(*args, env=env)
        assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]

    airflow("dags", "test", DAG_ID, DATE)
    [(run_id, state, _)] = task_instance_state(airflow_runner, DAG_ID, "probe")
    assert state == "success"
    airflow("dags", "clear", DAG_ID, "--run-id", run_id, "--yes")  # clears its one task instance
    airflow("tasks", "test", DAG_ID, "probe", run_id)

    first, retry, repair = (json.loads(line) for line in log.read_text().splitlines())
    assert (first["try"], retry["try"]) == (1, 2)
    assert first["commit_id"].startswith(f"{DAG_ID}:probe:{run_id}:-1:1:")
    assert retry["commit_id"] == first["commit_id"]  # Airflow's retry: the same id, so it finds the commit
    assert repair["commit_id"].startswith(f"{DAG_ID}:probe:{run_id}:-1:3:")  # first try after the clear


# --------------------------------------------------------------------------- cleared while running

RETRIES = 2
DAG_FILE = f"""
from datetime import datetime
from airflow.sdk import DAG
from airflow_iceberg.sensors.snapshot import IcebergSnapshotSensor
with DAG("review_clear", schedule=None, start_date=datetime(2026, 1, 1)):
    IcebergSnapshotSensor(
        task_id="wait", table="db.t", iceberg_conn_id="c", deferrable=False, retries={RETRIES}
    )
"""
CLEAR = """
import json, sys
from airflow._shared.timezones import timezone
from airflow.dag_processing.bundles.manager import DagBundlesManager
from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
from airflow.models.dagbag import DBDagBag
from airflow.models.taskinstance import clear_task_instances
from airflow.utils.session import create_session
from airflow.utils.types import DagRunTriggeredByType, DagRunType

DagBundlesManager().sync_bundles_to_db()
bag = DagBag(dag_folder=sys.argv[1])
assert not bag.import_errors, bag.import_errors
with create_session() as session:
    sync_bag_to_db(bag, "dags-folder", None, session=session)
cleared = {}
for state in ("running", "up_for_reschedule"):
    with create_session() as session:
        dag = DBDagBag().get_latest_version_of_dag("review_clear", session=session)
        run = dag.create_dagrun(
            run_id=f"manual_{state}", run_after=timezone.utcnow(), run_type=DagRunType.MANUAL,
            triggered_by=DagRunTriggeredByType.TEST, state="running", session=session,
        )
        ti = run.get_task_instance("wait", session=session)
        ti.state, ti.try_number = state, 1
        session.flush()
        before = ti.max_tries
        clear_task_instances([ti], session)
        cleared[state] = {"before": before, "after": ti.max_tries, "state": str(ti.state)}
print(json.dumps(cleared))
"""


def _airflow_clears(tmp_path) -> dict:
    """What Airflow's ``clear_task_instances`` does to ``max_tries`` of a running and a rescheduled sensor."""
    home, dags = tmp_path / "airflow", tmp_path / "dags"
    home.mkdir()
    dags.mkdir()
    (dags / "review_clear.py").write_text(DAG_FILE)
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
    }
    env.pop("AIRFLOW__CORE__UNIT_TEST_MODE", None)
    subprocess.run(["airflow", "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    done = subprocess.run(
        [sys.executable, "-c", CLEAR, str(dags)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


class DictStateStore:
    """Airflow 3.3's task state store (``get``/``set``) over a dict."""

    def __init__(self) -> None:
        self.values: dict[str, object] = {}

    def get(self, key, default=None):
        return self.values.get(key, default)

    def set(self, key, value, *, retention=None):
        self.values[key] = value


class TaskInstance:
    """What the sensor and a write read from a task instance to tell its clear generation."""

    def __init__(self, max_tries: int) -> None:
        self.max_tries = max_tries
        self.dag_id, self.task_id, self.run_id, self.map_index = "review_clear", "wait", "manual_running", -1

    def get_first_reschedule_date(self, context) -> datetime | None:
        return None


def _rows(start: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + 2), pa.int64())})


def test_a_task_cleared_while_it_runs_is_restarted_keeping_its_baseline_and_commit_id(tmp_path, monkeypatch):
    """A poke-mode sensor is a RUNNING task instance while it sleeps between pokes (so is any
    write while it runs). Airflow clears a RUNNING instance by its "restart" path:
    ``clear_task_instances`` sets it to RESTARTING, the running try is killed and run again, and
    ``max_tries`` is left as it was, unlike the clear of an instance that is not running. That is a
    restart, and the provider treats it as one, like a retry: the sensor keeps its baseline (it
    reports a commit made before the clear) and a write keeps its commit id (its retry finds the
    killed try's commit instead of writing again). A clear of a finished or waiting instance gives
    both a new generation."""
    from pyiceberg.catalog.sql import SqlCatalog

    cleared = _airflow_clears(tmp_path)
    # the contrast: a sensor cleared between two reschedule-mode pokes gets a new generation
    assert cleared["up_for_reschedule"]["after"] == cleared["up_for_reschedule"]["before"] + 1
    running = cleared["running"]
    assert running["state"] == "restarting"  # Airflow kills it and always runs it again
    assert running["after"] == running["before"]  # ... as a restart: max_tries unchanged

    database, warehouse = tmp_path / "catalog.db", tmp_path / "wh"
    warehouse.mkdir()
    catalog = SqlCatalog("lake", uri=f"sqlite:///{database}", warehouse=f"file://{warehouse}")
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=_rows(0).schema)
    table.append(_rows(0))
    head = table.current_snapshot().snapshot_id
    connection = {
        "conn_type": "iceberg_catalog",
        "host": f"jdbc:sqlite:{database}",
        "extra": {"catalog_name": "lake", "catalog_type": "jdbc", "warehouse": f"file://{warehouse}"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_C", json.dumps(connection))

    def sensor() -> IcebergSnapshotSensor:
        return IcebergSnapshotSensor(
            task_id="wait", table="db.t", iceberg_conn_id="c", deferrable=False, retries=RETRIES
        )

    def commit_id(max_tries: int) -> str:
        write = IcebergAppendOperator(task_id="wait", table="db.t", source_query="SELECT 1", retries=RETRIES)
        return write._commit_id({"ti": TaskInstance(max_tries), "dag_run": None})

    store = DictStateStore()
    first = sensor()
    first._baseline_id = first.baseline({"ti": TaskInstance(running["before"]), "task_state_store": store})
    assert first._baseline_id == head
    table.append(_rows(2))  # committed while the running sensor sleeps; then the user clears it
    before_the_clear = table.current_snapshot().snapshot_id
    restarted = sensor()
    context = {"ti": TaskInstance(running["after"]), "task_state_store": store}
    restarted._baseline_id = restarted.baseline(context)
    assert restarted._baseline_id == head, "the restarted sensor did not keep its baseline"
    found = restarted.poke(context)
    assert found.is_done and found.xcom_value["matching_snapshot_ids"] == [before_the_clear]
    assert commit_id(running["after"]) == commit_id(running["before"])  # a write restarted: the same id
    # cleared while waiting for its next poke: a new generation, so it waits afresh, and a write is repaired
    waiting = cleared["up_for_reschedule"]
    afresh = sensor()
    afresh._baseline_id = afresh.baseline({"ti": TaskInstance(waiting["after"]), "task_state_store": store})
    assert afresh._baseline_id == before_the_clear
    assert commit_id(waiting["after"]) != commit_id(waiting["before"])

"""Hostile review of "A cleared sensor waits afresh" (docs/guarantees.md) with Airflow's own clear.

Fails on the code as reviewed. A poke-mode sensor is a RUNNING task instance while it sleeps
between pokes (so is a reschedule-mode one during a poke, and any sensor before it defers).
Airflow clears a RUNNING instance by its "restart" path: ``clear_task_instances`` sets it to
RESTARTING, the running try is killed, and the instance is always re-run
(``is_eligible_to_retry``), but ``max_tries`` is left as it was, unlike the clear of an instance
that is not running. The sensor's clear generation (``max_tries - retries + 1``) is then that of
the try before the clear: the re-run keeps the old baseline and reports at once a commit made
before the clear, which the user cleared the sensor to skip.

Airflow's real ``clear_task_instances`` runs on a real (SQLite) metadata database, in a
subprocess with its own AIRFLOW_HOME; the ``max_tries`` it leaves is what the re-run's task
instance carries. The sensor then runs against a real pyiceberg SQL catalog.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime

import pyarrow as pa

from airflow_iceberg.sensors.snapshot import IcebergSnapshotSensor

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
    def __init__(self) -> None:
        self.values: dict[str, object] = {}

    def get(self, key, default=None):
        return self.values.get(key, default)

    def set(self, key, value, *, retention=None):
        self.values[key] = value


class TaskInstance:
    def __init__(self, max_tries: int) -> None:
        self.max_tries = max_tries

    def get_first_reschedule_date(self, context) -> datetime | None:
        return None


def _rows(start: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + 2), pa.int64())})


def test_a_sensor_cleared_while_it_runs_waits_from_the_head_at_its_first_poke(tmp_path, monkeypatch):
    from pyiceberg.catalog.sql import SqlCatalog

    cleared = _airflow_clears(tmp_path)
    # the contrast: a sensor cleared between two reschedule-mode pokes gets a new generation
    assert cleared["up_for_reschedule"]["after"] == cleared["up_for_reschedule"]["before"] + 1
    running = cleared["running"]
    assert running["state"] == "restarting"  # Airflow kills it and always runs it again

    database, warehouse = tmp_path / "catalog.db", tmp_path / "wh"
    warehouse.mkdir()
    catalog = SqlCatalog("lake", uri=f"sqlite:///{database}", warehouse=f"file://{warehouse}")
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=_rows(0).schema)
    table.append(_rows(0))
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

    store = DictStateStore()
    first = sensor()
    first._baseline_id = first.baseline({"ti": TaskInstance(running["before"]), "task_state_store": store})
    table.append(_rows(2))  # committed while the running sensor sleeps; then the user clears it
    skipped = table.current_snapshot().snapshot_id
    rerun = sensor()
    rerun._baseline_id = rerun.baseline({"ti": TaskInstance(running["after"]), "task_state_store": store})
    assert rerun._baseline_id == skipped, "the cleared sensor kept the baseline of the try before the clear"

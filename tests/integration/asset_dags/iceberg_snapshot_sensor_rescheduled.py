"""Wait in reschedule mode (a worker slot for each poke, none between them) for any commit.

Each poke is a new ``execute()``; the commit that lands between two pokes must be the one the
sensor reports, not the starting point of a new wait. The pokes are 10 s apart: with 2 s, a busy
scheduler sometimes handled one poke's "process exited" event after the next poke had started,
and failed the running task as "changed externally" (an Airflow race, not this sensor's).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg.sensors.snapshot import IcebergSnapshotSensor

with DAG(
    "iceberg_snapshot_sensor_rescheduled",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["test"],
):
    IcebergSnapshotSensor(
        task_id="wait_between_pokes",
        table="db.rescheduled",
        iceberg_conn_id="sql_catalog",
        deferrable=False,
        mode="reschedule",
        poke_interval=10,
        timeout=300,
    )

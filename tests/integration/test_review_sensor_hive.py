"""Hostile review of "The sensor never misses a commit" against the real Hive metastore.

Fails on the code as reviewed. ``thrift://ms1:9083,thrift://ms2:9083`` is how a Hive catalog
names its metastores for high availability: Spark's HiveMetaStoreClient tries each in turn. The
sensor hands the list, in the order written, to pyiceberg's HiveCatalog, whose failover loop
only builds a client (``_HiveClient.__init__`` opens nothing), so it always talks to the first
metastore. With that one down and the second up, the catalog is up for Spark, and every poll
fails with "connection refused": the commit is never reported (poke and reschedule mode wait
until the sensor's timeout; a deferred sensor gives up after ``poll_retries``).
"""

from __future__ import annotations

import json
import socket
import uuid

import pyarrow as pa

from airflow_iceberg.sensors.snapshot import IcebergSnapshotSensor
from tests.integration.catalog_connections import hive_connection, hive_reader


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rows(start: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + 2), pa.int64())})


def test_a_sensor_on_a_metastore_list_reads_the_metastore_that_is_up(hive_metastore, monkeypatch):
    writer = hive_reader(hive_metastore)
    namespace = f"review_{uuid.uuid4().hex[:8]}"
    writer.create_namespace(namespace)
    table = writer.create_table(f"{namespace}.t", schema=_rows(0).schema)
    table.append(_rows(0))
    baseline = table.current_snapshot().snapshot_id
    connection = hive_connection(hive_metastore)
    connection["host"] = f"thrift://127.0.0.1:{_closed_port()},{hive_metastore.uri}"  # first one down
    monkeypatch.setenv("AIRFLOW_CONN_HIVE_HA", json.dumps(connection))
    sensor = IcebergSnapshotSensor(
        task_id="s",
        table=f"{namespace}.t",
        iceberg_conn_id="hive_ha",
        after_snapshot_id=baseline,
        deferrable=False,
    )
    sensor._baseline_id = sensor.baseline({})
    table.append(_rows(2))  # the metastore that is up has it
    poked = sensor.poke({})
    assert poked.is_done and poked.xcom_value["snapshot_id"] == table.current_snapshot().snapshot_id

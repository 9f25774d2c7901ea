"""Hostile review of "The sensor never misses a commit" (docs/guarantees.md) with real pyiceberg commits.

Every test here fails on the code as reviewed. The table is a real pyiceberg SQL catalog on
SQLite, written by pyiceberg as any writer outside Airflow would (the same harness as
``test_snapshot_trigger``); an outage is a real port where nothing listens, or a real
pyarrow S3 client talking to an endpoint that answers as S3 does when it throttles.
"""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pyarrow as pa
import pytest

from airflow_iceberg.catalog.config import config_from_fields
from airflow_iceberg.catalog.pyiceberg_tables import load_table
from airflow_iceberg.sensors.snapshot import IcebergSnapshotSensor
from airflow_iceberg.triggers.snapshot import IcebergSnapshotTrigger


def _rows(start: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + 2), pa.int64())})


@pytest.fixture
def sql_catalog(tmp_path, iceberg_connection):
    """A pyiceberg SQL catalog on SQLite and the ``iceberg_catalog`` connection the sensor reads it by."""
    from pyiceberg.catalog.sql import SqlCatalog

    database, warehouse = tmp_path / "catalog.db", tmp_path / "wh"
    warehouse.mkdir()
    catalog = SqlCatalog("lake", uri=f"sqlite:///{database}", warehouse=f"file://{warehouse}")
    catalog.create_namespace("db")
    iceberg_connection(
        "sql_catalog",
        host=f"jdbc:sqlite:{database}",
        extra={"catalog_name": "lake", "catalog_type": "jdbc", "warehouse": f"file://{warehouse}"},
    )
    return catalog


class DictStateStore:
    """Airflow 3.3's task state store (``get``/``set``) over a dict, as ``test_snapshot_trigger`` has it."""

    def __init__(self) -> None:
        self.values: dict[str, object] = {}

    def get(self, key, default=None):
        return self.values.get(key, default)

    def set(self, key, value, *, retention=None):
        self.values[key] = value


class FakeTaskInstance:
    def __init__(self, max_tries: int = 0, first_reschedule_date: datetime | None = None) -> None:
        self.max_tries = max_tries
        self.first_reschedule_date = first_reschedule_date

    def get_first_reschedule_date(self, context):
        return self.first_reschedule_date


def _poke_sensor(**kwargs) -> IcebergSnapshotSensor:
    sensor = IcebergSnapshotSensor(task_id="s", iceberg_conn_id="sql_catalog", deferrable=False, **kwargs)
    return sensor


# --------------------------------------------------------------------------- commits the sensor misses


def test_a_commit_after_a_rollback_of_a_format_v1_table_is_reported(sql_catalog):
    """Format v1 snapshots have no sequence number (pyiceberg reads 0 for all of them), so once
    the baseline is no longer an ancestor of the head (a rollback, a replace), the walk from the
    head stops at the first snapshot, ``0 <= 0``: that commit, and every later one, is missed.
    Tables made by Iceberg before 1.4 (and any created with format-version 1) are v1."""
    table = sql_catalog.create_table("db.t", schema=_rows(0).schema, properties={"format-version": "1"})
    table.append(_rows(0))
    before = table.current_snapshot().snapshot_id
    table.append(_rows(2))
    sensor = _poke_sensor(table="db.t")
    sensor._baseline_id = sensor.baseline({})  # the head when the sensor starts
    table.manage_snapshots().rollback_to_snapshot(before).commit()  # e.g. IcebergRollbackOperator
    table.append(_rows(4))  # a real commit after the baseline
    committed = table.current_snapshot().snapshot_id
    found = sensor.poke({})
    assert found.is_done and found.xcom_value["snapshot_id"] == committed
    table.append(_rows(6))  # and every commit after it
    assert sensor.poke({}).is_done


def test_a_branch_made_after_the_sensor_started_does_not_report_mains_old_snapshots(sql_catalog):
    """A sensor on ``branch="audit"`` that starts before the branch exists has no baseline, so
    "every snapshot counts". The project's own branch writes create the branch from main's head
    first (``ALTER TABLE ... CREATE BRANCH``, its own metadata commit) and write after; a poll in
    between reports main's head, committed before the sensor started, as the new commit on the
    branch (and ``matching_snapshot_ids`` lists main's whole history)."""
    table = sql_catalog.create_table("db.t", schema=_rows(0).schema)
    table.append(_rows(0), snapshot_properties={"writer": "nightly"})
    table.append(_rows(2), snapshot_properties={"writer": "nightly"})
    old = table.current_snapshot().snapshot_id
    context = {"ti": FakeTaskInstance(), "task_state_store": DictStateStore()}
    sensor = _poke_sensor(table="db.t", branch="audit", operation="append", mode="reschedule")
    sensor._baseline_id = sensor.baseline(context)
    table.manage_snapshots().create_branch(old, "audit").commit()  # the write's first step
    found = sensor.poke(context)
    assert not found.is_done, f"reported {found.xcom_value['snapshot_id']} (main's head before the start)"


# --------------------------------------------------------------------------- outages that fail the sensor


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def down_catalog(iceberg_connection, tmp_path):
    """A PostgreSQL JDBC catalog whose server refuses connections (as ``test_snapshot_trigger`` has it)."""
    return iceberg_connection(
        "down",
        host=f"jdbc:postgresql://127.0.0.1:{_closed_port()}/iceberg",
        login="iceberg",
        password="secret",
        extra={"catalog_name": "lake", "catalog_type": "jdbc", "warehouse": f"file://{tmp_path}"},
    )


def test_a_deferrable_sensor_started_during_a_catalog_outage_waits_it_out(down_catalog):
    """The docs: "A catalog outage ... is waited out: the trigger retries with backoff". But the
    baseline is read in ``execute()`` before deferring, outside any retry, so a sensor that starts
    while the catalog is down fails at once with the connection error."""
    from airflow.sdk.exceptions import TaskDeferred

    sensor = IcebergSnapshotSensor(task_id="s", table="db.t", iceberg_conn_id=down_catalog)
    with pytest.raises(TaskDeferred):
        sensor.execute({"ti": FakeTaskInstance(), "task_state_store": DictStateStore()})


@pytest.mark.parametrize(
    "context",
    [
        pytest.param(
            lambda: {"ti": FakeTaskInstance(), "task_state_store": DictStateStore()}, id="first-poke"
        ),
        pytest.param(
            lambda: {"ti": FakeTaskInstance(first_reschedule_date=datetime.now(timezone.utc))},
            id="any-poke-without-a-state-store",
        ),
    ],
)
def test_a_rescheduled_poke_that_finds_the_catalog_down_is_not_yet_done(down_catalog, context):
    """The docs: "a poke counts the outage as 'not yet'". In reschedule mode every poke is an
    ``execute()`` that first reads the baseline, unguarded: on the first poke (state store) and on
    every poke without a state store (Airflow < 3.3, the head at the first poke's start), an
    outage fails the try instead of rescheduling it."""
    from airflow.sdk.exceptions import AirflowRescheduleException

    sensor = IcebergSnapshotSensor(
        task_id="s", table="db.t", iceberg_conn_id=down_catalog, deferrable=False, mode="reschedule"
    )
    with pytest.raises(AirflowRescheduleException):
        sensor.execute(context())


# --------------------------------------------------------------------------- S3 throttling


def _s3_stub(status: int, code: str, seen: list[str] | None = None) -> type[BaseHTTPRequestHandler]:
    """A handler answering every request as S3 does with this error (503 SlowDown, 404 NoSuchKey).

    ``seen`` collects each request's method and path.
    """

    class S3Stub(BaseHTTPRequestHandler):
        def _error(self) -> None:
            if seen is not None:
                seen.append(f"{self.command} {self.path}")
            body = f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code></Error>'.encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_HEAD = _error

        def log_message(self, *args) -> None:
            pass

    return S3Stub


def _serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def throttling_s3() -> Iterator[str]:
    yield from _serve(_s3_stub(503, "SlowDown"))


@pytest.fixture
def empty_s3() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    for url in _serve(_s3_stub(404, "NoSuchKey", seen)):
        yield url, seen


S3_PROPERTIES = {"s3.access-key-id": "k", "s3.secret-access-key": "s", "s3.region": "us-east-1"}


def test_s3_throttling_the_metadata_read_is_waited_out(
    sql_catalog, tmp_path, iceberg_connection, throttling_s3
):
    """A SQL (or Hive, or Glue) catalog keeps its tables' metadata on S3, read by pyarrow's S3
    client. S3's 503 SlowDown (or a 500) is the textbook transient error, but pyarrow reports it as
    ``OSError: ... AWS Error UNKNOWN (HTTP status 503)`` with no errno and none of the listed
    phrases: the trigger takes it for a configuration error and fails the deferred sensor at once."""
    table = sql_catalog.create_table("db.t", schema=_rows(0).schema)
    table.append(_rows(0))
    baseline = table.current_snapshot().snapshot_id
    with sqlite3.connect(tmp_path / "catalog.db") as db:  # the table's metadata now lives on S3
        db.execute(
            "UPDATE iceberg_tables SET metadata_location = 's3://lake/wh/db/t/metadata/v1.metadata.json'"
        )
    iceberg_connection(
        "s3_catalog",
        host=f"jdbc:sqlite:{tmp_path / 'catalog.db'}",
        extra={
            "catalog_name": "lake",
            "catalog_type": "jdbc",
            "warehouse": "s3://lake/wh",
            "catalog_properties": {"s3.endpoint": throttling_s3, **S3_PROPERTIES},
        },
    )
    trigger = IcebergSnapshotTrigger(
        table="db.t",
        iceberg_conn_id="s3_catalog",
        after_snapshot_id=baseline,
        poll_interval=0.01,
        poll_retries=1,
        error_event=True,
    )

    async def first():
        async for event in trigger.run():
            return event.payload

    event = asyncio.run(asyncio.wait_for(first(), 120))
    assert event["status"] == "error" and event["failed_polls"] == 2  # retried, then gave up


def test_the_hadoop_readers_listing_fallback_uses_the_connections_s3_endpoint(empty_s3):
    """Without ``version-hint.text`` (Iceberg deletes and renames it at every commit, so a poll
    can land between the two) the reader lists ``metadata/`` with
    ``pyarrow.fs.FileSystem.from_uri``, which knows nothing of the connection's ``s3.endpoint``
    or keys: for MinIO, SeaweedFS or any S3-compatible store it asks AWS itself for the bucket.
    What AWS answers (unknown bucket, access denied) is not transient, so the table reads as
    missing, and a sensor starting then keeps "no baseline": it later fires on old snapshots."""
    endpoint, seen = empty_s3
    config = config_from_fields(
        {
            "catalog_type": "hadoop",
            "warehouse": "s3://lake/wh",
            "catalog_properties": {"s3.endpoint": endpoint, **S3_PROPERTIES},
        }
    )
    with pytest.raises(Exception) as raised:
        load_table(config, "db.t")
    listings = [request for request in seen if "list-type" in request or "prefix=" in request]
    assert listings, f"the listing never reached {endpoint} (it saw {seen}); it failed with {raised.value!r}"

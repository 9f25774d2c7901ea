"""The snapshot sensor and trigger through real catalog outages.

A JDBC catalog on PostgreSQL, written by pyiceberg as any writer outside Airflow would. The
trigger is waiting when the server goes down; its polls fail with "connection refused", each
logged as a retry. The server comes back on the same port with the same data, and a commit made
then is the trigger's event. (Before, the first failed poll ended the trigger, and with it the
deferred sensor waiting on it.) An ``AssetWatcher``'s trigger that starts during the outage
reports a commit made during it. A Hive catalog on a list of metastores whose first one is down is
read from the one that is up. pyiceberg, through its own connection, says what was committed.
"""

from __future__ import annotations

import asyncio
import json
import time
import types
import uuid

import pyarrow as pa
import pytest
import structlog

from airflow_iceberg.sensors.snapshot import IcebergSnapshotSensor
from airflow_iceberg.triggers.snapshot import IcebergSnapshotTrigger
from tests.integration.catalog_connections import (
    hive_connection,
    hive_reader,
    postgres_connection,
    postgres_reader,
)
from tests.servers.ports import free_port

OUTAGE_TIMEOUT_SECONDS = 120


def _rows(start: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + 2), pa.int64())})


async def _until(condition, what: str) -> None:
    deadline = time.monotonic() + OUTAGE_TIMEOUT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def test_the_trigger_waits_out_a_catalog_outage_and_reports_the_commit_made_after_it(
    postgres_server, tmp_path, monkeypatch
):
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    writer = postgres_reader(postgres_server, warehouse, catalog_name="outage")
    writer.create_namespace_if_not_exists("db")
    table = writer.create_table("db.events", schema=_rows(0).schema)
    table.append(_rows(0))
    baseline = table.current_snapshot().snapshot_id
    connection = postgres_connection(postgres_server, warehouse, catalog_name="outage")
    monkeypatch.setenv("AIRFLOW_CONN_OUTAGE_CATALOG", json.dumps(connection))
    trigger = IcebergSnapshotTrigger(
        table="db.events",
        iceberg_conn_id="outage_catalog",
        after_snapshot_id=baseline,
        poll_interval=0.2,
        poll_retries=20,
    )

    def warnings(logs: list[dict]) -> list[str]:
        return [entry["event"] for entry in logs if entry["log_level"] == "warning"]

    async def outage() -> tuple[dict, int, list[dict]]:
        with structlog.testing.capture_logs() as logs:
            await asyncio.to_thread(postgres_server.interrupt)
            waiting = asyncio.ensure_future(trigger.run().__anext__())
            await _until(lambda: len(warnings(logs)) >= 2 or waiting.done(), "two failed polls")
            assert not waiting.done(), waiting.exception()  # still waiting, not failed
            # on this thread, not a worker's: the server's PR_SET_PDEATHSIG would kill it when
            # the worker thread exits at the end of asyncio.run(), under the next test
            postgres_server.resume()
            # a writer that was not connected during the outage, as a writer after it would be
            after = postgres_reader(postgres_server, warehouse, catalog_name="outage").load_table("db.events")
            await asyncio.to_thread(after.append, _rows(2))
            committed = after.current_snapshot().snapshot_id
            event = await asyncio.wait_for(waiting, OUTAGE_TIMEOUT_SECONDS)
            return event.payload, committed, logs

    try:
        payload, committed, logs = asyncio.run(outage())
    finally:
        if postgres_server.process is not None and not postgres_server.process.running():
            postgres_server.resume()  # the server is shared by the session
    assert (payload["status"], payload["snapshot_id"]) == ("success", committed)
    assert payload["parent_snapshot_id"] == baseline and payload["matching_snapshot_ids"] == [committed]
    failed = warnings(logs)
    assert failed[0].startswith("Polling db.events failed (OperationalError: "), failed
    assert "retry 1 of 20" in failed[0]
    assert all("Connection refused" in line or "terminating connection" in line for line in failed), failed
    assert any(
        entry["event"] == f"db.events can be read again after {len(failed)} failed polls" for entry in logs
    ), logs


@pytest.fixture
def _server_is_up_after(postgres_server):
    yield
    if postgres_server.process is not None and not postgres_server.process.running():
        postgres_server.resume()  # the server is shared by the session


@pytest.mark.usefixtures("_server_is_up_after")
def test_an_asset_watcher_reports_a_commit_made_during_an_outage_at_its_start(
    postgres_server, tmp_path, monkeypatch
):
    """An ``AssetWatcher``'s trigger (no ``after_snapshot_id``) takes "the head when it starts
    watching" as its baseline. It took it at its first *successful* poll: when the catalog was
    down as it started, a commit made after it started, once the catalog was back and before that
    poll, became the baseline: the watcher was running, yet that commit never became an asset
    event. Now the baseline is the head at the trigger's start, read back from the snapshot log.

    The trigger's sleeps are the test's hooks (no timing): the first retry wait brings the server
    back and commits; a third wait means the trigger went back to waiting past that commit.
    """
    warehouse = tmp_path / "wh"
    warehouse.mkdir()
    catalog_name = f"watch_{uuid.uuid4().hex[:8]}"
    writer = postgres_reader(postgres_server, warehouse, catalog_name=catalog_name)
    writer.create_namespace_if_not_exists("db")
    writer.create_table("db.events", schema=_rows(0).schema).append(_rows(0))
    connection = postgres_connection(postgres_server, warehouse, catalog_name=catalog_name)
    monkeypatch.setenv("AIRFLOW_CONN_WATCHED_CATALOG", json.dumps(connection))
    trigger = IcebergSnapshotTrigger(
        table="db.events", iceberg_conn_id="watched_catalog", poll_interval=0.01, poll_retries=5
    )
    committed: list[int] = []
    waits: list[float] = []

    async def wait(delay: float) -> None:
        waits.append(delay)
        if len(waits) == 1:  # the retry after the failed first poll: the catalog is back, a commit lands
            postgres_server.resume()
            table = postgres_reader(postgres_server, warehouse, catalog_name=catalog_name).load_table(
                "db.events"
            )
            table.append(_rows(2))
            committed.append(table.current_snapshot().snapshot_id)
        elif len(waits) > 2:
            raise AssertionError(f"the trigger went back to waiting past snapshot {committed[0]}")

    monkeypatch.setattr(
        "airflow_iceberg.triggers.snapshot.asyncio",
        types.SimpleNamespace(sleep=wait, to_thread=asyncio.to_thread),
    )

    async def first_event() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("no event")

    postgres_server.interrupt()
    payload = asyncio.run(first_event())
    assert payload["snapshot_id"] == committed[0] and payload["matching_snapshot_ids"] == committed


def test_a_sensor_on_a_metastore_list_reads_the_metastore_that_is_up(hive_metastore, monkeypatch):
    """``thrift://ms1:9083,thrift://ms2:9083`` is how a Hive catalog names its metastores for high
    availability; Spark's client tries each in turn. pyiceberg's HiveCatalog only *builds* a client
    for the first (``_HiveClient.__init__`` opens nothing), so with that one down every poll failed
    with "connection refused" while the catalog was up for Spark. Now each member is asked in turn."""
    writer = hive_reader(hive_metastore)
    namespace = f"ha_{uuid.uuid4().hex[:8]}"
    writer.create_namespace(namespace)
    table = writer.create_table(f"{namespace}.t", schema=_rows(0).schema)
    table.append(_rows(0))
    baseline = table.current_snapshot().snapshot_id
    connection = hive_connection(hive_metastore)
    connection["host"] = f"thrift://127.0.0.1:{free_port()},{hive_metastore.uri}"  # the first one down
    monkeypatch.setenv("AIRFLOW_CONN_HIVE_HA", json.dumps(connection))
    sensor = IcebergSnapshotSensor(
        task_id="s",
        table=f"{namespace}.t",
        iceberg_conn_id="hive_ha",
        after_snapshot_id=baseline,
        deferrable=False,
    )
    sensor._baseline_id = sensor.baseline({})
    assert not sensor.poke({}).is_done  # read, from the second metastore: nothing new yet
    table.append(_rows(2))  # the metastore that is up has it
    poked = sensor.poke({})
    assert poked.is_done and poked.xcom_value["snapshot_id"] == table.current_snapshot().snapshot_id
    # every member down: an outage, "not yet", never a missing table
    connection["host"] = f"thrift://127.0.0.1:{free_port()},thrift://127.0.0.1:{free_port()}"
    monkeypatch.setenv("AIRFLOW_CONN_HIVE_HA", json.dumps(connection))
    assert not sensor.poke({}).is_done

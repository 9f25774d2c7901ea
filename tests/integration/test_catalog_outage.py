"""The snapshot trigger through a real catalog outage: PostgreSQL stopped, then started again.

A JDBC catalog on PostgreSQL, written by pyiceberg as any writer outside Airflow would. The
trigger is waiting when the server goes down; its polls fail with "connection refused", each
logged as a retry. The server comes back on the same port with the same data, and a commit made
then is the trigger's event. (Before, the first failed poll ended the trigger, and with it the
deferred sensor waiting on it.) pyiceberg, through its own connection, says what was committed.
"""

from __future__ import annotations

import asyncio
import json
import time

import pyarrow as pa
import structlog

from airflow_iceberg.triggers.snapshot import IcebergSnapshotTrigger
from tests.integration.catalog_connections import postgres_connection, postgres_reader

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
            await asyncio.to_thread(postgres_server.resume)
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

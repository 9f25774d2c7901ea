"""Hostile review of "The sensor never misses a commit" against the real PostgreSQL catalog server.

Both tests fail on the code as reviewed. pyiceberg's own SqlCatalog writes the tables, as any
writer outside Airflow would; the sensor and trigger read them from an ``iceberg_catalog``
connection as a deployment defines it.
"""

from __future__ import annotations

import asyncio
import json
import types
import uuid

import pyarrow as pa
import pytest

from airflow_iceberg.sensors.snapshot import IcebergSnapshotSensor
from airflow_iceberg.triggers.snapshot import IcebergSnapshotTrigger
from tests.integration.catalog_connections import postgres_connection, postgres_reader


def _rows(start: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + 2), pa.int64())})


def test_a_jdbc_catalog_in_its_own_postgresql_schema_is_the_one_the_sensor_watches(
    postgres_server, tmp_path, monkeypatch
):
    """``jdbc:postgresql://db/iceberg?currentSchema=team_b`` is how a JdbcCatalog is kept in its
    own schema (pgjdbc sets the search path; JdbcCatalog's tables are unqualified). The sensor's
    SQLAlchemy URL drops the query, so it reads (and, pyiceberg being pyiceberg, creates) the
    catalog tables in ``public`` instead: the table "does not exist" there, and every commit to
    the real one is missed until the sensor times out."""
    import psycopg2
    from pyiceberg.catalog.sql import SqlCatalog

    schema = f"team_{uuid.uuid4().hex[:8]}"
    with psycopg2.connect(
        host=postgres_server.host,
        port=postgres_server.port,
        dbname=postgres_server.database,
        user=postgres_server.user,
        password=postgres_server.password,
    ) as db:
        db.cursor().execute(f"CREATE SCHEMA {schema}")
    warehouse = tmp_path / "wh"
    warehouse.mkdir()
    writer = SqlCatalog(
        "teams",
        uri=f"{postgres_server.sqlalchemy_uri}?options=-csearch_path%3D{schema}",
        warehouse=warehouse.as_uri(),
    )
    writer.create_namespace("db")
    table = writer.create_table("db.orders", schema=_rows(0).schema)
    table.append(_rows(0))
    connection = postgres_connection(postgres_server, warehouse, catalog_name="teams")
    connection["host"] = f"{postgres_server.jdbc_uri}?currentSchema={schema}"  # what Spark's JdbcCatalog uses
    monkeypatch.setenv("AIRFLOW_CONN_TEAM_CATALOG", json.dumps(connection))

    sensor = IcebergSnapshotSensor(
        task_id="s", table="db.orders", iceberg_conn_id="team_catalog", deferrable=False
    )
    sensor._baseline_id = sensor.baseline({})
    assert sensor._baseline_id == table.current_snapshot().snapshot_id, "the baseline is not the table's head"
    table.append(_rows(2))
    assert sensor.poke({}).is_done


def test_an_asset_watcher_reports_a_commit_made_during_an_outage_at_its_start(
    postgres_server, tmp_path, monkeypatch
):
    """An ``AssetWatcher``'s trigger (no ``after_snapshot_id``) takes "the head when it starts
    watching" as its baseline, but only at its first *successful* poll. When the catalog is down
    as it starts, a commit made after it started, once the catalog is back and before that poll,
    becomes the baseline: the watcher is running, yet that commit never becomes an asset event.

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
    try:
        payload = asyncio.run(first_event())
    finally:
        if postgres_server.process is not None and not postgres_server.process.running():
            postgres_server.resume()  # the server is shared by the session
    assert payload["snapshot_id"] == committed[0]


@pytest.fixture(autouse=True)
def _server_is_up_after(postgres_server):
    yield
    if postgres_server.process is not None and not postgres_server.process.running():
        postgres_server.resume()

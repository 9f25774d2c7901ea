"""The snapshot trigger and sensor against a real pyiceberg SQL catalog on SQLite (no Spark, no mocks).

The catalog is written by pyiceberg, as any writer outside Airflow would; the trigger reads it
from an ``iceberg_catalog`` connection of type jdbc, the same one Spark would use.
"""

from __future__ import annotations

import asyncio
import json

import pyarrow as pa
import pytest

from airflow_iceberg.catalog.config import config_from_fields
from airflow_iceberg.catalog.pyiceberg_tables import load_table, pyiceberg_properties, sqlalchemy_url
from airflow_iceberg.exceptions import InvalidCatalogConfigError
from airflow_iceberg.sensors.snapshot import IcebergSnapshotSensor
from airflow_iceberg.triggers.snapshot import IcebergSnapshotTrigger

TAG = {"writer": "outside-airflow"}


def _rows(start: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + 2), pa.int64())})


@pytest.fixture
def outside_table(tmp_path, iceberg_connection):
    from pyiceberg.catalog.sql import SqlCatalog

    database, warehouse = tmp_path / "catalog.db", tmp_path / "wh"
    warehouse.mkdir()
    catalog = SqlCatalog("lake", uri=f"sqlite:///{database}", warehouse=f"file://{warehouse}")
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=_rows(0).schema)
    table.append(_rows(0))
    iceberg_connection(
        "sql_catalog",
        host=f"jdbc:sqlite:{database}",
        extra={"catalog_name": "lake", "catalog_type": "jdbc", "warehouse": f"file://{warehouse}"},
    )
    return table


def _first_event(trigger: IcebergSnapshotTrigger, timeout: float = 30) -> dict:
    async def first():
        async for event in trigger.run():
            return event.payload
        return None

    return asyncio.run(asyncio.wait_for(first(), timeout))


def _trigger(**kwargs) -> IcebergSnapshotTrigger:
    return IcebergSnapshotTrigger(table="db.t", iceberg_conn_id="sql_catalog", poll_interval=0.05, **kwargs)


def test_fires_on_the_newest_snapshot_that_passes_the_filters(outside_table):
    baseline = outside_table.current_snapshot().snapshot_id
    outside_table.append(_rows(2), snapshot_properties=TAG)
    wanted = outside_table.current_snapshot().snapshot_id
    outside_table.append(_rows(4))  # untagged
    outside_table.delete("id >= 0", snapshot_properties=TAG)  # not an append
    event = _first_event(_trigger(after_snapshot_id=baseline, operation="append", summary=TAG))
    assert (event["snapshot_id"], event["operation"], event["summary"]["writer"]) == (
        wanted,
        "append",
        "outside-airflow",
    )
    assert event["table"] == "db.t" and event["status"] == "success"
    assert event["matching_snapshot_ids"] == [wanted]


def test_by_default_only_commits_after_the_trigger_starts_count(outside_table):
    async def scenario():
        events = _trigger().run()
        waiting = asyncio.ensure_future(events.__anext__())
        await asyncio.sleep(0.5)  # the trigger has fixed its baseline: the existing snapshot
        assert not waiting.done()
        await asyncio.to_thread(outside_table.append, _rows(2))
        return (await asyncio.wait_for(waiting, 30)).payload

    event = asyncio.run(scenario())
    assert event["snapshot_id"] == outside_table.current_snapshot().snapshot_id


def test_watches_a_branch(outside_table):
    main = outside_table.current_snapshot().snapshot_id
    outside_table.manage_snapshots().create_branch(main, "audit").commit()
    outside_table.append(_rows(2), branch="audit")
    audit_head = outside_table.refresh().metadata.refs["audit"].snapshot_id
    event = _first_event(_trigger(after_snapshot_id=main, branch="audit"))
    assert event["snapshot_id"] == audit_head != outside_table.current_snapshot().snapshot_id


def test_serializes_to_the_arguments_it_was_built_with():
    trigger = _trigger(after_snapshot_id="5", operation=["append", "overwrite"], summary=TAG, branch="b")
    path, kwargs = trigger.serialize()
    assert path == "airflow_iceberg.triggers.snapshot.IcebergSnapshotTrigger"
    assert IcebergSnapshotTrigger(**kwargs).serialize() == (path, kwargs)
    assert kwargs["after_snapshot_id"] == 5 and json.dumps(kwargs)


def test_sensor_defers_with_the_head_as_baseline_and_returns_the_event(outside_table):
    from airflow.sdk.exceptions import TaskDeferred

    sensor = IcebergSnapshotSensor(
        task_id="s", table="db.t", iceberg_conn_id="sql_catalog", operation="append"
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert trigger.after_snapshot_id == outside_table.current_snapshot().snapshot_id
    assert trigger.operation == ["append"] and deferred.value.method_name == "execute_complete"
    assert (
        sensor.execute_complete({}, {"status": "success", "snapshot_id": 1, "operation": "append"})[
            "snapshot_id"
        ]
        == 1
    )


def test_sensor_in_poke_mode(outside_table):
    sensor = IcebergSnapshotSensor(task_id="s", table="db.t", iceberg_conn_id="sql_catalog", deferrable=False)
    sensor._baseline_id = sensor._baseline()
    assert not sensor.poke({}).is_done
    outside_table.append(_rows(2))
    assert sensor.poke({}).xcom_value["snapshot_id"] == outside_table.current_snapshot().snapshot_id


def test_jdbc_urls_become_sqlalchemy_urls_and_unsupported_catalogs_are_refused():
    assert sqlalchemy_url("jdbc:sqlite:/data/cat.db") == "sqlite:////data/cat.db"
    assert sqlalchemy_url("jdbc:postgresql://db:5432/ice?sslmode=require", "u", "p@ss") == (
        "postgresql+psycopg2://u:p%40ss@db:5432/ice"
    )
    nessie = config_from_fields(
        {"catalog_type": "nessie", "warehouse": "/w"}, host="http://nessie:19120/api/v2"
    )
    with pytest.raises(InvalidCatalogConfigError, match="cannot be read with pyiceberg"):
        pyiceberg_properties(nessie)


def test_hadoop_tables_are_read_through_the_version_hint(tmp_path):
    from pyiceberg.catalog.sql import SqlCatalog

    # lay a table out as a Hadoop catalog does: <warehouse>/db/t/metadata/vN.metadata.json + version-hint
    catalog = SqlCatalog("x", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=_rows(0).schema, location=f"file://{tmp_path}/hadoop/db/t")
    table.append(_rows(0))
    metadata = tmp_path / "hadoop" / "db" / "t" / "metadata"
    newest = sorted(metadata.glob("*.metadata.json"), key=lambda p: p.stat().st_mtime)[-1]
    newest.rename(metadata / "v2.metadata.json")
    config = config_from_fields({"catalog_type": "hadoop", "warehouse": f"file://{tmp_path}/hadoop"})
    expected = table.current_snapshot().snapshot_id
    assert load_table(config, "db.t").current_snapshot().snapshot_id == expected  # newest vN, no hint
    (metadata / "version-hint.text").write_text("2\n")
    assert load_table(config, "db.t").current_snapshot().snapshot_id == expected


def test_the_sensors_reader_finds_real_world_names_in_a_sql_catalog(tmp_path):
    """A nested namespace with a dash, an upper-case non-ASCII table: written with backticks or bare."""
    from pyiceberg.catalog.sql import SqlCatalog

    database, warehouse = tmp_path / "catalog.db", f"file://{tmp_path}"
    catalog = SqlCatalog("lake", uri=f"sqlite:///{database}", warehouse=warehouse)
    catalog.create_namespace(("emea", "sales-eu"))
    table = catalog.create_table(("emea", "sales-eu", "Commandes_été"), schema=_rows(0).schema)
    table.append(_rows(0))
    config = config_from_fields(
        {"catalog_name": "lake", "catalog_type": "jdbc", "warehouse": warehouse},
        host=f"jdbc:sqlite:{database}",
    )
    expected = table.current_snapshot().snapshot_id
    for written in (
        "lake.emea.`sales-eu`.Commandes_été",
        "emea.sales-eu.Commandes_été",
        "`emea`.`sales-eu`.`Commandes_été`",
    ):
        assert load_table(config, written).current_snapshot().snapshot_id == expected, written

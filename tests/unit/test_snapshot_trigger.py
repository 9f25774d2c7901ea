"""The snapshot trigger and sensor against a real pyiceberg SQL catalog on SQLite (no Spark, no mocks).

The catalog is written by pyiceberg, as any writer outside Airflow would; the trigger reads it
from an ``iceberg_catalog`` connection of type jdbc, the same one Spark would use.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sqlite3
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pyarrow as pa
import pytest
import structlog

from airflow_iceberg.catalog.config import config_from_fields
from airflow_iceberg.catalog.pyiceberg_tables import (
    load_table,
    pyiceberg_properties,
    sqlalchemy_url,
)
from airflow_iceberg.catalog.transient_errors import is_transient_error
from airflow_iceberg.exceptions import IcebergJobError, InvalidCatalogConfigError
from airflow_iceberg.sensors.snapshot import BASELINE_KEY, IcebergSnapshotSensor
from airflow_iceberg.triggers.snapshot import IcebergSnapshotTrigger, retry_delay

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
    trigger = _trigger()
    empty_polls = []  # polls are counted, not timed: a loaded machine polls late
    poll = trigger.poll

    def counted(*args):
        found = poll(*args)
        if found is None:
            empty_polls.append(args)
        return found

    trigger.poll = counted

    async def scenario():
        events = trigger.run()
        waiting = asyncio.ensure_future(events.__anext__())
        while len(empty_polls) < 2 and not waiting.done():  # baseline fixed, polled past it twice
            await asyncio.sleep(0.01)
        assert not waiting.done(), waiting.result().payload
        await asyncio.to_thread(outside_table.append, _rows(2))
        return (await asyncio.wait_for(waiting, 30)).payload

    existing = outside_table.current_snapshot().snapshot_id
    event = asyncio.run(asyncio.wait_for(scenario(), 60))
    appended = outside_table.current_snapshot().snapshot_id
    assert event["snapshot_id"] == appended
    assert event["matching_snapshot_ids"] == [appended], f"{existing} counted as new"


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
    sensor._baseline_id = sensor.baseline({})
    assert not sensor.poke({}).is_done
    outside_table.append(_rows(2))
    assert sensor.poke({}).xcom_value["snapshot_id"] == outside_table.current_snapshot().snapshot_id


def test_jdbc_urls_become_sqlalchemy_urls_and_unsupported_catalogs_are_refused():
    assert sqlalchemy_url("jdbc:sqlite:/data/cat.db") == "sqlite:////data/cat.db"
    assert sqlalchemy_url("jdbc:postgresql://db:5432/ice?sslmode=require", "u", "p@ss") == (
        "postgresql+psycopg2://u:p%40ss@db:5432/ice?sslmode=require"
    )
    # a catalog in its own schema, several hosts, pgjdbc's own form: what psycopg2 is given
    import sqlalchemy

    for jdbc_url, expected in (
        (
            "jdbc:postgresql://db/ice?currentSchema=team_b&connectTimeout=3&prepareThreshold=0",
            {
                "host": "db",
                "port": 5432,
                "dbname": "ice",
                "options": "-c search_path=team_b",
                "connect_timeout": "3",
            },
        ),
        (
            "jdbc:postgresql://a,[::1]:5433/ice?options=-c%20statement_timeout%3D0&currentSchema=s",
            {
                "host": "a,::1",
                "port": "5432,5433",
                "dbname": "ice",
                "options": "-c statement_timeout=0 -c search_path=s",
            },
        ),
        ("jdbc:postgresql:ice", {"host": "localhost", "port": 5432, "dbname": "ice"}),
    ):
        url = sqlalchemy.make_url(sqlalchemy_url(jdbc_url, "u", "p"))
        _, connect_args = sqlalchemy.create_engine(url).dialect.create_connect_args(url)
        assert connect_args == {**expected, "user": "u", "password": "p"}, jdbc_url
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


# --------------------------------------------------------------------------- the sensor's baseline


class DictStateStore:
    """Airflow 3.3's task state store (``get``/``set``, JSON values) over a dict.

    The real accessor talks to the task supervisor, which only runs under a real task runner;
    the integration test ``test_assets_and_lineage`` runs the sensor against the real one.
    """

    def __init__(self) -> None:
        self.values: dict[str, object] = {}

    def get(self, key, default=None):
        return self.values.get(key, default)

    def set(self, key, value, *, retention=None):
        assert value is not None
        self.values[key] = json.loads(json.dumps(value))


class FakeTaskInstance:
    """What the sensor and Airflow's reschedule loop read from a task instance."""

    def __init__(self, max_tries: int = 0, first_reschedule_date: datetime | None = None) -> None:
        self.max_tries = max_tries
        self.first_reschedule_date = first_reschedule_date

    def get_first_reschedule_date(self, context):
        return self.first_reschedule_date


def _rescheduled_sensor(**kwargs) -> IcebergSnapshotSensor:
    return IcebergSnapshotSensor(
        task_id="s",
        table="db.t",
        iceberg_conn_id="sql_catalog",
        deferrable=False,
        mode="reschedule",
        **kwargs,
    )


def _poke(sensor: IcebergSnapshotSensor, context: dict):
    """One reschedule-mode poke as the task runner runs it: ``execute``, which reschedules or returns."""
    from airflow.sdk.exceptions import AirflowRescheduleException

    try:
        return sensor.execute(context)
    except AirflowRescheduleException:
        return None


def test_in_reschedule_mode_a_commit_between_two_pokes_is_reported(outside_table):
    baseline = outside_table.current_snapshot().snapshot_id
    context = {"ti": FakeTaskInstance(), "task_state_store": DictStateStore()}
    assert _poke(_rescheduled_sensor(), context) is None  # first poke: nothing new; baseline stored
    outside_table.append(_rows(2))  # lands while no poke runs
    committed = outside_table.current_snapshot().snapshot_id
    found = _poke(_rescheduled_sensor(), context)  # a new poke is a new execute(), as in Airflow
    assert found is not None and found["snapshot_id"] == committed
    assert found["parent_snapshot_id"] == baseline and found["matching_snapshot_ids"] == [committed]
    assert context["task_state_store"].values[BASELINE_KEY]["snapshot_id"] == baseline


def test_a_retry_keeps_the_baseline_but_a_cleared_sensor_waits_afresh(outside_table):
    store = DictStateStore()
    retries = 2
    first_try = FakeTaskInstance(max_tries=retries)  # first try since the last clear: 1
    assert _poke(_rescheduled_sensor(retries=retries), {"ti": first_try, "task_state_store": store}) is None
    outside_table.append(_rows(2))
    committed = outside_table.current_snapshot().snapshot_id
    # a retry (max_tries unchanged) finds the commit made before it started
    retry = {"ti": FakeTaskInstance(max_tries=retries), "task_state_store": store}
    assert _poke(_rescheduled_sensor(retries=retries), retry)["snapshot_id"] == committed
    # a clear sets max_tries = try_number + retries: a new generation, so the current head is the baseline
    cleared = {"ti": FakeTaskInstance(max_tries=1 + retries), "task_state_store": store}
    assert _poke(_rescheduled_sensor(retries=retries), cleared) is None
    assert store.values[BASELINE_KEY]["snapshot_id"] == committed


def test_a_deferred_sensor_retried_defers_again_from_its_first_baseline(outside_table):
    from airflow.sdk.exceptions import TaskDeferred

    baseline = outside_table.current_snapshot().snapshot_id
    context = {"ti": FakeTaskInstance(), "task_state_store": DictStateStore()}
    sensor = IcebergSnapshotSensor(task_id="s", table="db.t", iceberg_conn_id="sql_catalog")
    with pytest.raises(TaskDeferred):
        sensor.execute(context)
    outside_table.append(_rows(2))  # e.g. while the triggerer was down and the task was retried
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(context)
    assert deferred.value.trigger.after_snapshot_id == baseline


def test_without_a_state_store_a_reschedule_waits_from_the_head_at_its_first_poke(outside_table):
    """Airflow < 3.3: the head when the first poke started, read back from the table's snapshot log."""
    head = outside_table.current_snapshot()
    first_poke = datetime.fromtimestamp(head.timestamp_ms / 1000, tz=timezone.utc)
    assert _poke(_rescheduled_sensor(), {"ti": FakeTaskInstance()}) is None  # first poke: head now
    outside_table.append(_rows(2))
    committed = outside_table.current_snapshot().snapshot_id
    later = {"ti": FakeTaskInstance(first_reschedule_date=first_poke)}
    assert _poke(_rescheduled_sensor(), later)["snapshot_id"] == committed


# --------------------------------------------------------------------------- catalog outages


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens here once the socket is closed


@pytest.fixture
def unreachable_catalog(iceberg_connection, tmp_path):
    """A PostgreSQL JDBC catalog whose server refuses connections, as one that is down does."""
    return iceberg_connection(
        "down",
        host=f"jdbc:postgresql://127.0.0.1:{_closed_port()}/iceberg",
        login="iceberg",
        password="secret",
        extra={"catalog_name": "lake", "catalog_type": "jdbc", "warehouse": f"file://{tmp_path}"},
    )


def test_transient_errors_are_told_from_configuration_errors(tmp_path):
    import psycopg2
    import sqlalchemy
    from pyiceberg.catalog.hive import HiveCatalog
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import ServerError, UnauthorizedError

    port = _closed_port()

    def raised(call):
        try:
            call()
        except Exception as error:
            return error
        raise AssertionError(f"{call} did not fail")

    transient = [  # each raised by the real client against a port where nothing listens
        raised(lambda: socket.create_connection(("127.0.0.1", port), timeout=5)),
        raised(
            lambda: psycopg2.connect(host="127.0.0.1", port=port, dbname="x", user="u", connect_timeout=5)
        ),
        raised(lambda: sqlalchemy.create_engine(f"postgresql+psycopg2://u@127.0.0.1:{port}/x").connect()),
        raised(lambda: HiveCatalog("h", uri=f"thrift://127.0.0.1:{port}").list_namespaces()),
        raised(lambda: RestCatalog("r", uri=f"http://127.0.0.1:{port}")),
        ServerError("RESTError 503: the catalog is restarting"),
    ]
    for error in transient:
        assert is_transient_error(error), repr(error)
    configuration = [
        raised(lambda: SqlCatalog("s", uri=f"sqlite:///{tmp_path}/missing/dir/c.db", warehouse="file:///w")),
        UnauthorizedError("RESTError 401: invalid credentials"),
        InvalidCatalogConfigError("Iceberg catalog connection field 'host': ..."),
        PermissionError(13, "Permission denied", "/wh/db/t/metadata"),
    ]
    for error in configuration:
        assert not is_transient_error(error), repr(error)


def test_the_trigger_retries_a_down_catalog_with_backoff_then_reports_why_it_gave_up(unreachable_catalog):
    trigger = IcebergSnapshotTrigger(
        table="db.t",
        iceberg_conn_id=unreachable_catalog,
        after_snapshot_id=1,
        poll_interval=0.01,
        poll_retries=3,
        error_event=True,
    )
    with structlog.testing.capture_logs() as logs:
        event = _first_event(trigger)
    assert event["status"] == "error" and event["failed_polls"] == 4 and event["after_snapshot_id"] == 1
    assert event["message"].startswith("gave up waiting for a snapshot of db.t: the catalog failed 4 polls")
    assert "OperationalError" in event["message"] and "Connection refused" in event["message"]
    retries = [e["event"] for e in logs if e["log_level"] == "warning"]
    assert [r.split(" in ")[0].split("; ")[-1] for r in retries] == [
        "retry 1 of 3",
        "retry 2 of 3",
        "retry 3 of 3",
    ]
    assert [retry_delay(0.01, n) for n in (1, 2, 3)] == [0.01, 0.02, 0.04]
    assert retry_delay(60, 10) == 300 and retry_delay(900, 3) == 900  # capped, but never below the interval


def test_a_trigger_watching_for_an_asset_raises_instead_of_yielding_an_error(unreachable_catalog):
    import sqlalchemy

    trigger = IcebergSnapshotTrigger(
        table="db.t", iceberg_conn_id=unreachable_catalog, poll_interval=0.01, poll_retries=1
    )
    with pytest.raises(sqlalchemy.exc.OperationalError, match="Connection refused"):
        _first_event(trigger)


def test_a_configuration_error_fails_the_trigger_at_once(iceberg_connection, tmp_path):
    import sqlalchemy

    conn_id = iceberg_connection(
        "no_such_directory",
        host=f"jdbc:sqlite:{tmp_path}/missing/catalog.db",
        extra={"catalog_name": "lake", "catalog_type": "jdbc", "warehouse": f"file://{tmp_path}"},
    )
    trigger = IcebergSnapshotTrigger(table="db.t", iceberg_conn_id=conn_id, poll_interval=0.01)
    with structlog.testing.capture_logs() as logs, pytest.raises(sqlalchemy.exc.OperationalError):
        _first_event(trigger)
    assert not [e for e in logs if e["log_level"] == "warning"]  # not retried


def test_the_sensor_fails_with_the_triggers_reason_when_it_gave_up():
    sensor = IcebergSnapshotSensor(task_id="s", table="db.t", iceberg_conn_id="sql_catalog")
    assert sensor._trigger(None).error_event is True
    event = {"status": "error", "message": "gave up waiting for a snapshot of db.t: ...", "failed_polls": 11}
    with pytest.raises(IcebergJobError, match=r"of db.t failed: gave up waiting for a snapshot of db.t"):
        sensor.execute_complete({}, event)


def test_a_poke_that_finds_the_catalog_down_is_not_yet_done(unreachable_catalog):
    sensor = IcebergSnapshotSensor(
        task_id="s", table="db.t", iceberg_conn_id=unreachable_catalog, after_snapshot_id=1, deferrable=False
    )
    sensor._baseline_id = 1
    with structlog.testing.capture_logs() as logs:
        assert sensor.poke({}).is_done is False
    (warning,) = [e["event"] for e in logs if e["log_level"] == "warning"]
    assert warning.startswith("Could not read db.t (OperationalError:") and "next poke" in warning


# --------------------------------------------------------------------------- commits a baseline must not hide


@pytest.mark.parametrize("format_version", ["1", "2"])
def test_a_commit_after_a_rollback_is_reported_on_format_v1_and_v2(outside_table, format_version):
    """Format v1 snapshots have no sequence number (pyiceberg reads 0 for all of them), so once the
    baseline is no longer an ancestor of the head (a rollback, a replace) a walk that compares
    sequence numbers stops at the first snapshot: that commit, and every later one, was missed.
    Tables made by Iceberg before 1.4, and any created with format-version 1, are v1."""
    catalog = outside_table.catalog
    table = catalog.create_table(
        f"db.v{format_version}", schema=_rows(0).schema, properties={"format-version": format_version}
    )
    table.append(_rows(0))
    before = table.current_snapshot().snapshot_id
    table.append(_rows(2))
    sensor = IcebergSnapshotSensor(
        task_id="s", table=f"db.v{format_version}", iceberg_conn_id="sql_catalog", deferrable=False
    )
    sensor._baseline_id = sensor.baseline({})  # the head when the sensor starts
    table.manage_snapshots().rollback_to_snapshot(before).commit()  # e.g. IcebergRollbackOperator
    assert not sensor.poke({}).is_done  # a rollback is not a new snapshot
    table.append(_rows(4))  # a real commit after the baseline
    committed = table.current_snapshot().snapshot_id
    found = sensor.poke({})
    assert found.is_done and found.xcom_value["snapshot_id"] == committed
    assert found.xcom_value["matching_snapshot_ids"] == [committed]
    table.append(_rows(6))  # and every commit after it
    later = sensor.poke({})
    assert later.is_done and later.xcom_value["matching_snapshot_ids"] == [
        committed,
        table.current_snapshot().snapshot_id,
    ]


def test_a_branch_made_after_the_sensor_started_does_not_report_mains_old_snapshots(outside_table):
    """A sensor on ``branch="audit"`` that starts before the branch exists takes the table's newest
    snapshot as baseline, not "none" (every snapshot counts). The project's own branch writes
    create the branch from main's head first (its own metadata commit) and write after; a poll in
    between used to report main's head, committed before the sensor started, as the branch's
    new commit (and ``matching_snapshot_ids`` listed main's whole history)."""
    outside_table.append(_rows(2), snapshot_properties={"writer": "nightly"})
    old = outside_table.current_snapshot().snapshot_id
    context = {"ti": FakeTaskInstance(), "task_state_store": DictStateStore()}
    sensor = _rescheduled_sensor(branch="audit", operation="append")
    sensor._baseline_id = sensor.baseline(context)
    assert sensor._baseline_id == old
    outside_table.manage_snapshots().create_branch(old, "audit").commit()  # the write's first step
    found = sensor.poke(context)
    assert not found.is_done, f"reported {found.xcom_value['snapshot_id']} (main's head before the start)"
    outside_table.append(_rows(4), branch="audit")  # the write itself
    written = outside_table.refresh().metadata.refs["audit"].snapshot_id
    found = sensor.poke(context)
    assert found.is_done and found.xcom_value["matching_snapshot_ids"] == [written]


# --------------------------------------------------------------------------- the baseline through an outage


@pytest.fixture
def flaky_catalog(iceberg_connection, tmp_path, outside_table):
    """One connection id, first on a catalog that refuses connections, then (``.back()``) on the real one."""
    down = {
        "host": f"jdbc:postgresql://127.0.0.1:{_closed_port()}/iceberg",
        "login": "iceberg",
        "password": "secret",
        "extra": {"catalog_name": "lake", "catalog_type": "jdbc", "warehouse": f"file://{tmp_path}"},
    }
    up = json.loads(os.environ["AIRFLOW_CONN_SQL_CATALOG"])

    class Flaky:
        conn_id = iceberg_connection("flaky", **down)

        @staticmethod
        def back() -> None:
            iceberg_connection("flaky", **{k: v for k, v in up.items() if k != "conn_type"})

    return Flaky


def test_a_deferrable_sensor_started_during_a_catalog_outage_waits_it_out(flaky_catalog, outside_table):
    """The docs: "A catalog outage ... is waited out". The baseline was read in ``execute()`` before
    deferring, outside any retry, so a sensor that started while the catalog was down failed at
    once. Now it defers with a pending baseline: the trigger takes the head the table had when the
    sensor started, once the catalog answers, so a commit made during the outage is reported."""
    from airflow.sdk.exceptions import TaskDeferred

    context = {"ti": FakeTaskInstance(), "task_state_store": DictStateStore()}
    sensor = IcebergSnapshotSensor(task_id="s", table="db.t", iceberg_conn_id=flaky_catalog.conn_id)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(context)
    trigger = deferred.value.trigger
    started = context["task_state_store"].values[BASELINE_KEY]["pending_since_ms"]
    assert trigger.after_snapshot_id is None and trigger.baseline_at_ms == started
    outside_table.append(_rows(2))  # during the outage, after the sensor started
    committed = outside_table.current_snapshot().snapshot_id
    flaky_catalog.back()
    _, kwargs = trigger.serialize()  # as the triggerer runs it
    event = _first_event(IcebergSnapshotTrigger(**{**kwargs, "poll_interval": 0.05}))
    assert event["status"] == "success" and event["matching_snapshot_ids"] == [committed]
    with pytest.raises(TaskDeferred) as again:  # a retry defers with the same pending baseline
        sensor.execute(context)
    assert again.value.trigger.baseline_at_ms == started


@pytest.mark.parametrize("with_a_state_store", [True, False], ids=["first-poke", "without-a-state-store"])
def test_a_rescheduled_poke_that_finds_the_catalog_down_is_not_yet_done(
    flaky_catalog, outside_table, with_a_state_store
):
    """The docs: "a poke counts the outage as 'not yet'". In reschedule mode every poke is an
    ``execute()`` that first reads the baseline: on the first poke (state store) and on every poke
    without a state store (Airflow < 3.3), an outage failed the try instead of rescheduling it.
    Once the catalog answers, the baseline is the head at the sensor's start: the commit made
    during the outage is the one reported."""
    from airflow.sdk.exceptions import AirflowRescheduleException

    head = outside_table.current_snapshot().snapshot_id
    started = datetime.now(timezone.utc)
    store = {"task_state_store": DictStateStore()} if with_a_state_store else {}
    sensor = IcebergSnapshotSensor(
        task_id="s", table="db.t", iceberg_conn_id=flaky_catalog.conn_id, deferrable=False, mode="reschedule"
    )
    with pytest.raises(AirflowRescheduleException):
        sensor.execute({"ti": FakeTaskInstance(), **store})
    outside_table.append(_rows(2))  # during the outage
    committed = outside_table.current_snapshot().snapshot_id
    flaky_catalog.back()
    later = {"ti": FakeTaskInstance(first_reschedule_date=started), **store}
    found = _poke(
        IcebergSnapshotSensor(
            task_id="s",
            table="db.t",
            iceberg_conn_id=flaky_catalog.conn_id,
            deferrable=False,
            mode="reschedule",
        ),
        later,
    )
    assert found is not None and found["matching_snapshot_ids"] == [committed]
    if with_a_state_store:
        assert store["task_state_store"].values[BASELINE_KEY]["snapshot_id"] == head


def test_a_pending_baseline_is_the_head_the_table_had_when_the_wait_started(outside_table):
    first = outside_table.current_snapshot()
    outside_table.append(_rows(2))
    second = outside_table.current_snapshot()
    # the wait "started" between the two commits: the second is new, the first is the baseline
    started_ms = (first.timestamp_ms + second.timestamp_ms) // 2
    event = _first_event(_trigger(baseline_at_ms=started_ms))
    assert event["matching_snapshot_ids"] == [second.snapshot_id]


# --------------------------------------------------------------------------- S3 answers as S3 does


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


#: The S3 keys go in Secret properties: Airflow shows catalog properties in clear.
S3_SECRETS = {"s3.access-key-id": "k", "s3.secret-access-key": "s"}


def test_s3_throttling_the_metadata_read_is_waited_out(
    outside_table, tmp_path, iceberg_connection, throttling_s3
):
    """A SQL (or Hive, or Glue) catalog keeps its tables' metadata on S3, read by pyarrow's S3
    client. S3's 503 SlowDown is the textbook transient error, but pyarrow reports it as
    ``OSError: ... AWS Error UNKNOWN (HTTP status 503)`` with no errno: the trigger took it for a
    configuration error and failed the deferred sensor at once."""
    baseline = outside_table.current_snapshot().snapshot_id
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
            "catalog_properties": {"s3.endpoint": throttling_s3, "s3.region": "us-east-1"},
            "secret_properties": S3_SECRETS,
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
    with structlog.testing.capture_logs() as logs:
        event = _first_event(trigger, timeout=120)
    assert event["status"] == "error" and event["failed_polls"] == 2  # retried, then gave up
    assert "HTTP status 503" in event["message"]
    assert [e["event"].split("; ")[-1].split(" in ")[0] for e in logs if e["log_level"] == "warning"] == [
        "retry 1 of 1"
    ]


def test_a_hadoop_table_whose_store_throttles_is_an_outage_not_a_missing_table(
    iceberg_connection, throttling_s3
):
    """A 503 on the version hint and on the listing of ``metadata/`` is the store, not "no table"."""
    config = config_from_fields(
        {
            "catalog_type": "hadoop",
            "warehouse": "s3://lake/wh",
            "catalog_properties": {"s3.endpoint": throttling_s3, "s3.region": "us-east-1"},
            "secret_properties": S3_SECRETS,
        }
    )
    with pytest.raises(OSError, match="HTTP status 503") as raised:
        load_table(config, "db.t")
    assert is_transient_error(raised.value)


def test_the_hadoop_readers_listing_fallback_uses_the_connections_s3_endpoint(empty_s3):
    """Without ``version-hint.text`` (Iceberg deletes and renames it at every commit, so a poll can
    land between the two) the reader lists ``metadata/``. It did so with
    ``pyarrow.fs.FileSystem.from_uri``, which knows nothing of the connection's ``s3.endpoint`` or
    keys: for MinIO, SeaweedFS or any S3-compatible store it asked AWS itself, and what AWS
    answered (unknown bucket, access denied) made the table read as missing."""
    endpoint, seen = empty_s3
    config = config_from_fields(
        {
            "catalog_type": "hadoop",
            "warehouse": "s3://lake/wh",
            "catalog_properties": {"s3.endpoint": endpoint, "s3.region": "us-east-1"},
            "secret_properties": S3_SECRETS,
        }
    )
    from pyiceberg.exceptions import NoSuchTableError

    with pytest.raises(NoSuchTableError) as raised:
        load_table(config, "db.t")
    listings = [request for request in seen if "list-type" in request or "prefix=" in request]
    assert listings, f"the listing never reached {endpoint} (it saw {seen}); it failed with {raised.value!r}"
    assert all("prefix=wh%2Fdb%2Ft%2Fmetadata" in request for request in listings), listings

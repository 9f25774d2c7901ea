"""Iceberg tables as Airflow assets, end to end, on a real deployment (not ``airflow dags test``).

One producer run commits to ``db.events``; the real scheduler turns its asset event into exactly
one run of a consumer DAG scheduled on the table's asset, which reads exactly the committed
snapshot. The same runs are checked for OpenLineage (file transport, read back) and for the
apache-spark provider's parent-job injection. pyiceberg, reading the table's own metadata, is
the independent witness of which snapshot was committed.

Last, the triggerer is stopped and started again between commits to a table an ``AssetWatcher``
watches: every commit becomes exactly one asset event, those made while it was stopped included,
and a restart without commits reports nothing (the watermark is kept in the asset state store).

Meanwhile a deferrable snapshot sensor waits in the real triggerer for a commit made outside
Airflow, by pyiceberg into a SQL (JDBC) catalog: commits that fail its filters do not wake it.
A second sensor waits in reschedule mode, each poke a new task process: the commit made between
two of its pokes is the one it reports (its baseline is kept in Airflow's task state store).
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from airflow.models.connection import Connection

from airflow_iceberg.catalog.config import config_from_connection
from airflow_iceberg.catalog.pyiceberg_tables import load_table as pyiceberg_load_table
from scripts.show_table import load_table
from tests.docs_snippets import documented_keys, snippet
from tests.integration.airflow_runner import REPO, hadoop_catalog_connection, spark_connection
from tests.integration.airflow_services import AirflowDeployment
from tests.openlineage_validation import validate_event

ASSET_DAGS = REPO / "tests" / "integration" / "asset_dags"
PRODUCER, CONSUMER = "iceberg_asset_producer", "iceberg_asset_consumer"
SENSOR, SENSOR_TASK = "iceberg_snapshot_sensor", "wait_for_tagged_append"
RESCHEDULED, RESCHEDULED_TASK = "iceberg_snapshot_sensor_rescheduled", "wait_between_pokes"
WATCHER = "iceberg_asset_watcher"
WATERMARKED_URI = "iceberg://jdbc/db/watermarked%"
TAG = {"writer": "outside-airflow"}
RUN_TIMEOUT_SECONDS = 300


def _outside_catalog(folder: Path):
    """A SQLite-backed SQL catalog, written by pyiceberg alone, and its Airflow connection."""
    from pyiceberg.catalog.sql import SqlCatalog

    database, warehouse = folder / "catalog.db", folder / "warehouse"
    warehouse.mkdir()
    catalog = SqlCatalog("lake", uri=f"sqlite:///{database}", warehouse=f"file://{warehouse}")
    connection = {
        "conn_type": "iceberg_catalog",
        "host": f"jdbc:sqlite:{database}",
        "extra": {
            "catalog_name": "lake",
            "catalog_type": "jdbc",
            "warehouse": f"file://{warehouse}",
            "runtime_jar": os.environ["ICEBERG_RUNTIME_JAR"],
        },
    }
    return catalog, connection


def _rows(start: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + 3), pa.int64())})


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    home = tmp_path_factory.mktemp("airflow_deployment")
    warehouse = tmp_path_factory.mktemp("asset_warehouse")
    lineage_file = home / "openlineage.jsonl"
    outside_folder = tmp_path_factory.mktemp("outside")
    outside, sql_connection = _outside_catalog(outside_folder)
    outside.create_namespace("db")
    external = outside.create_table("db.external", schema=_rows(0).schema)
    external.append(_rows(0))  # the sensor waits for a commit after this one
    rescheduled = outside.create_table("db.rescheduled", schema=_rows(0).schema)
    rescheduled.append(_rows(0))  # the reschedule-mode sensor's baseline
    outside.create_table("db.watermarked", schema=_rows(0).schema).append(_rows(0))  # the watcher's start
    env = {
        **os.environ,
        "AIRFLOW_CONN_SQL_CATALOG": json.dumps(sql_connection),
        "ASSET_TEST_SQL_DB": str(outside_folder / "catalog.db"),
        "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT": json.dumps(hadoop_catalog_connection(warehouse)),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark_connection()),
        # written as a user would write it; Airflow normalises it through our sanitize handler
        "ASSET_TEST_WAREHOUSE": f"file://{warehouse}/",
        "ICEBERG_DEMO_WAREHOUSE": f"file://{warehouse}",  # the example DAG's consumer asset
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(lineage_file), "append": True}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "airflow-iceberg-test",
        "AIRFLOW__OPENLINEAGE__SPARK_INJECT_PARENT_JOB_INFO": "True",
    }
    with AirflowDeployment.running(home, ASSET_DAGS, env) as airflow:
        airflow.wait_for_dags(PRODUCER, CONSUMER)
        started = time.monotonic()
        airflow.cli("dags", "trigger", SENSOR)
        airflow.cli("dags", "trigger", RESCHEDULED)
        airflow.cli("dags", "trigger", PRODUCER)
        airflow.wait_for(
            lambda: _sensor_state(airflow) == "deferred", "the sensor to defer", RUN_TIMEOUT_SECONDS
        )
        # the reschedule-mode sensor has poked at least once and waits for its next poke: commit now
        airflow.wait_for(
            lambda: _between_two_pokes(airflow), "the reschedule-mode sensor to wait", RUN_TIMEOUT_SECONDS
        )
        rescheduled.append(_rows(12))
        between_pokes = (rescheduled.current_snapshot().snapshot_id, _rescheduled_pokes(airflow))
        # commits that fail the filters (untagged append; tagged delete) must not wake it
        external.append(_rows(3))
        external.delete("id >= 0", snapshot_properties=TAG)
        time.sleep(8)  # four polls
        assert _sensor_state(airflow) == "deferred", airflow.task_log(SENSOR, SENSOR_TASK)[-5000:]
        external.append(_rows(9), snapshot_properties=TAG)
        tagged = external.current_snapshot().snapshot_id
        outside_commits = [s.snapshot_id for s in external.snapshots()][1:]
        assert airflow.wait_for_dag_run(PRODUCER, RUN_TIMEOUT_SECONDS)[1] == "success", airflow.logs()
        assert airflow.wait_for_dag_run(CONSUMER, RUN_TIMEOUT_SECONDS)[1] == "success", (
            airflow.task_log(CONSUMER, "read_triggering_snapshot")[-5000:] + airflow.logs()
        )
        assert airflow.wait_for_dag_run(SENSOR, RUN_TIMEOUT_SECONDS)[1] == "success", (
            airflow.task_log(SENSOR, SENSOR_TASK)[-5000:] + airflow.logs()
        )
        assert airflow.wait_for_dag_run(RESCHEDULED, RUN_TIMEOUT_SECONDS)[1] == "success", (
            airflow.task_log(RESCHEDULED, RESCHEDULED_TASK)[-5000:] + airflow.logs()
        )
        print(f"producer, consumer and sensor finished in {time.monotonic() - started:.0f}s")
        airflow.wait_for(lambda: airflow.dag_runs(WATCHER), "a run of the watcher DAG", RUN_TIMEOUT_SECONDS)
        yield airflow, warehouse, lineage_file, tagged, outside_commits, between_pokes


def _sensor_state(airflow: AirflowDeployment) -> str | None:
    return _state(airflow, SENSOR)


def _state(airflow: AirflowDeployment, dag_id: str) -> str | None:
    rows = airflow.query("SELECT state FROM task_instance WHERE dag_id = ?", dag_id)
    return rows[0][0] if rows else None


def _between_two_pokes(airflow: AirflowDeployment) -> bool:
    state = _state(airflow, RESCHEDULED)
    assert state not in ("failed", "success"), airflow.task_log(RESCHEDULED, RESCHEDULED_TASK)[-5000:]
    return state == "up_for_reschedule" and _rescheduled_pokes(airflow) >= 1


def _rescheduled_pokes(airflow: AirflowDeployment) -> int:
    """Pokes of the reschedule-mode sensor that ended in a reschedule (Airflow records each)."""
    rows = airflow.query(
        "SELECT COUNT(*) FROM task_reschedule JOIN task_instance ON task_instance.id = task_reschedule.ti_id "
        "WHERE task_instance.dag_id = ?",
        RESCHEDULED,
    )
    return rows[0][0] if rows else 0


HOURLY, DAILY, SETUP = (
    "iceberg_hourly_page_views",
    "iceberg_daily_page_view_report",
    "iceberg_page_views_setup",
)
#: The producer runs the test triggers, and the day each belongs to (the daily consumer's key).
HOURS = {"2024-01-02T05": "2024-01-02", "2024-01-03T07": "2024-01-03"}


def _runs_by_key(airflow: AirflowDeployment, dag_id: str) -> dict[str, list[tuple[str, str]]]:
    runs: dict[str, list[tuple[str, str]]] = {}
    for run_id, state, key in airflow.query(
        "SELECT run_id, state, partition_key FROM dag_run WHERE dag_id = ? ORDER BY id", dag_id
    ):
        runs.setdefault(key, []).append((run_id, state))
    return runs


def _finished(airflow: AirflowDeployment, dag_id: str, keys) -> dict[str, list[tuple[str, str]]] | None:
    runs = _runs_by_key(airflow, dag_id)
    done = all(k in runs and all(state in ("success", "failed") for _, state in runs[k]) for k in keys)
    return runs if done else None


@pytest.fixture(scope="module")
def partitioned_runs(deployment):
    """The example pair: two hourly producer runs on two days, then the daily consumer's runs.

    The producer's runs are triggered with their partition keys through the REST API, as a
    backfill or a re-delivery would. Its scheduler-made run (the latest hour) runs before the
    table exists and fails; it is not one of the keys checked.
    """
    airflow, warehouse, *_ = deployment
    airflow.wait_for_dags(SETUP, HOURLY, DAILY)
    started = time.monotonic()
    airflow.cli("dags", "trigger", SETUP)
    assert airflow.wait_for_dag_run(SETUP, RUN_TIMEOUT_SECONDS)[1] == "success", airflow.logs()
    for hour in HOURS:
        airflow.rest("POST", f"/api/v2/dags/{HOURLY}/dagRuns", {"logical_date": None, "partition_key": hour})
    produced = airflow.wait_for(
        lambda: _finished(airflow, HOURLY, HOURS), "the hourly runs", 2 * RUN_TIMEOUT_SECONDS
    )
    assert all(state == "success" for k in HOURS for _, state in produced[k]), (
        airflow.task_log(HOURLY, "load_hour")[-5000:] + airflow.logs()
    )
    consumed = airflow.wait_for(
        lambda: _finished(airflow, DAILY, HOURS.values()), "the daily runs", 2 * RUN_TIMEOUT_SECONDS
    )
    print(f"partitioned producer and consumer runs finished in {time.monotonic() - started:.0f}s")
    return airflow, warehouse, produced, consumed


def _read_of(airflow: AirflowDeployment, run_id: str) -> dict[str, Any]:
    ((value,),) = airflow.query(
        "SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = 'read_day' "
        "AND key = 'return_value'",
        DAILY,
        run_id,
    )
    return json.loads(value)


def test_each_day_the_hourly_commits_touched_is_one_consumer_run_that_reads_exactly_that_day(
    partitioned_runs,
):
    airflow, warehouse, _, consumed = partitioned_runs
    table = load_table(warehouse, "db.page_views")
    for day in HOURS.values():
        ((run_id, state),) = consumed[day]  # one run per day, each with the day as its key
        assert state == "success", airflow.task_log(DAILY, "read_day")[-5000:]
        read = _read_of(airflow, run_id)
        rows = table.scan(snapshot_id=read["snapshot_id"]).to_arrow().to_pylist()
        of_the_day = sorted(
            r["viewed_at"].replace(tzinfo=None) for r in rows if r["viewed_at"].date().isoformat() == day
        )
        assert len(rows) > len(of_the_day) == 12  # the other day was there too, and not read
        assert read["row_count"] == 12
        read_times = [
            datetime.fromisoformat(str(r["viewed_at"])).replace(tzinfo=None) for r in read["preview"]
        ]
        assert sorted(read_times) == of_the_day  # the job's session is in UTC, as the test's tables


def test_the_rest_api_shows_each_commits_hour_as_its_asset_events_partition_key(partitioned_runs):
    airflow, warehouse, produced, _ = partitioned_runs
    (asset,) = airflow.rest("GET", "/api/v2/assets?uri_pattern=db/page_views")["assets"]
    events = airflow.rest("GET", f"/api/v2/assets/events?asset_id={asset['id']}&limit=100")["asset_events"]
    by_key = {event["partition_key"]: event for event in events if event["source_dag_id"] == HOURLY}
    table = load_table(warehouse, "db.page_views")
    for hour in HOURS:
        event = by_key[hour]
        ((run_id, _),) = produced[hour]
        assert event["source_run_id"] == run_id
        committed = table.snapshot_by_id(event["extra"]["snapshot_id"])
        assert committed.summary["airflow-iceberg.commit-id"] == event["extra"]["commit_id"]
        assert event["extra"]["partition_count"] == 1


def test_the_sensor_fired_in_the_triggerer_on_the_outside_commit_that_passes_its_filters(deployment):
    airflow, _, _, tagged, *_ = deployment
    event = airflow.xcom(SENSOR, SENSOR_TASK)
    assert (event["snapshot_id"], event["operation"]) == (tagged, "append")
    assert event["summary"]["writer"] == "outside-airflow"


def test_the_rescheduled_sensor_reported_the_commit_made_between_two_of_its_pokes(deployment):
    airflow, *_, (committed, pokes_before_the_commit) = deployment
    event = airflow.xcom(RESCHEDULED, RESCHEDULED_TASK)
    assert event["snapshot_id"] == committed and event["matching_snapshot_ids"] == [committed]
    assert pokes_before_the_commit >= 1 and _rescheduled_pokes(airflow) >= pokes_before_the_commit
    ((stored,),) = airflow.query(
        "SELECT value FROM task_state_store WHERE dag_id = ? AND key = ?",
        RESCHEDULED,
        "airflow_iceberg.snapshot_sensor.baseline",
    )
    assert json.loads(stored)["snapshot_id"] == event["parent_snapshot_id"]  # the head at the first poke


def test_the_asset_watcher_turned_an_outside_commit_into_an_asset_event_and_a_run(deployment):
    airflow, *_, outside_commits, _ = deployment
    rows = airflow.query(
        "SELECT asset_event.extra FROM asset_event JOIN asset ON asset.id = asset_event.asset_id "
        "WHERE asset.uri LIKE 'iceberg://jdbc/db/external%'"
    )
    assert rows, "no asset event for db.external"
    payloads = [(e := json.loads(extra)).get("payload", e) for (extra,) in rows]
    assert all(p.get("snapshot_id") in outside_commits for p in payloads), (payloads, outside_commits)
    assert airflow.wait_for_dag_run(WATCHER, RUN_TIMEOUT_SECONDS)[1] == "success"


def test_pyiceberg_reads_a_hadoop_table_through_its_version_hint(deployment):
    _, warehouse, *_ = deployment
    connection = hadoop_catalog_connection(warehouse)
    config = config_from_connection(
        Connection(conn_id="x", conn_type=connection["conn_type"], extra=json.dumps(connection["extra"]))
    )
    table = pyiceberg_load_table(config, "demo.db.events")
    assert (
        table.current_snapshot().snapshot_id
        == load_table(warehouse, "db.events").current_snapshot().snapshot_id
    )


def test_a_commit_schedules_one_consumer_run_that_reads_that_snapshot(deployment):
    airflow, warehouse, *_ = deployment
    committed = load_table(warehouse, "db.events").current_snapshot().snapshot_id
    produced = airflow.xcom(PRODUCER, "create")
    assert produced["snapshot_id"] == committed

    ((uri, extra),) = airflow.query(
        "SELECT asset.uri, asset_event.extra FROM asset_event JOIN asset ON asset.id = asset_event.asset_id "
        "WHERE asset.uri LIKE 'iceberg://hadoop/db/events?%'"
    )
    assert uri == f"iceberg://hadoop/db/events?warehouse=file%3A%2F%2F{str(warehouse).replace('/', '%2F')}"
    extra = json.loads(extra)
    assert extra["snapshot_id"] == committed and extra["operation"] == produced["operation"]
    assert extra["commit_id"].startswith(f"{PRODUCER}:create:") and extra["total_records"] == 5

    read = airflow.xcom(CONSUMER, "read_triggering_snapshot")
    assert (read["snapshot_id"], read["row_count"]) == (committed, 5)
    time.sleep(5)  # one event makes one run, not more
    assert len(airflow.dag_runs(CONSUMER)) == 1


def test_documented_asset_event_keys(deployment):
    """docs/assets-and-lineage.md shows a first commit's event extra: exactly the keys a real one has."""
    airflow, *_ = deployment
    ((extra,),) = airflow.query(
        "SELECT asset_event.extra FROM asset_event JOIN asset ON asset.id = asset_event.asset_id "
        "WHERE asset.uri LIKE 'iceberg://hadoop/db/events?%'"
    )
    shown = documented_keys(snippet("docs/assets-and-lineage.md", '"commit_id":'))
    assert shown == set(json.loads(extra)), shown ^ set(json.loads(extra))


def _complete_event(events: list[dict], job_name: str) -> dict:
    matches = [e for e in events if e.get("eventType") == "COMPLETE" and e["job"]["name"] == job_name]
    assert matches, f"no COMPLETE event for {job_name} in {[e['job']['name'] for e in events]}"
    return matches[-1]


def test_openlineage_events_name_the_table_by_location_at_its_snapshot(deployment):
    _, warehouse, lineage_file, *_ = deployment
    snapshot = str(load_table(warehouse, "db.events").current_snapshot().snapshot_id)
    events = [json.loads(line) for line in Path(lineage_file).read_text().splitlines() if line.strip()]
    location = str(warehouse / "db" / "events")

    (output,) = _complete_event(events, f"{PRODUCER}.create")["outputs"]
    (read_input,) = _complete_event(events, f"{CONSUMER}.read_triggering_snapshot")["inputs"]
    for dataset in (output, read_input):
        assert (dataset["namespace"], dataset["name"]) == ("file", location)
        assert dataset["facets"]["version"]["datasetVersion"] == snapshot
        # openlineage-spark's type names (Spark's typeName), not simpleString's bigint
        assert [(f["name"], f["type"]) for f in dataset["facets"]["schema"]["fields"]] == [
            ("id", "long"),
            ("amount", "long"),
        ]
        assert dataset["facets"]["storage"]["storageLayer"] == "iceberg"
        assert dataset["facets"]["catalog"]["framework"] == "iceberg"
        (symlink,) = dataset["facets"]["symlinks"]["identifiers"]
        # openlineage-spark's name for a Hadoop catalog's table: file:<warehouse path>, ns.table
        assert symlink == {"namespace": f"file:{warehouse}", "name": "db.events", "type": "TABLE"}


def test_every_openlineage_event_is_valid_against_the_spec_schemas(deployment):
    """Every event Airflow sent, whole and each facet against the schema version it names."""
    _, _, lineage_file, *_ = deployment
    events = [json.loads(line) for line in Path(lineage_file).read_text().splitlines() if line.strip()]
    assert events
    foreign = set()
    for event in events:
        foreign |= {where.split(".")[-1] for where in validate_event(event)}
    # only Airflow's own facets (their schemas are the provider's) go without a facet schema
    assert foreign <= {
        "airflow",
        "airflowDagRun",
        "airflowState",
        "airflow_runArgs",
        "unknownSourceAttribute",
        "debug",
    }, foreign


def test_spark_provider_still_injects_the_openlineage_parent_job(deployment):
    airflow, *_ = deployment
    log = airflow.task_log(PRODUCER, "create")
    assert "spark.openlineage.parentJobName" in log and f"{PRODUCER}.create" in log, log[-5000:]


def test_a_real_commit_through_a_hive_metastore_list_returns_its_xcom_and_emits_one_asset(
    hive_metastore, monkeypatch
):
    """In-process, real spark-submit: a Hive catalog on a metastore list, as the docs allow.

    The list names one real metastore twice (``localhost`` and ``127.0.0.1``), so Spark's Hive
    client commits whichever it tries first. The task must return its XCom (it used to fail
    after the commit), and its asset must be the one canonical URI of the list, whose order
    the user chose. pyiceberg, on the metastore itself, judges what was committed.
    """
    from airflow.sdk import AssetAlias
    from airflow.sdk.execution_time.context import OutletEventAccessors

    from airflow_iceberg.operators import IcebergCreateTableOperator
    from tests.integration.catalog_connections import hive_connection, hive_reader
    from tests.integration.in_process import execute
    from tests.integration.robustness_dags.iceberg_robustness import QUICK_START

    port = hive_metastore.port
    connection = hive_connection(hive_metastore)
    connection["host"] = f"thrift://LOCALHOST:{port},thrift://127.0.0.1:{port}"
    monkeypatch.setenv("AIRFLOW_CONN_HIVE_LIST", json.dumps(connection))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(spark_connection()))
    hive_reader(hive_metastore).create_namespace_if_not_exists("lineage")
    operator = IcebergCreateTableOperator(
        task_id="create_on_a_metastore_list",
        table="lineage.Events",
        iceberg_conn_id="hive_list",
        mode="create_or_replace",
        source_query="SELECT id, CAST(id * 10 AS BIGINT) AS amount FROM range(3)",
        conf=QUICK_START,
    )
    events = OutletEventAccessors()
    result = execute(operator, outlet_events=events)

    table = hive_reader(hive_metastore).load_table("lineage.events")
    assert result["snapshot_id"] == table.current_snapshot().snapshot_id
    (event,) = events[AssetAlias("iceberg-table:hive_list:lineage.Events")].asset_alias_events
    metastores = f"thrift%3A%2F%2F127.0.0.1%3A{port}%2Cthrift%3A%2F%2Flocalhost%3A{port}"  # sorted
    assert event.dest_asset_key.uri == f"iceberg://hive/lineage/events?uri={metastores}"
    assert event.extra["snapshot_id"] == result["snapshot_id"]
    (output,) = operator.get_openlineage_facets_on_complete(None).outputs
    assert (output.namespace, output.name) == ("file", urllib.parse.urlsplit(table.location()).path)
    (symlink,) = output.facets["symlinks"].identifiers
    assert (symlink.namespace, symlink.name) == (f"hive://127.0.0.1:{port}", "lineage.events")


# --------------------------------------------------------------------------- the watcher's watermark


def _sql_catalog(airflow: AirflowDeployment):
    """The outside writer: pyiceberg on the SQL catalog the deployment's connection names."""
    from pyiceberg.catalog.sql import SqlCatalog

    connection = json.loads(airflow.env["AIRFLOW_CONN_SQL_CATALOG"])
    database = connection["host"].removeprefix("jdbc:sqlite:")
    return SqlCatalog("lake", uri=f"sqlite:///{database}", warehouse=connection["extra"]["warehouse"])


def _watermarked_events(airflow: AirflowDeployment) -> list[int]:
    """The snapshot id of every asset event of db.watermarked, in the order Airflow stored them."""
    rows = airflow.query(
        "SELECT asset_event.extra FROM asset_event JOIN asset ON asset.id = asset_event.asset_id "
        "WHERE asset.uri LIKE ? ORDER BY asset_event.id",
        WATERMARKED_URI,
    )
    return [json.loads(extra)["payload"]["snapshot_id"] for (extra,) in rows]


def _stored_watermark(airflow: AirflowDeployment) -> int | None:
    rows = airflow.query(
        "SELECT asset_state_store.value FROM asset_state_store "
        "JOIN asset ON asset.id = asset_state_store.asset_id WHERE asset.uri LIKE ?",
        WATERMARKED_URI,
    )
    return json.loads(rows[0][0])["watermark"]["snapshot_id"] if len(rows) == 1 else None


def _watcher_runs_in(airflow: AirflowDeployment, triggerer_job_id: int) -> bool:
    """Whether the watcher's trigger is assigned to that (running) triggerer job."""
    rows = airflow.query(
        "SELECT trigger.triggerer_id FROM trigger JOIN asset_watcher "
        "ON asset_watcher.trigger_id = trigger.id WHERE asset_watcher.name = 'watermarked_commits'"
    )
    return rows == [(triggerer_job_id,)]


def _restart_triggerer(airflow: AirflowDeployment, between: Any = None) -> int:
    """Stop the triggerer, call ``between()``, start it again: the new triggerer job's id."""
    (before,) = airflow.query("SELECT MAX(id) FROM job WHERE job_type = 'TriggererJob'")[0]
    airflow.stop_component("triggerer")
    if between is not None:
        between()
    airflow.start("triggerer", ["triggerer"])
    started = "SELECT id FROM job WHERE job_type = 'TriggererJob' AND id > ?"
    ((job,),) = airflow.wait_for(lambda: airflow.query(started, before), "the triggerer to start again")
    return job


def test_the_asset_watcher_reports_each_commit_once_across_triggerer_restarts(deployment):
    airflow, *_ = deployment
    table = _sql_catalog(airflow).load_table("db.watermarked")
    (start,) = [s.snapshot_id for s in table.snapshots()]
    airflow.wait_for(lambda: _stored_watermark(airflow) == start, "the watcher to store its first watermark")
    table.append(_rows(3))
    commits = [table.current_snapshot().snapshot_id]
    airflow.wait_for(lambda: _watermarked_events(airflow) == commits, "the event of a commit")

    def commit_twice():  # while no triggerer runs
        for first in (6, 9):
            table.append(_rows(first))
            commits.append(table.current_snapshot().snapshot_id)

    job = _restart_triggerer(airflow, between=commit_twice)
    airflow.wait_for(lambda: len(_watermarked_events(airflow)) >= 3, "the commits made while it was stopped")
    # a restart with no commit in between: it resumes, and the next event is the next commit's
    job = _restart_triggerer(airflow)
    airflow.wait_for(lambda: _watcher_runs_in(airflow, job), "the watcher to run in the new triggerer")
    table.append(_rows(12))
    commits.append(table.current_snapshot().snapshot_id)
    airflow.wait_for(lambda: len(_watermarked_events(airflow)) >= 4, "the event of the last commit")
    assert _watermarked_events(airflow) == commits, (commits, airflow.logs())  # each once, in order
    assert start not in _watermarked_events(airflow)
    assert _stored_watermark(airflow) == commits[-1]

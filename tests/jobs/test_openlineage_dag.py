"""The example DAG's tasks beside openlineage-spark: both producers name every dataset identically.

``dags/iceberg_daily_orders.py`` (the DAG ``make demo`` runs) is loaded by Airflow's ``DagBag``
in Airflow's interpreter (:mod:`tests.dag_task_runner`), and each task runs its real
``execute()`` in dependency order: templates rendered, the time-travel read's snapshot pulled
from the append's XCom, the job spec built, qualified and planned as in production. Only
spark-submit is replaced: its arguments come here and run in the shared session
(``iceberg_job.main``, as spark-submit runs it), with openlineage-spark 1.53's listener on it.
So the jobs are the DAG's own, and follow it when it changes.

For each task the operator's OpenLineage event (validated against the OpenLineage schemas, each
facet against the version its ``_schemaURL`` names, in the runner) must name every input and
output, with its symlink, as openlineage-spark names it in its events of the same job; and every
table openlineage-spark names in the task's events must be one the operator names (no missing
edges). Versions are checked with pyiceberg, by each task's commit id. docs/assets-and-lineage.md
shows each task's datasets and the time-travel read's whole event as this run emits them.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_iceberg.jobs import iceberg_job
from airflow_iceberg.jobs.spec.request import COMMIT_ID_PROPERTY
from tests.dag_task_runner import PREFIX
from tests.docs_snippets import snippets
from tests.jobs.conftest import REPO_ROOT, openlineage_spark_jar
from tests.jobs.helpers import CATALOG
from tests.jobs.openlineage_spark import Names, openlineage_listener, spark_names

pytestmark = pytest.mark.skipif(
    openlineage_spark_jar() is None,
    reason="openlineage-spark's jar is missing: run `make setup` (it fetches OPENLINEAGE_SPARK_JAR)",
)

DAG_FILE = REPO_ROOT / "dags" / "iceberg_daily_orders.py"
DAG_ID = "iceberg_daily_orders"
#: Airflow's interpreter (the operators), beside this one (the Spark runtime).
AIRFLOW_PYTHON = REPO_ROOT / ".venv" / "bin" / "python"
#: Session settings the operator passes to spark-submit that a running session can take.
SESSION_SETTINGS = ("spark.sql.defaultCatalog",)


@dataclass
class TaskRun:
    """One task of the DAG: its XCom, the operator's OpenLineage event, openlineage-spark's events."""

    task_id: str
    result: dict[str, Any]
    event: dict[str, Any]
    foreign_facets: list[str]
    spark_events: list[dict[str, Any]] = field(default_factory=list)


def run_job(spark: Any, argv: list[str], conf: dict[str, str]) -> None:
    """Run one job's spark-submit arguments in the shared session, with the operator's session settings.

    The catalog the operator configured for spark-submit must be the session's own ``lake``.
    """
    for key in (
        f"spark.sql.catalog.{CATALOG}",
        f"spark.sql.catalog.{CATALOG}.type",
        f"spark.sql.catalog.{CATALOG}.warehouse",
    ):
        assert conf.get(key) == spark.conf.get(key), f"the operator's {key} is {conf.get(key)!r}"
    before = {key: spark.conf.get(key, None) for key in SESSION_SETTINGS}
    try:
        for key in SESSION_SETTINGS:
            if key in conf:
                spark.conf.set(key, conf[key])
        iceberg_job.main(argv)  # a failed job reports in its result file, which the operator reads
    finally:
        for key, value in before.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)


@pytest.fixture(scope="module")
def dag_run(spark, warehouse, tmp_path_factory) -> Iterator[dict[str, TaskRun]]:
    """Every task of the DAG run once, in order, under openlineage-spark's listener."""
    work = tmp_path_factory.mktemp("dag-openlineage")
    catalog = {"catalog_name": CATALOG, "catalog_type": "hadoop", "warehouse": str(warehouse)}
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT": json.dumps(
            {"conn_type": "iceberg_catalog", "extra": catalog}
        ),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
    }
    runs: dict[str, TaskRun] = {}
    with (
        openlineage_listener(spark, work / "openlineage-spark.jsonl") as read,
        open(work / "runner.log", "w+") as log,
    ):
        runner = subprocess.Popen(
            [str(AIRFLOW_PYTHON), "-m", "tests.dag_task_runner", str(DAG_FILE), DAG_ID],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        seen = 0
        try:
            for line in runner.stdout:
                if not line.startswith(PREFIX):
                    continue
                message = json.loads(line[len(PREFIX) :])
                if "job" in message:
                    run_job(spark, message["job"], message["conf"])
                    runner.stdin.write(json.dumps({"done": True}) + "\n")
                    runner.stdin.flush()
                elif "task_id" in message:
                    events = read()
                    runs[message["task_id"]] = TaskRun(
                        message["task_id"],
                        message["result"],
                        message["event"],
                        message["foreign_facets"],
                        events[seen:],
                    )
                    seen = len(events)
            code = runner.wait(timeout=120)
        finally:
            if runner.poll() is None:
                runner.kill()
                runner.wait()
        log.seek(0)
        assert code == 0, f"the DAG's tasks failed:\n{log.read()[-5000:]}"
    yield runs


def our_names(event: dict[str, Any], role: str) -> list[Names]:
    """The operator's datasets in ``role`` (inputs, outputs): name and symlink, as openlineage-spark's."""
    named = []
    for dataset in event[role]:
        identifiers = (dataset["facets"].get("symlinks") or {}).get("identifiers") or [None]
        for identifier in identifiers:
            symlink = (identifier["namespace"], identifier["name"]) if identifier else None
            named.append(((dataset["namespace"], dataset["name"]), symlink))
    return named


def their_datasets(run: TaskRun, role: str, name: tuple[str, str]) -> list[dict[str, Any]]:
    """openlineage-spark's ``role`` datasets named ``name`` in its COMPLETE events of the task's jobs."""
    return [
        dataset
        for event in run.spark_events
        if event["eventType"] == "COMPLETE"
        for dataset in event.get(role) or []
        if (dataset["namespace"], dataset["name"]) == name
    ]


def dataset(event: dict[str, Any], role: str, table: str) -> dict[str, Any]:
    """The operator's one ``role`` dataset whose name ends with ``table``'s path (``db/orders``)."""
    path = "/" + table.split(".", 1)[1].replace(".", "/")
    (found,) = [d for d in event[role] if d["name"].endswith(path)]
    return found


def committed_by(lake: Any, table: str, task_id: str) -> int:
    """The snapshot of ``table`` that ``task_id``'s commit made, by its commit id (read by pyiceberg)."""
    (snapshot,) = [
        s
        for s in lake.snapshots(table)
        if s.summary.additional_properties.get(COMMIT_ID_PROPERTY, "").startswith(f"{DAG_ID}:{task_id}:")
    ]
    return snapshot.snapshot_id


ORDERS, BEFORE_CORRECTION = f"{CATALOG}.db.orders", f"{CATALOG}.db.orders_before_correction"
TASKS = ("create_orders", "append_day_two", "correct_day_one", "snapshot_before_correction")


def test_every_task_of_the_example_dag_ran_and_its_event_is_valid_against_the_schemas(dag_run):
    """The runner validated each event, whole and facet by facet; every facet has a spec schema."""
    assert list(dag_run) == [*TASKS]
    for run in dag_run.values():
        assert run.result["status"] == "success", run.result
        assert run.foreign_facets == [], f"{run.task_id}: facets without an openlineage.io schema"
        assert run.spark_events, f"{run.task_id}: openlineage-spark saw none of its jobs"


@pytest.mark.parametrize("role", ["inputs", "outputs"])
def test_each_task_names_its_datasets_as_openlineage_spark_names_them_and_misses_none(dag_run, role):
    """Both ways: every dataset and symlink the operator names, openlineage-spark names in the same
    role in the task's jobs; every dataset openlineage-spark names there, the operator names."""
    for run in dag_run.values():
        ours, theirs = our_names(run.event, role), spark_names(run.spark_events, role)
        for name, symlink in ours:
            assert name in theirs, (
                f"{run.task_id} {role}: openlineage-spark has no {name}; it named {sorted(theirs)}"
            )
            assert symlink in theirs[name], (
                f"{run.task_id} {role} {name}: {symlink}, openlineage-spark {theirs[name]}"
            )
        missing = {(name, symlink) for name, symlinks in theirs.items() for symlink in symlinks} - set(ours)
        assert not missing, f"{run.task_id} {role}: openlineage-spark names {missing}, the operator does not"


def test_each_written_table_has_openlineage_sparks_schema_statistics_and_the_commits_version(dag_run, lake):
    """The output's schema facet and outputStatistics are openlineage-spark's; its version is the
    snapshot the task committed, as pyiceberg finds it by the task's commit id."""
    for run in dag_run.values():
        for output in run.event["outputs"]:
            theirs = their_datasets(run, "outputs", (output["namespace"], output["name"]))
            assert theirs, f"{run.task_id}: openlineage-spark completed no job writing {output['name']}"
            table = ORDERS if output["name"].endswith("/db/orders") else BEFORE_CORRECTION
            snapshot = str(committed_by(lake, table, run.task_id))
            assert output["facets"]["version"]["datasetVersion"] == snapshot
            assert snapshot in {d["facets"].get("version", {}).get("datasetVersion") for d in theirs}
            assert output["facets"]["schema"]["fields"] in [
                strip(d["facets"]["schema"]["fields"]) for d in theirs
            ]
            statistics = strip(output["outputFacets"]["outputStatistics"])
            assert statistics in [strip(d["outputFacets"].get("outputStatistics")) for d in theirs]


def test_the_time_travel_read_is_the_snapshot_the_append_committed_where_openlineage_spark_says_the_head(
    dag_run, lake
):
    """The read's input is ``db.orders`` at the append's snapshot (from its XCom, the snapshot
    pyiceberg finds by the append's commit id). openlineage-spark 1.53 gives the version of the
    table's head when the read ran (the correction's snapshot), not the snapshot read: the
    operator follows the spec (the version of the dataset read), docs/assets-and-lineage.md says so."""
    run = dag_run["snapshot_before_correction"]
    appended, corrected = (committed_by(lake, ORDERS, task) for task in ("append_day_two", "correct_day_one"))
    assert run.result["snapshot_id"] == dag_run["append_day_two"].result["snapshot_id"] == appended
    read = dataset(run.event, "inputs", ORDERS)
    assert read["facets"]["version"]["datasetVersion"] == str(appended)
    theirs = their_datasets(run, "inputs", (read["namespace"], read["name"]))
    assert {d["facets"]["version"]["datasetVersion"] for d in theirs} == {str(corrected)}


def test_a_create_or_replace_of_a_new_table_is_a_create_where_openlineage_spark_says_overwrite(dag_run, lake):
    """``create_or_replace`` of a table that did not exist (its snapshot has no parent, says
    pyiceberg) is the dataset's CREATE; openlineage-spark 1.53 calls every replace-as-select an
    OVERWRITE. An overwrite of partitions is an OVERWRITE for both; an append changes no lifecycle."""
    create = dag_run["create_orders"]
    assert lake.snapshot(ORDERS, committed_by(lake, ORDERS, "create_orders")).parent_snapshot_id is None
    output = dataset(create.event, "outputs", ORDERS)
    assert output["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "CREATE"
    theirs = their_datasets(create, "outputs", (output["namespace"], output["name"]))
    assert {d["facets"]["lifecycleStateChange"]["lifecycleStateChange"] for d in theirs} == {"OVERWRITE"}
    correct = dataset(dag_run["correct_day_one"].event, "outputs", ORDERS)
    assert correct["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "OVERWRITE"
    assert "lifecycleStateChange" not in dataset(dag_run["append_day_two"].event, "outputs", ORDERS)["facets"]


def test_where_openlineage_spark_copies_a_setting_the_operator_gives_it_normalised(dag_run, warehouse):
    """The ``catalog`` facet's warehouse: openlineage-spark copies the Spark setting (a bare path
    here), the operator gives the normalised location. ``storage``: openlineage-spark 1.53 leaves
    a replace-as-select's ``fileFormat`` empty; the operator gives the table's write format."""
    create = dag_run["create_orders"]
    output = dataset(create.event, "outputs", ORDERS)
    theirs = their_datasets(create, "outputs", (output["namespace"], output["name"]))
    assert output["facets"]["catalog"]["warehouseUri"] == f"file://{warehouse}"
    assert {d["facets"]["catalog"]["warehouseUri"] for d in theirs} == {str(warehouse)}
    assert output["facets"]["storage"]["fileFormat"] == "parquet"  # the DAG's write.format.default
    assert "" in {d["facets"]["storage"]["fileFormat"] for d in theirs}


def test_each_tasks_run_names_the_spark_application_openlineage_sparks_events_name(dag_run):
    for run in dag_run.values():
        ours = strip(run.event["run"]["facets"]["spark_applicationDetails"])
        theirs = [
            event["run"]["facets"]["spark_applicationDetails"]
            for event in run.spark_events
            if "spark_applicationDetails" in event["run"].get("facets", {})
        ]
        assert theirs and all(
            (t["applicationId"], t["appName"]) == (ours["applicationId"], ours["appName"]) for t in theirs
        ), (ours, theirs)


def strip(value: Any) -> Any:
    """A facet without its ``_producer`` and ``_schemaURL``, as the docs show facets."""
    if isinstance(value, dict):
        return {k: strip(v) for k, v in value.items() if k not in ("_producer", "_schemaURL")}
    if isinstance(value, list):
        return [strip(v) for v in value]
    return value


DOCS_PAGE = "docs/assets-and-lineage.md"


def documented(value: Any, replacements: dict[str, str]) -> Any:
    """``value`` as the docs show it: this run's paths and ids by what they are; no facet metadata
    (``_producer``, ``_schemaURL``), no empty ``facets``."""
    value = strip(value)
    if isinstance(value, dict):
        return {k: documented(v, replacements) for k, v in value.items() if v != {}}
    if isinstance(value, list):
        return [documented(v, replacements) for v in value]
    if isinstance(value, str):
        for old, new in replacements.items():
            value = value.replace(old, new)
    return value


def documented_runs(dag_run: dict[str, TaskRun], lake: Any, warehouse: Any) -> tuple[dict, dict]:
    """What docs/assets-and-lineage.md shows of this run: each task's datasets, and one whole event."""
    replacements = {str(warehouse): "/wh"}
    for task, table in zip(TASKS, (ORDERS, ORDERS, ORDERS, BEFORE_CORRECTION), strict=True):
        replacements[str(committed_by(lake, table, task))] = f"<snapshot {task} committed>"
    for run in dag_run.values():
        replacements[run.event["run"]["facets"]["spark_applicationDetails"]["applicationId"]] = (
            "<application id>"
        )
        replacements[run.event["run"]["facets"]["spark_applicationDetails"]["appName"]] = "<application name>"

    def brief(dataset: dict) -> dict:
        shown = {"namespace": dataset["namespace"], "name": dataset["name"]}
        shown["version"] = dataset["facets"]["version"]["datasetVersion"]
        if "lifecycleStateChange" in dataset["facets"]:
            shown["lifecycleStateChange"] = dataset["facets"]["lifecycleStateChange"]["lifecycleStateChange"]
        return shown

    summary = {
        run.event["job"]["name"]: {
            role: [brief(d) for d in run.event[role]] for role in ("inputs", "outputs")
        }
        for run in dag_run.values()
    }
    read = copy.deepcopy(dag_run["snapshot_before_correction"].event)
    whole = {key: read[key] for key in ("job", "inputs", "outputs", "run")}
    whole["run"] = {"facets": read["run"]["facets"]}
    for output in whole["outputs"]:  # Parquet's bytes may differ by Spark line
        output["outputFacets"]["outputStatistics"]["size"] = "<bytes written>"
    return documented(summary, replacements), documented(whole, replacements)


def test_the_documented_events_are_this_runs(dag_run, lake, warehouse):
    """docs/assets-and-lineage.md's excerpt of the example DAG's events is what this run emitted."""
    summary, whole = documented_runs(dag_run, lake, warehouse)
    excerpts = f"this run's excerpts:\n{json.dumps(summary, indent=2)}\n{json.dumps(whole, indent=2)}"
    shown = [s for s in snippets() if s.page == DOCS_PAGE and f'"{DAG_ID}.' in s.text]
    assert len(shown) == 2, f"{DOCS_PAGE} should show two excerpts of the example DAG's events; {excerpts}"
    (documented_summary,) = [json.loads(s.text) for s in shown if f'"{DAG_ID}.create_orders"' in s.text]
    (documented_event,) = [json.loads(s.text) for s in shown if f'"{DAG_ID}.create_orders"' not in s.text]
    assert documented_summary == summary, excerpts
    assert documented_event == whole, excerpts

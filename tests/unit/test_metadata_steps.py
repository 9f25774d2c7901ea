"""Publish, tag and rollback in the worker through pyiceberg: real pyiceberg, a real SQL catalog on SQLite.

Each test runs the operator's real ``execute`` against a JDBC catalog connection on a SQLite
file, with ``SparkSubmitOperator.execute`` replaced by a stand-in that fails the test: the step
must run without spark-submit. What the step did is read back with pyiceberg's own SqlCatalog on
the same database, never from the step's result. Faults are injected where the Spark job's tests
inject them (tests/jobs/test_branches.py, test_upkeep.py): a concurrent commit between the
decision and the commit, a try killed after it recorded its marker, an answer lost after the
catalog committed, and Airflow's retry after each.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pyarrow as pa
import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import AssetAlias
from airflow.sdk.execution_time.context import OutletEventAccessors
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg.catalog import pyiceberg_publish
from airflow_iceberg.catalog.config import CatalogConfig
from airflow_iceberg.catalog.pyiceberg_lineage import describe_table
from airflow_iceberg.catalog.pyiceberg_path import catalog_refusal, dropped_fields, table_refusal
from airflow_iceberg.exceptions import IcebergJobError, InvalidSpecError
from airflow_iceberg.jobs import rollback as rollback_module
from airflow_iceberg.jobs.retry_markers import MARKER_PREFIX
from airflow_iceberg.operators import IcebergPublishOperator, IcebergRollbackOperator, IcebergTagOperator

CATALOG = "lite"
TABLE = "db.orders"
QUALIFIED = f"{CATALOG}.{TABLE}"
ROWS = pa.table({"id": pa.array([1, 2], pa.int64()), "name": pa.array(["a", "b"])})


class Killed(BaseException):
    """The worker's process dying mid-step (SIGKILL): no except clause of the step sees it."""


@pytest.fixture
def lake(tmp_path, iceberg_connection, spark_connection):
    """A SQLite JDBC catalog as the connection ``iceberg_catalog_default``, and pyiceberg's reader of it."""
    database, warehouse = tmp_path / "catalog.db", tmp_path / "warehouse"
    iceberg_connection(
        host=f"jdbc:sqlite:{database}",
        extra={"catalog_name": CATALOG, "catalog_type": "jdbc", "warehouse": warehouse.as_uri()},
    )
    catalog = SqlCatalog(CATALOG, uri=f"sqlite:///{database}", warehouse=warehouse.as_uri())
    catalog.create_namespace("db")
    return catalog


@pytest.fixture(autouse=True)
def no_spark_submit():
    """Every step here runs without spark-submit; a test that expects the Spark path replaces this."""

    def spark_submit_ran(self, context):
        raise AssertionError(f"spark-submit ran for {self.task_id}")

    with mock.patch.object(SparkSubmitOperator, "execute", spark_submit_ran):
        yield


def _audited_branch(lake) -> tuple[int, int]:
    """``main`` at one append, branch ``audit`` one append ahead: (main's snapshot, the branch's)."""
    table = lake.create_table(TABLE, schema=ROWS.schema)
    table.append(ROWS)
    main = table.current_snapshot().snapshot_id
    table.manage_snapshots().create_branch(main, "audit").commit()
    table.append(ROWS, branch="audit")
    return main, table.refs()["audit"].snapshot_id


def _append(lake, branch: str = "main") -> int:
    table = lake.load_table(TABLE)
    table.append(ROWS, branch=branch)
    return lake.load_table(TABLE).refs()[branch].snapshot_id


def _refs(lake) -> dict[str, int]:
    return {name: ref.snapshot_id for name, ref in lake.load_table(TABLE).refs().items()}


def _context(task_id: str, **extra) -> dict:
    """The task instance fields the operators read: its commit id is the same for a retry of it."""
    ti = SimpleNamespace(dag_id="wap", task_id=task_id, run_id="scheduled__2024-01-02", map_index=-1)
    ti.try_number, ti.max_tries = 1, 0
    return {"ti": ti, **extra}


def _the_spark_job(ran: list[str]):
    """spark-submit replaced by a job that reports success, noting which task ran it."""

    def execute(self, context):
        ran.append(self.task_id)
        args = self.application_args
        result = {"status": "success", "table": "t"}
        Path(args[args.index("--result-file") + 1]).write_text(json.dumps(result))

    return mock.patch.object(SparkSubmitOperator, "execute", execute)


def _publish(**kwargs) -> IcebergPublishOperator:
    return IcebergPublishOperator(task_id="publish", table=TABLE, branch="audit", **kwargs)


# --------------------------------------------------------------------------- the steps, without Spark


def test_publish_tag_and_rollback_run_in_the_worker_and_report_what_the_spark_job_reports(lake):
    main, audited = _audited_branch(lake)
    published = _publish(expected_snapshot_id=str(audited), drop_branch=True).execute(_context("publish"))
    assert published == {
        "status": "success",
        "table": QUALIFIED,
        "branch": "audit",
        "target_branch": "main",
        "previous_snapshot_id": main,
        "snapshot_id": audited,
        "already_published": False,
        "target_branch_created": False,
        "branch_dropped": True,
        "branch_snapshot_id": audited,
        "branch_holds_unpublished_commits": False,
    }
    assert _refs(lake) == {"main": audited}

    tag = IcebergTagOperator(
        task_id="tag", table=TABLE, tag="eod_20240102", snapshot_id=audited, retain_days=30
    )
    assert tag.execute(_context("tag")) == {
        "status": "success",
        "table": QUALIFIED,
        "tag": "eod_20240102",
        "snapshot_id": audited,
        "retain_days": 30,
        "already_tagged": False,
    }
    eod = lake.load_table(TABLE).refs()["eod_20240102"]
    assert (eod.snapshot_id, eod.max_ref_age_ms) == (audited, 30 * 86_400_000)
    assert tag.execute(_context("tag"))["already_tagged"] is True  # its retry: same snapshot and retention

    rolled = IcebergRollbackOperator(task_id="rollback", table=TABLE, snapshot_id=main).execute(
        _context("rollback")
    )
    marker = next(name for name in _refs(lake) if name.startswith(MARKER_PREFIX))
    assert rolled == {
        "status": "success",
        "table": QUALIFIED,
        "procedure": "rollback_to_snapshot",
        "previous_snapshot_id": audited,
        "current_snapshot_id": main,
        "already_rolled_back": False,
        "snapshot_id": main,
    }
    assert _refs(lake) == {"main": main, "eod_20240102": audited, marker: audited}
    log = [entry.snapshot_id for entry in lake.load_table(TABLE).metadata.snapshot_log]
    assert log == [main, audited, main]  # main's snapshot log, which a rollback's retry reads


def test_a_publish_to_main_is_an_asset_event_and_an_openlineage_output_as_on_the_spark_path(lake):
    _, audited = _audited_branch(lake)
    events = OutletEventAccessors()
    op = _publish(expected_snapshot_id=audited)
    xcom = op.execute(_context("publish", outlet_events=events))
    assert "lineage" not in xcom
    (event,) = events[AssetAlias("iceberg-table:iceberg_catalog_default:db.orders")].asset_alias_events
    assert event.extra == {"table": QUALIFIED, "snapshot_id": audited}
    location = lake.load_table(TABLE).metadata.location
    (output,) = op.get_openlineage_facets_on_complete(None).outputs
    assert (output.namespace, output.name) == ("file", location.removeprefix("file://"))
    assert output.facets["version"].datasetVersion == str(audited)
    assert [(f.name, f.type) for f in output.facets["schema"].fields] == [("id", "long"), ("name", "string")]

    # The Spark path, given the same result, emits the same event and dataset.
    spark_events = OutletEventAccessors()
    lineage = {"tables": {QUALIFIED: describe_table(lake.load_table(TABLE).metadata)}}

    def the_job_reports_the_same(self, context):
        args = self.application_args
        Path(args[args.index("--result-file") + 1]).write_text(json.dumps({**xcom, "lineage": lineage}))

    spark = _publish(expected_snapshot_id=audited, engine="spark")
    with mock.patch.object(SparkSubmitOperator, "execute", the_job_reports_the_same):
        assert spark.execute(_context("publish", outlet_events=spark_events)) == xcom
    (spark_event,) = spark_events[
        AssetAlias("iceberg-table:iceberg_catalog_default:db.orders")
    ].asset_alias_events
    assert spark_event.extra == event.extra
    assert spark.get_openlineage_facets_on_complete(None).outputs == [output]


def test_a_table_is_described_for_openlineage_in_the_spark_type_names_icebergs_runtime_gives_it(lake):
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        DateType,
        DecimalType,
        FixedType,
        IntegerType,
        ListType,
        LongType,
        MapType,
        NestedField,
        StringType,
        StructType,
        TimestampType,
        TimestamptzType,
        UUIDType,
    )

    schema = Schema(
        NestedField(1, "id", LongType(), required=True, doc="the order"),
        NestedField(2, "qty", IntegerType()),
        NestedField(3, "amount", DecimalType(10, 2)),
        NestedField(4, "at", TimestamptzType()),
        NestedField(5, "local_at", TimestampType()),
        NestedField(6, "day", DateType()),
        NestedField(7, "key", UUIDType()),
        NestedField(8, "hash", FixedType(16)),
        NestedField(9, "tags", ListType(10, StringType())),
        NestedField(11, "attrs", MapType(12, StringType(), 13, IntegerType())),
        NestedField(14, "point", StructType(NestedField(15, "x", LongType(), doc="east"))),
    )
    table = lake.create_table("db.typed", schema=schema, properties={"write.format.default": "ORC"})
    described = describe_table(table.metadata)
    assert (described["format"], described["snapshot_id"]) == ("orc", None)
    assert described["schema"] == [
        {"name": "id", "type": "long", "description": "the order"},
        {"name": "qty", "type": "integer"},
        {"name": "amount", "type": "decimal(10,2)"},
        {"name": "at", "type": "timestamp"},
        {"name": "local_at", "type": "timestamp_ntz"},
        {"name": "day", "type": "date"},
        {"name": "key", "type": "string"},
        {"name": "hash", "type": "binary"},
        {"name": "tags", "type": "array", "fields": [{"name": "_element", "type": "string"}]},
        {
            "name": "attrs",
            "type": "map",
            "fields": [{"name": "key", "type": "string"}, {"name": "value", "type": "integer"}],
        },
        {"name": "point", "type": "struct", "fields": [{"name": "x", "type": "long", "description": "east"}]},
    ]


# --------------------------------------------------------------------------- exactly once, and refusals


def test_a_retried_publish_reports_already_published_and_keeps_a_later_commit_to_main(lake):
    _, audited = _audited_branch(lake)
    op = _publish(expected_snapshot_id=audited, drop_branch=True)
    op.execute(_context("publish"))
    later = _append(lake)  # another writer, before Airflow's retry of the task
    retried = _publish(expected_snapshot_id=audited, drop_branch=True).execute(_context("publish"))
    assert (retried["already_published"], retried["snapshot_id"]) == (True, audited)
    assert (retried["previous_snapshot_id"], retried["branch_dropped"]) == (None, False)
    assert _refs(lake) == {"main": later}


def test_a_commit_on_main_between_the_decision_and_the_commit_fails_the_publish_and_changes_nothing(
    lake, monkeypatch
):
    main, audited = _audited_branch(lake)
    decide = pyiceberg_publish.decide
    moved: list[int] = []

    def decide_then_another_writer_commits(history, spec):
        decision = decide(history, spec)
        moved.append(_append(lake))
        return decision

    monkeypatch.setattr(pyiceberg_publish, "decide", decide_then_another_writer_commits)
    with pytest.raises(IcebergJobError) as raised:
        _publish(expected_snapshot_id=audited, drop_branch=True).execute(_context("publish"))
    assert str(raised.value).startswith(
        f"{QUALIFIED}: PublishError: could not publish snapshot {audited} of branch 'audit' of {QUALIFIED} "
        "to main: another commit to the table landed while publishing (Requirement failed: branch main has "
        f"changed: expected id {main}, found {moved[0]}). Nothing was changed; retry the task"
    )
    assert _refs(lake) == {"main": moved[0], "audit": audited}

    monkeypatch.setattr(pyiceberg_publish, "decide", decide)  # Airflow's retry decides afresh
    with pytest.raises(
        IcebergJobError, match=r"PublishError: cannot publish branch 'audit' .* main moved since"
    ):
        _publish(expected_snapshot_id=audited, drop_branch=True).execute(_context("publish"))
    assert _refs(lake) == {"main": moved[0], "audit": audited}


def test_a_commit_on_the_branch_between_the_decision_and_the_commit_is_neither_published_nor_dropped(
    lake, monkeypatch
):
    main, audited = _audited_branch(lake)
    decide = pyiceberg_publish.decide
    unaudited: list[int] = []

    def decide_then_a_commit_lands_on_the_branch(history, spec):
        decision = decide(history, spec)
        unaudited.append(_append(lake, branch="audit"))
        return decision

    monkeypatch.setattr(pyiceberg_publish, "decide", decide_then_a_commit_lands_on_the_branch)
    with pytest.raises(IcebergJobError, match=r"branch audit has changed.*Nothing was changed"):
        _publish(expected_snapshot_id=audited, drop_branch=True).execute(_context("publish"))
    assert _refs(lake) == {"main": main, "audit": unaudited[0]}


def test_a_target_created_by_another_task_between_the_decision_and_the_commit_is_not_overwritten(
    lake, monkeypatch
):
    main, audited = _audited_branch(lake)
    decide = pyiceberg_publish.decide

    def decide_then_another_task_creates_the_target(history, spec):
        decision = decide(history, spec)
        lake.load_table(TABLE).manage_snapshots().create_branch(main, "release").commit()
        return decision

    monkeypatch.setattr(pyiceberg_publish, "decide", decide_then_another_task_creates_the_target)
    op = _publish(target_branch="release", create_target_branch=True, expected_snapshot_id=audited)
    with pytest.raises(IcebergJobError, match=r"branch release was created concurrently.*Nothing was"):
        op.execute(_context("publish"))
    assert _refs(lake) == {"main": main, "audit": audited, "release": main}


def test_a_commit_elsewhere_in_the_table_meanwhile_does_not_fail_the_publish(lake, monkeypatch):
    """The SQL catalog's swap fails on any newer metadata: checked again, the requirements still hold."""
    main, audited = _audited_branch(lake)
    commit_table = SqlCatalog.commit_table
    lost: list[int] = []

    def another_branch_commits_first_and_the_swap_is_lost(self, table, requirements, updates):
        if lost or any(getattr(update, "ref_name", None) == "other" for update in updates):
            return commit_table(self, table, requirements, updates)  # the other writer's, or the retry
        lost.append(main)
        lake.load_table(TABLE).manage_snapshots().create_branch(main, "other").commit()
        lost[0] = _append(lake, branch="other")
        from pyiceberg.exceptions import CommitFailedException

        raise CommitFailedException(f"Table has been updated by another process: {TABLE}")

    monkeypatch.setattr(SqlCatalog, "commit_table", another_branch_commits_first_and_the_swap_is_lost)
    result = _publish(expected_snapshot_id=audited, drop_branch=True).execute(_context("publish"))
    assert (result["snapshot_id"], result["branch_dropped"]) == (audited, True)
    assert _refs(lake) == {"main": audited, "other": lost[0]}


def test_a_publish_whose_answer_is_lost_says_the_outcome_is_unknown_and_its_retry_finds_it_published(
    lake, monkeypatch
):
    _, audited = _audited_branch(lake)
    commit_table = SqlCatalog.commit_table

    def commits_then_the_connection_drops(self, table, requirements, updates):
        commit_table(self, table, requirements, updates)
        raise ConnectionResetError("connection reset by peer")

    monkeypatch.setattr(SqlCatalog, "commit_table", commits_then_the_connection_drops)
    with pytest.raises(
        IcebergJobError, match=r"the outcome is unknown .* Retrying the task is safe"
    ) as raised:
        _publish(expected_snapshot_id=audited).execute(_context("publish"))
    assert "Nothing was changed" not in str(raised.value)
    monkeypatch.setattr(SqlCatalog, "commit_table", commit_table)
    retried = _publish(expected_snapshot_id=audited).execute(_context("publish"))
    assert (retried["already_published"], _refs(lake)["main"]) == (True, audited)


def test_a_refusal_fails_with_the_spark_jobs_words_and_changes_nothing(lake):
    _, audited = _audited_branch(lake)
    later = _append(lake)  # main moved since the branch was made
    with pytest.raises(IcebergJobError) as raised:
        _publish(expected_snapshot_id=audited).execute(_context("publish"))
    assert str(raised.value) == (
        f"{QUALIFIED}: PublishError: cannot publish branch 'audit' of {QUALIFIED}: main moved since the "
        f"branch was made (main is at snapshot {later}, which is not an ancestor of audit's {audited}), "
        "and a fast-forward would drop its newer commits. main is unchanged and nothing was published; "
        "redo the branch's changes on a branch made from main's current snapshot, audit and publish that"
    )
    with pytest.raises(
        IcebergJobError, match=rf"RollbackError: cannot roll back table {QUALIFIED} to snapshot "
    ):
        IcebergRollbackOperator(task_id="rollback", table=TABLE, snapshot_id=audited).execute(_context("rb"))
    with pytest.raises(
        IcebergJobError, match=r"^lite\.db\.nope: TableNotFoundError: table lite\.db\.nope does"
    ):
        IcebergTagOperator(task_id="tag", table="db.nope", tag="eod").execute(_context("tag"))
    assert _refs(lake) == {"main": later, "audit": audited}


def test_bad_input_is_refused_before_the_catalog_is_read(lake, monkeypatch):
    def no_catalog(*args, **kwargs):
        raise AssertionError("the catalog was read")

    monkeypatch.setattr("airflow_iceberg.catalog.pyiceberg_tables.table_loader", no_catalog)
    with pytest.raises(InvalidSpecError, match="expected_snapshot_id must be an integer snapshot id"):
        op = _publish(expected_snapshot_id="{{ ti.xcom_pull(task_ids='audit') }}")
        op.expected_snapshot_id = "None"  # as rendered from a missing XCom
        op.execute(_context("publish"))
    with pytest.raises(
        InvalidSpecError, match="engine must be one of 'auto', 'pyiceberg', 'spark', got 'jvm'"
    ):
        _publish(engine="jvm").execute(_context("publish"))


# --------------------------------------------------------------------------- rollback and tag retries


def test_a_rollback_killed_after_recording_where_main_was_is_finished_by_its_retry(lake, monkeypatch):
    main, audited = _audited_branch(lake)
    _publish(expected_snapshot_id=audited).execute(_context("publish"))
    record = rollback_module.record_snapshot

    def record_then_die(*args):
        record(*args)
        raise Killed

    monkeypatch.setattr(rollback_module, "record_snapshot", record_then_die)
    op = IcebergRollbackOperator(task_id="rollback", table=TABLE, snapshot_id=main)
    with pytest.raises(Killed):
        op.execute(_context("rollback"))
    assert _refs(lake)["main"] == audited  # not rolled back yet; the marker says from where
    monkeypatch.setattr(rollback_module, "record_snapshot", record)
    landed = _append(lake)  # a commit lands on main before the retry: rolled back with the rest

    retried = IcebergRollbackOperator(task_id="rollback", table=TABLE, snapshot_id=main).execute(
        _context("rollback")
    )
    assert (retried["previous_snapshot_id"], retried["snapshot_id"]) == (audited, main)
    assert retried["already_rolled_back"] is False and _refs(lake)["main"] == main
    again = _append(lake)  # another writer after the rollback; then Airflow retries once more
    last = IcebergRollbackOperator(task_id="rollback", table=TABLE, snapshot_id=main).execute(
        _context("rollback")
    )
    assert (last["already_rolled_back"], last["snapshot_id"], _refs(lake)["main"]) == (True, again, again)
    table = lake.load_table(TABLE)
    assert table.snapshot_by_id(again).parent_snapshot_id == main  # the later commit stays, on main
    assert table.snapshot_by_id(landed).parent_snapshot_id == audited  # and the rolled-back one is gone


def test_a_commit_landing_on_main_while_rolling_back_is_rolled_back_with_the_rest(lake, monkeypatch):
    """As Iceberg's rollback_to_snapshot does: the target is checked against main again, and main moves."""
    main, audited = _audited_branch(lake)
    _publish(expected_snapshot_id=audited).execute(_context("publish"))
    target = rollback_module.rollback_target
    landed: list[int] = []

    def resolve_then_another_writer_commits(history, spec, rolled_from):
        resolved = target(history, spec, rolled_from)
        landed.append(_append(lake))
        return resolved

    monkeypatch.setattr(rollback_module, "rollback_target", resolve_then_another_writer_commits)
    result = IcebergRollbackOperator(
        task_id="rollback", table=TABLE, snapshot_id=main, idempotent=False
    ).execute(_context("rollback"))
    assert (result["snapshot_id"], _refs(lake)["main"]) == (main, main)
    log = [entry.snapshot_id for entry in lake.load_table(TABLE).metadata.snapshot_log]
    assert log[-2:] == [landed[0], main]


def test_a_retried_tag_never_moves_the_tag_to_a_later_snapshot_of_main(lake, monkeypatch):
    from airflow_iceberg.jobs import branches

    main, _ = _audited_branch(lake)
    record = branches.record_snapshot

    def record_then_die(*args):
        record(*args)
        raise Killed

    monkeypatch.setattr(branches, "record_snapshot", record_then_die)
    with pytest.raises(Killed):
        IcebergTagOperator(task_id="tag", table=TABLE, tag="eod").execute(_context("tag"))
    monkeypatch.setattr(branches, "record_snapshot", record)
    later = _append(lake)  # main moves before Airflow's retry
    retried = IcebergTagOperator(task_id="tag", table=TABLE, tag="eod").execute(_context("tag"))
    assert (retried["snapshot_id"], retried["already_tagged"], _refs(lake)["eod"]) == (main, False, main)
    again = IcebergTagOperator(task_id="tag", table=TABLE, tag="eod").execute(_context("tag"))
    assert (again["snapshot_id"], again["already_tagged"]) == (main, True)
    assert _refs(lake)["main"] == later


def test_a_tag_that_another_task_made_meanwhile_is_not_replaced_unasked(lake, monkeypatch):
    from airflow_iceberg.jobs import branches

    main, audited = _audited_branch(lake)
    tag_with = branches.tag_with

    def another_task_tags_first(refs, spec, marker_id):
        history = refs.history

        def read_then_tag():
            read = history()
            lake.load_table(TABLE).manage_snapshots().create_tag(audited, "keep").commit()
            return read

        refs.history = read_then_tag
        return tag_with(refs, spec, marker_id)

    monkeypatch.setattr(branches, "tag_with", another_task_tags_first)
    with pytest.raises(IcebergJobError, match="tag keep was created concurrently"):
        IcebergTagOperator(task_id="t", table=TABLE, tag="keep", snapshot_id=main, replace=False).execute(
            _context("t")
        )
    assert _refs(lake)["keep"] == audited


# --------------------------------------------------------------------------- which path, and why


def test_a_hadoop_catalog_and_engine_spark_run_the_spark_job(
    lake, iceberg_connection, tmp_path
):
    ran: list[str] = []
    hadoop = iceberg_connection(
        "hadoop_lake",
        extra={
            "catalog_name": "h",
            "catalog_type": "hadoop",
            "warehouse": tmp_path.as_uri(),
            "runtime_jar": "/j.jar",
        },
    )
    _audited_branch(lake)
    with _the_spark_job(ran):
        IcebergTagOperator(task_id="on_hadoop", table=TABLE, tag="t", iceberg_conn_id=hadoop).execute(
            _context("a")
        )
        IcebergTagOperator(task_id="asked", table=TABLE, tag="t", engine="spark").execute(_context("b"))
    assert ran == ["on_hadoop", "asked"] and "t" not in _refs(lake)
    with pytest.raises(InvalidSpecError, match=r"engine='pyiceberg' cannot run this tag .* no Hadoop"):
        IcebergTagOperator(
            task_id="t", table=TABLE, tag="t", iceberg_conn_id=hadoop, engine="pyiceberg"
        ).execute(_context("c"))


def test_a_worker_without_pyiceberg_runs_the_spark_job_or_refuses_when_pyiceberg_is_asked_for(
    lake, monkeypatch
):
    from airflow_iceberg.operators import metadata_steps

    ran: list[str] = []
    monkeypatch.setattr(metadata_steps, "pyiceberg_installed", lambda: False)
    _audited_branch(lake)
    with _the_spark_job(ran):
        IcebergTagOperator(task_id="tag", table=TABLE, tag="t").execute(_context("tag"))
    assert ran == ["tag"]
    with pytest.raises(InvalidSpecError, match="pyiceberg is not installed in this worker"):
        IcebergTagOperator(task_id="tag", table=TABLE, tag="t", engine="pyiceberg").execute(_context("tag"))


@pytest.mark.parametrize(
    ("config", "conf", "over_connect", "why"),
    [
        (CatalogConfig(catalog_type="rest", uri="http://r"), None, False, None),
        (
            CatalogConfig(catalog_type="jdbc", uri="jdbc:sqlite:/c.db", warehouse="file:///w"),
            None,
            False,
            None,
        ),
        (CatalogConfig(catalog_type="hive", uri="thrift://m:9083", warehouse="file:///w"), None, False, None),
        (CatalogConfig(catalog_type="glue", warehouse="s3://b/w"), None, False, "Glue commit is not"),
        (
            CatalogConfig(
                catalog_type="rest", uri="http://r", catalog_properties={"rest.sigv4-enabled": "true"}
            ),
            None,
            False,
            "lacks boto3",
        ),
        (CatalogConfig(catalog_type="hadoop", warehouse="file:///w"), None, False, "no Hadoop catalog"),
        (CatalogConfig(catalog_type="nessie", uri="http://n"), None, False, "no Nessie catalog"),
        (CatalogConfig(catalog_type=None, catalog_impl="x.Catalog"), None, False, "custom catalog_impl"),
        (
            CatalogConfig(catalog_type="rest", uri="http://r", connect_server_credentials=True),
            None,
            True,
            "credentials are the Spark Connect server's",
        ),
        (
            CatalogConfig(catalog_type="rest", uri="http://r", connect_server_credentials=True),
            None,
            False,
            None,
        ),
        (
            CatalogConfig(catalog_name="demo", catalog_type="rest", uri="http://r"),
            {"spark.sql.catalog.demo.uri": "http://elsewhere"},
            False,
            "conf sets catalog properties only Spark reads (spark.sql.catalog.demo.uri)",
        ),
        (
            CatalogConfig(catalog_type="jdbc", uri="jdbc:mysql://h/db", warehouse="file:///w"),
            None,
            False,
            "SQLite or PostgreSQL only",
        ),
        (
            CatalogConfig(
                catalog_type="hive",
                uri="thrift://m",
                hadoop_properties={"iceberg.engine.hive.lock-enabled": "false"},
            ),
            None,
            False,
            "Hadoop settings (iceberg.engine.hive.lock-enabled)",
        ),
    ],
)
def test_which_catalogs_pyiceberg_commits_to_exactly(config, conf, over_connect, why):
    refused = catalog_refusal(config, conf, over_connect)
    assert refused is None if why is None else why in str(refused)


def test_a_table_whose_metadata_pyiceberg_would_not_write_exactly_keeps_the_spark_path(lake):
    _audited_branch(lake)
    config = CatalogConfig(catalog_name=CATALOG, catalog_type="jdbc", uri="jdbc:sqlite:/c.db")
    table = lake.load_table(TABLE)
    assert table_refusal(config, table) is None

    path = Path(table.metadata_location.removeprefix("file://"))
    written = json.loads(path.read_text())
    path.write_text(json.dumps({**written, "encryption-keys": [{"key-id": "k"}]}))  # a newer spec's field
    assert "fields pyiceberg would drop when it writes the next metadata file (/encryption-keys)" in str(
        table_refusal(config, table)
    )
    path.write_text(json.dumps(written))

    with lake.load_table(TABLE).transaction() as transaction:
        transaction.set_properties({"write.metadata.compression-codec": "gzip"})
    assert "gzip (write.metadata.compression-codec)" in str(table_refusal(config, lake.load_table(TABLE)))
    hive = CatalogConfig(catalog_name=CATALOG, catalog_type="hive", uri="thrift://m")
    with lake.load_table(TABLE).transaction() as transaction:
        transaction.set_properties(
            {"write.metadata.compression-codec": "none", "engine.hive.lock-enabled": "false"}
        )
    assert "without the metastore's lock" in str(table_refusal(hive, lake.load_table(TABLE)))
    assert table_refusal(config, lake.load_table(TABLE)) is None  # only a Hive table commits with that lock


def test_the_fields_pyiceberg_would_drop_are_found_at_any_depth():
    assert dropped_fields({"a": 1, "b": None, "c": [{"d": 1, "e": 2}]}, {"a": 1, "c": [{"d": 1}]}) == [
        "/c[0]/e"
    ]
    assert dropped_fields({"a": [1, 2]}, {"a": [1]}) == ["/a"]
    assert (
        dropped_fields({"refs": {"main": {"snapshot-id": 1}}}, {"refs": {"main": {"snapshot-id": 1}}}) == []
    )


def test_the_worker_path_imports_neither_pyspark_nor_the_spark_job():
    """The decisions are the job's, but pyspark (half a second to import) never loads in the worker."""
    code = (
        "import sys\n"
        "import airflow_iceberg.operators.metadata_steps, airflow_iceberg.catalog.pyiceberg_publish\n"
        "import airflow_iceberg.catalog.pyiceberg_lineage, airflow_iceberg.jobs.rollback\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] == 'pyspark' or m.endswith('iceberg_job')]\n"
        "assert not loaded, loaded\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr

"""Spark Connect mode against a real Spark Connect server (Spark 4.1 + the Iceberg runtime).

Everything here shares one server (``spark_connect_server``, session-scoped; keep every Connect
test in this file so ``--dist loadfile`` starts it once). The job-level tests drive the job
package with a Connect session from this interpreter (pyspark-client, no JVM), as the operators
do in a worker; the in-process operator tests cover ``on_kill`` and errors; two real
``airflow dags test`` runs cover the example DAG (with sentinel secrets) and the four story DAGs.
The example DAG runs in spark-submit mode elsewhere (the same file: only the ``spark_default``
connection differs); the story DAGs run end to end only here, their operators' spark-submit path
being the example DAG's, and their job functions tested on both Spark lines in ``tests/jobs``.
pyiceberg, reading the metadata files, checks every result.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from datetime import date

import pytest

from airflow_iceberg.exceptions import IcebergJobError, InvalidCatalogConfigError, InvalidSpecError
from tests.heavy_modules import KUBERNETES, SPARK_SUBMIT
from tests.integration.airflow_runner import hadoop_catalog_connection, recorded_imports, recording_imports
from tests.integration.catalog_connections import RESOLVING_FILE_IO, rest_reader, rest_spark_connection
from tests.integration.event_logs import shows_redacted
from tests.integration.in_process import execute
from tests.integration.process_sampler import CommandLineSampler
from tests.jobs.helpers import Lake, values_query, write_spec
from tests.servers.connect_catalog_secrets import DEMO_SECRETS
from tests.servers.spark_connect import SERVER_SPARK_LINE

ROWS = values_query([(1, "a"), (2, "b")], "id, name")
TRY_KEY = "orders:append:manual__2024-01-02:-1"
#: The demo catalog's secrets, which the shared server starts with (tests/servers/connect_catalog_secrets.py).
SENTINELS = tuple(DEMO_SECRETS.values())
#: Hours of hashing on 2 cores, so only an interrupt ends it, in 30,000 tasks of about a second:
#: a cancelled Spark task stops only between rows it checks, and the server is shared with the
#: next test (two tasks of 1.5e9 rows each kept both cores busy for minutes after a kill).
SLOW_WRITE = (
    "SELECT id, substr(sha2(repeat(CAST(id AS STRING), 500), 512), 1, 8) AS name "
    "FROM range(0, 3000000000, 1, 30000)"
)


# ---------------------------------------------------------------------------- the job, over Connect


@pytest.fixture(scope="module")
def connect_lake(spark_connect_server, tmp_path_factory):
    """A Connect session with catalog ``lake`` (Hadoop, a private warehouse) and its pyiceberg reader."""
    from pyspark.sql.connect.session import SparkSession

    warehouse = tmp_path_factory.mktemp("connect-lake")
    spark = SparkSession.builder.remote(spark_connect_server.url).create()
    spark.conf.set("spark.sql.catalog.lake", "org.apache.iceberg.spark.SparkCatalog")
    spark.conf.set("spark.sql.catalog.lake.type", "hadoop")
    spark.conf.set("spark.sql.catalog.lake.warehouse", f"file://{warehouse}")
    yield spark, Lake(warehouse)
    spark.stop()


@pytest.fixture
def table(request):
    return f"lake.db.{request.node.name[:40].replace('[', '_').replace(']', '')}"


def test_a_retry_reuses_its_commit_and_a_rolled_back_one_is_written_again(connect_lake, table):
    from airflow_iceberg.jobs.writes import write_table

    spark, lake = connect_lake
    created = write_table(spark, write_spec(table, "create", ROWS))
    first = write_table(spark, write_spec(table, "append", ROWS), commit_id=TRY_KEY, reuse_commit=True)
    retried = write_table(spark, write_spec(table, "append", ROWS), commit_id=TRY_KEY, reuse_commit=True)
    assert retried["reused_earlier_commit"] is True
    assert retried["snapshot_id"] == first["snapshot_id"] == lake.current_snapshot_id(table)
    assert lake.summary(table)["airflow-iceberg.commit-id"] == TRY_KEY
    assert lake.ids(table) == [1, 1, 2, 2]

    spark.sql(f"CALL lake.system.rollback_to_snapshot('{table[5:]}', {created['snapshot_id']})").collect()
    repaired = write_table(spark, write_spec(table, "append", ROWS), commit_id=TRY_KEY, reuse_commit=True)
    assert "reused_earlier_commit" not in repaired  # the rolled-back commit is not in main's history
    assert repaired["parent_snapshot_id"] == created["snapshot_id"]
    assert lake.ids(table) == [1, 1, 2, 2]


def test_lineage_over_connect_names_the_servers_application_but_not_a_querys_tables(connect_lake, table):
    """No JVM plan reaches a Connect client: a query's tables are not inputs; the rest is described."""
    from airflow_iceberg.jobs.lineage import describe_lineage
    from airflow_iceberg.jobs.writes import write_table

    spark, lake = connect_lake
    write_table(spark, write_spec(table, "create", ROWS))
    described = describe_lineage(spark, write_spec(table, "append", f"SELECT * FROM {table}"))
    assert described["query_tables"] == []
    assert described["application"]["id"] == spark.conf.get("spark.app.id") != ""
    assert described["tables"][table]["location"].rstrip("/").endswith(table[5:].replace(".", "/"))
    assert described["tables"][table]["format"] == "parquet"
    assert described["tables"][table]["snapshot_id"] == lake.current_snapshot_id(table)


def test_user_sql_is_parsed_by_the_server_and_a_statement_never_runs(connect_lake, table):
    from airflow_iceberg.jobs import user_sql
    from airflow_iceberg.jobs.writes import write_table

    spark, lake = connect_lake
    write_table(spark, write_spec(table, "create", ROWS))
    before = lake.state(table)
    for statement in (f"WITH x AS (SELECT 1) DELETE FROM {table}", f"DELETE FROM {table}"):
        with pytest.raises(InvalidSpecError, match=r"not a single Spark SQL query: \[PARSE_SYNTAX_ERROR\]"):
            user_sql.query_frame(spark, statement)
    assert lake.state(table) == before and lake.ids(table) == [1, 2]
    assert user_sql.query_frame(spark, f"SELECT id FROM {table}").count() == 2
    user_sql.check_expression(spark, "id = 1 OR name = 'b'", "filter")  # columns need not resolve here
    for text in ("id = 1 OR", "id = 1) OR (id = 2", "id = 1 WHEN MATCHED THEN DELETE", "id ="):
        with pytest.raises(InvalidSpecError, match="is not one SQL expression"):
            user_sql.check_expression(spark, text, "filter")


def test_jvm_only_features_are_refused_by_the_job_before_anything_runs(connect_lake, table, tmp_path):
    from airflow_iceberg.jobs.iceberg_job import run_job
    from airflow_iceberg.jobs.spec.request import JobRequest
    from airflow_iceberg.jobs.spec.upkeep import OrphanFilesSpec

    spark, lake = connect_lake
    write_table_spec = write_spec(table, "create", ROWS)
    assert run_job(spark, JobRequest(spec=write_table_spec)) == 0
    before = lake.state(table)
    recent = OrphanFilesSpec(table=table, older_than=int(time.time() * 1000), allow_recent_files=True)
    result_file = tmp_path / "orphans.json"
    assert run_job(spark, JobRequest(spec=recent.validated(), result_file=str(result_file))) == 1
    assert "spark-submit only" in json.loads(result_file.read_text())["error"]
    assert lake.state(table) == before


# ------------------------------------- SQL commits over Connect: the session's snapshot properties

#: The commit properties a task's MERGE or DELETE carries, as the operators pass them.
TASK_PROPERTIES = {"airflow.dag-id": "orders", "airflow.task-id": "merge", "airflow.try-number": "1"}
MERGE_CLAUSES = (
    {"when": "matched", "then": "update", "set": {"name": "s.name"}},
    {"when": "not_matched", "then": "insert"},
)


def _merge_spec(table, query):
    from airflow_iceberg.jobs.spec.row_changes import MergeClause, MergeSpec
    from airflow_iceberg.jobs.spec.sources import Source

    clauses = tuple(MergeClause.from_mapping(c) for c in MERGE_CLAUSES)
    return MergeSpec(table, source=Source(query=query), keys=("id",), clauses=clauses).validated()


def _tagged(lake, table, commit_id):
    return [s for s in lake.snapshots(table) if s.summary.get("airflow-iceberg.commit-id") == commit_id]


def test_merge_delete_and_ctas_over_connect_carry_the_commit_id_and_leave_the_session_clean(
    connect_lake, table
):
    """Each SQL commit is tagged through the session's snapshot properties, a DELETE of whole
    partitions too (Spark's metadata-only delete would commit untagged); a retry finds the commit;
    the next statement of the session carries none of it."""
    from airflow_iceberg.jobs.merges import delete_from, merge_into
    from airflow_iceberg.jobs.session_commit_tags import EXCLUDED_RULES, SESSION_PROPERTY_PREFIX
    from airflow_iceberg.jobs.spec.row_changes import DeleteSpec
    from airflow_iceberg.jobs.writes import write_table

    spark, lake = connect_lake
    rows = values_query([(1, "a", "x"), (2, "b", "x"), (3, "c", "y")], "id, name, part")
    write_table(spark, write_spec(table, "create", rows, partition_by=["part"]))
    spark.conf.set(EXCLUDED_RULES, "org.apache.spark.sql.catalyst.optimizer.ConstantFolding")  # a user's
    merge = _merge_spec(table, values_query([(1, "A", "x"), (4, "d", "y")], "id, name, part"))
    merged = merge_into(spark, merge, "merge-1", TASK_PROPERTIES, reuse_commit=True)
    retried = merge_into(spark, merge, "merge-1", TASK_PROPERTIES, reuse_commit=True)
    assert (retried["reused_earlier_commit"], retried["snapshot_id"]) == (True, merged["snapshot_id"])
    (merge_commit,) = _tagged(lake, table, "merge-1")
    assert merge_commit.snapshot_id == merged["snapshot_id"]
    assert merge_commit.summary["airflow.dag-id"] == "orders"
    assert [r["name"] for r in lake.rows(table)] == ["A", "b", "c", "d"]

    whole = DeleteSpec(table, condition="part = 'y'").validated()  # whole files: metadata-only in Spark
    deleted = delete_from(spark, whole, "delete-1", TASK_PROPERTIES, reuse_commit=True)
    (delete_commit,) = _tagged(lake, table, "delete-1")
    assert delete_commit.snapshot_id == deleted["snapshot_id"] == lake.current_snapshot_id(table)
    assert lake.ids(table) == [1, 2]
    assert delete_from(spark, whole, "delete-1", TASK_PROPERTIES, reuse_commit=True)["reused_earlier_commit"]

    ctas = write_spec(f"{table}_ctas", "create", f"SELECT * FROM {table}", partition_by=["truncate(1, name)"])
    write_table(spark, ctas, commit_id="ctas-1", commit_properties=TASK_PROPERTIES)
    assert [s.summary.get("airflow-iceberg.commit-id") for s in lake.snapshots(f"{table}_ctas")] == ["ctas-1"]
    assert lake.partition_fields(f"{table}_ctas")[0][1].startswith("truncate")

    left = {k: v for k, v in spark.conf.getAll.items() if k.startswith(SESSION_PROPERTY_PREFIX)}
    assert left == {}
    assert spark.conf.get(EXCLUDED_RULES) == "org.apache.spark.sql.catalyst.optimizer.ConstantFolding"
    spark.conf.unset(EXCLUDED_RULES)
    spark.sql(f"INSERT INTO {table} VALUES (9, 'z', 'z')").collect()
    assert "airflow-iceberg.commit-id" not in lake.summary(table)


@pytest.mark.parametrize(
    ("mode", "condition"), [("copy-on-write", "true"), ("merge-on-read", "TRUE"), ("copy-on-write", "1 = 1")]
)
def test_a_delete_whose_condition_holds_for_every_row_is_refused_over_connect_before_anything_runs(
    connect_lake, table, mode, condition
):
    """``WHERE true`` is no row-level delete in Spark (it goes to the table's truncate,
    ``SparkTable.deleteWhere``: it committed untagged, and the job said it had not committed);
    ``1 = 1`` folds to true, and with the metadata-only delete excluded Spark's copy-on-write read
    is pruned away: a tagged commit that deleted nothing. A condition on the values that happens
    to hold for every row is a row-level delete, tagged, and deletes them all."""
    from airflow_iceberg.jobs.merges import delete_from
    from airflow_iceberg.jobs.session_commit_tags import EXCLUDED_RULES, SESSION_PROPERTY_PREFIX
    from airflow_iceberg.jobs.spec.row_changes import DeleteSpec
    from airflow_iceberg.jobs.writes import write_table

    spark, lake = connect_lake
    table = f"{table}_{uuid.uuid4().hex[:6]}"  # the parameters would share the fixture's name
    rows = values_query([(1, "a", "x"), (2, "b", "x"), (3, "c", "y")], "id, name, part")
    properties = {"write.delete.mode": mode, "format-version": "2"}
    write_table(spark, write_spec(table, "create", rows, partition_by=["part"], table_properties=properties))
    before = lake.state(table)
    with pytest.raises(InvalidSpecError, match=r"holds for every row of .*Nothing was changed"):
        delete_from(spark, DeleteSpec(table, condition=condition).validated(), "every", TASK_PROPERTIES)
    assert lake.state(table) == before and lake.ids(table) == [1, 2, 3]
    assert not [k for k in spark.conf.getAll if k.startswith(SESSION_PROPERTY_PREFIX) or k == EXCLUDED_RULES]
    values = DeleteSpec(table, condition="id >= 1").validated()
    deleted = delete_from(spark, values, "delete-all", TASK_PROPERTIES, reuse_commit=True)
    (commit,) = _tagged(lake, table, "delete-all")
    assert (deleted["committed"], deleted["snapshot_id"]) == (True, commit.snapshot_id)
    assert commit.snapshot_id == lake.current_snapshot_id(table) and lake.ids(table) == []


def test_a_delete_the_server_cannot_tell_it_would_tag_is_refused_before_anything_runs(connect_lake, tmp_path):
    """The session catalog does not answer ``system.iceberg_version()``: its release is unknown, and
    an untagged commit is what a retry cannot find, so the job refuses before looking at the table."""
    from airflow_iceberg.jobs.iceberg_job import run_job
    from airflow_iceberg.jobs.spec.request import JobRequest
    from airflow_iceberg.jobs.spec.row_changes import DeleteSpec

    spark, _lake = connect_lake
    result_file = tmp_path / "delete.json"
    spec = DeleteSpec("spark_catalog.db.not_there", condition="id = 1").validated()
    assert run_job(spark, JobRequest(spec=spec, result_file=str(result_file))) == 1
    error = json.loads(result_file.read_text())["error"]
    assert error.startswith("InvalidSpecError: DELETE FROM over Spark Connect needs Iceberg 1.11 or later")
    assert "does not tell which release spark_catalog.db.not_there's catalog runs" in error


def test_a_merges_session_properties_never_tag_another_sessions_commit_on_the_server(
    connect_lake, spark_connect_server, table
):
    """Task A's properties are set on its session while task B, in a session of its own on the same
    server, commits (to a table of its own: A's MERGE would conflict with B's rows otherwise): B's
    commit carries none of them, A's MERGE carries its own."""
    from pyspark.sql.connect.session import SparkSession

    from airflow_iceberg.jobs.commits import with_commit_properties
    from airflow_iceberg.jobs.merges import run_committing_sql
    from airflow_iceberg.jobs.writes import write_table

    spark, lake = connect_lake
    other_table = f"{table[:-6]}_other"
    write_table(spark, write_spec(table, "create", ROWS))
    write_table(spark, write_spec(other_table, "create", ROWS))
    other = SparkSession.builder.remote(spark_connect_server.url).create()
    try:
        for key, value in spark.conf.getAll.items():
            if key.startswith("spark.sql.catalog.lake"):
                other.conf.set(key, value)

        def merge_while_the_other_task_commits() -> None:
            b_rows = values_query([(7, "g")], "id, name")
            write_table(other, write_spec(other_table, "append", b_rows), "task-b")
            run_committing_sql(
                spark,
                f"MERGE INTO {table} t USING (SELECT 1 AS id, 'A' AS name) s ON t.id = s.id "
                "WHEN MATCHED THEN UPDATE SET name = s.name",
            )

        properties = {"airflow-iceberg.commit-id": "task-a", "airflow.task-id": "a"}
        with_commit_properties(spark, properties, merge_while_the_other_task_commits)
    finally:
        other.stop()
    append = lake.snapshots(other_table)[-1]
    assert append.summary["airflow-iceberg.commit-id"] == "task-b"
    assert append.summary.get("airflow.task-id") is None
    merge = lake.snapshots(table)[-1]
    assert (merge.summary["airflow-iceberg.commit-id"], merge.summary["airflow.task-id"]) == ("task-a", "a")
    assert lake.rows(table) == [{"id": 1, "name": "A"}, {"id": 2, "name": "b"}]
    assert lake.ids(other_table) == [1, 2, 7]


def test_orphan_files_older_than_a_day_are_found_then_removed_by_the_procedure(connect_lake, table):
    """Over Connect, orphan removal is Iceberg's ``remove_orphan_files`` procedure (24-hour floor)."""
    from airflow_iceberg.jobs.maintenance import remove_orphan_files
    from airflow_iceberg.jobs.spec.upkeep import OrphanFilesSpec
    from airflow_iceberg.jobs.writes import write_table

    spark, lake = connect_lake
    write_table(spark, write_spec(table, "create", ROWS))
    state = lake.state(table)
    data_dir = lake._metadata_dir(table).parent / "data"
    stray = data_dir / "00000-killed-write.parquet"  # what a write killed before its commit leaves
    stray.write_bytes(next(data_dir.glob("*.parquet")).read_bytes())
    three_days_ago = time.time() - 3 * 86400
    os.utime(stray, (three_days_ago, three_days_ago))
    cutoff = int((time.time() - 2 * 86400) * 1000)

    found = remove_orphan_files(spark, OrphanFilesSpec(table, older_than=cutoff).validated())
    assert found["orphan_file_count"] == 1 and found["orphan_files"][0].endswith(stray.name)
    assert stray.exists()
    removed = remove_orphan_files(spark, OrphanFilesSpec(table, older_than=cutoff, dry_run=False).validated())
    assert removed["orphan_file_count"] == 1 and not stray.exists()
    assert lake.state(table) == state
    assert lake.ids(table) == [1, 2]


def test_write_audit_publish_tags_compaction_and_reads_work_over_connect(connect_lake, table):
    """A branch write, publish, tag, compaction, a filtered time-travel read: SQL and metadata tables."""
    from airflow_iceberg.jobs import upkeep
    from airflow_iceberg.jobs.branches import tag_snapshot
    from airflow_iceberg.jobs.publish import publish_branch
    from airflow_iceberg.jobs.reads import read_table
    from airflow_iceberg.jobs.spec.branches import PublishSpec, TagSpec
    from airflow_iceberg.jobs.spec.upkeep import RewriteDataFilesSpec
    from airflow_iceberg.jobs.writes import write_table
    from tests.jobs.helpers import read_spec

    spark, lake = connect_lake
    created = write_table(spark, write_spec(table, "create", ROWS))
    staged = write_table(
        spark,
        write_spec(table, "append", values_query([(3, "c")], "id, name"), branch="audit"),
        commit_id="wap",
        reuse_commit=True,
    )
    assert lake.current_snapshot_id(table) == created["snapshot_id"]  # main untouched until publish
    published = publish_branch(spark, PublishSpec(table=table, branch="audit").validated())
    assert lake.current_snapshot_id(table) == staged["snapshot_id"] == published["snapshot_id"]
    spark.sql(f"ALTER TABLE {table} DROP BRANCH audit").collect()
    retried = write_table(  # after the publish and the drop: found in main's history, not written again
        spark,
        write_spec(table, "append", values_query([(3, "c")], "id, name"), branch="audit"),
        commit_id="wap",
        reuse_commit=True,
    )
    assert (retried["snapshot_id"], retried["found_on_branch"]) == (staged["snapshot_id"], "main")
    assert set(lake.load(table).metadata.refs) == {"main"}
    tag_snapshot(spark, TagSpec(table=table, tag="day1").validated())
    assert lake.load(table).metadata.refs["day1"].snapshot_id == staged["snapshot_id"]
    compacted = upkeep.rewrite_data_files(
        spark, RewriteDataFilesSpec(table=table, options={"min-input-files": "2"}).validated()
    )
    assert lake.ids(table) == [1, 2, 3] and len(lake.data_files(table)) == 1, compacted
    before = read_spec(table, snapshot_id=created["snapshot_id"], filter="id > 1", preview_rows=5)
    read = read_table(spark, before)
    assert (read["row_count"], [row["id"] for row in read["preview"]]) == (1, [2])


def test_an_audit_branch_is_compacted_over_connect_after_asking_the_servers_runtime(connect_lake, table):
    """The job asks the server's runtime (no py4j) before ``rewrite_data_files(branch => ...)``."""
    from airflow_iceberg.jobs import upkeep
    from airflow_iceberg.jobs.iceberg_runtime import runtime_version
    from airflow_iceberg.jobs.spec.upkeep import RewriteDataFilesSpec
    from airflow_iceberg.jobs.writes import write_table
    from tests.servers.spark_connect import SERVER_ICEBERG_VERSION

    spark, lake = connect_lake
    created = write_table(spark, write_spec(table, "create", ROWS))
    for row in ((3, "c"), (4, "d")):
        write_table(spark, write_spec(table, "append", values_query([row], "id, name"), branch="audit"))
    head, rows = lake.branch_head(table, "audit"), lake.rows(table, lake.branch_head(table, "audit"))
    assert runtime_version(spark, table) == SERVER_ICEBERG_VERSION
    spec = RewriteDataFilesSpec(table=table, branch="audit", options={"min-input-files": "2"})
    compacted = upkeep.rewrite_data_files(spark, spec.validated())
    assert (compacted["previous_snapshot_id"], compacted["snapshot_id"]) == (
        head,
        lake.branch_head(table, "audit"),
    )
    assert (
        lake.rows(table, compacted["snapshot_id"]) == rows
        and len(lake.files_at(table, compacted["snapshot_id"])) == 1
    )
    assert lake.current_snapshot_id(table) == created["snapshot_id"]  # main untouched


def _ref_action(spark, spec, commit_id="wap:ref:manual__2024-01-02:-1:1:"):
    """One try of a publish, tag or rollback task, through the job's dispatch, as the operator runs it."""
    from airflow_iceberg.jobs.iceberg_job import run
    from airflow_iceberg.jobs.spec.request import JobRequest

    return run(spark, JobRequest(spec=spec.validated(), commit_id=commit_id, reuse_commit=True))


def _refs(lake, table) -> dict[str, int]:
    return {name: ref.snapshot_id for name, ref in lake.load(table).metadata.refs.items()}


def test_publish_over_connect_refuses_a_missing_target_and_an_unaudited_commit(connect_lake, table):
    from airflow_iceberg.jobs.spec.branches import PublishSpec
    from airflow_iceberg.jobs.table_state import TableStateError
    from airflow_iceberg.jobs.writes import write_table

    spark, lake = connect_lake
    write_table(spark, write_spec(table, "create", ROWS))
    audited = write_table(spark, write_spec(table, "append", ROWS, branch="audit"))["snapshot_id"]
    state, refs = lake.state(table), _refs(lake, table)
    with pytest.raises(TableStateError, match=r"target branch 'mian' does not exist .* nothing was"):
        _ref_action(spark, PublishSpec(table, branch="audit", target_branch="mian", drop_branch=True))
    assert lake.state(table) == state and _refs(lake, table) == refs
    created = _ref_action(
        spark, PublishSpec(table, branch="audit", target_branch="mian", create_target_branch=True)
    )
    assert created["target_branch_created"] is True and _refs(lake, table) == {**refs, "mian": audited}

    unaudited = write_table(spark, write_spec(table, "append", ROWS, branch="audit"))["snapshot_id"]
    state = lake.state(table)
    late_commit = rf"at snapshot {unaudited}, not at the audited snapshot {audited}"
    with pytest.raises(TableStateError, match=late_commit):
        _ref_action(spark, PublishSpec(table, branch="audit", expected_snapshot_id=audited, drop_branch=True))
    assert lake.state(table) == state and lake.ids(table) == [1, 2]


def test_a_pinned_publish_over_connect_is_atomic_and_its_retry_after_main_moved_succeeds(
    connect_lake, table, monkeypatch
):
    from airflow_iceberg.jobs import publish
    from airflow_iceberg.jobs.spec.branches import PublishSpec
    from airflow_iceberg.jobs.table_state import TableStateError
    from airflow_iceberg.jobs.writes import write_table

    spark, lake = connect_lake
    write_table(spark, write_spec(table, "create", ROWS))
    audited = write_table(spark, write_spec(table, "append", ROWS, branch="audit"))["snapshot_id"]
    spec = PublishSpec(table, branch="audit", expected_snapshot_id=audited, drop_branch=True)
    decide, landed = publish.decide, []

    def decide_then_another_writer_commits_to_main(history, publish_spec):
        decision = decide(history, publish_spec)
        landed.append(write_table(spark, write_spec(table, "append", ROWS))["snapshot_id"])
        return decision

    monkeypatch.setattr(publish, "decide", decide_then_another_writer_commits_to_main)
    with pytest.raises(TableStateError, match=r"main moved while publishing .* Nothing was changed"):
        _ref_action(spark, spec)
    assert _refs(lake, table) == {"main": landed[0], "audit": audited}  # no pin tag left behind
    monkeypatch.undo()

    created = lake.snapshots(table)[0].snapshot_id  # main back where the branch was made, to publish it
    spark.sql(f"CALL lake.system.rollback_to_snapshot('{table[5:]}', {created})").collect()
    first = _ref_action(spark, spec)
    assert (first["already_published"], first["branch_dropped"]) == (False, True)
    assert _refs(lake, table) == {"main": audited}
    other = write_table(spark, write_spec(table, "append", ROWS))["snapshot_id"]
    state = lake.state(table)
    retried = _ref_action(spark, spec)
    assert (retried["already_published"], retried["snapshot_id"]) == (True, audited)
    assert lake.state(table) == state and lake.current_snapshot_id(table) == other


def test_rollback_and_tag_retries_over_connect_never_touch_a_later_commit(connect_lake, table, monkeypatch):
    from airflow_iceberg.jobs.spec.branches import RollbackSpec, TagSpec
    from airflow_iceberg.jobs.table_state import TableStateError
    from airflow_iceberg.jobs.writes import write_table

    spark, lake = connect_lake
    first = write_table(spark, write_spec(table, "create", ROWS))["snapshot_id"]
    write_table(spark, write_spec(table, "append", ROWS))
    third = write_table(spark, write_spec(table, "append", ROWS))["snapshot_id"]
    spec = RollbackSpec(table, snapshot_id=first)
    _ref_action(spark, spec, "repair:rollback")
    assert lake.current_snapshot_id(table) == first
    later = write_table(spark, write_spec(table, "append", ROWS))["snapshot_id"]  # another writer
    state = lake.state(table)
    retried = _ref_action(spark, spec, "repair:rollback")  # the first try's success was lost
    assert lake.state(table) == state and lake.ids(table) == [1, 1, 2, 2]  # the later commit stays
    assert (retried["already_rolled_back"], retried["previous_snapshot_id"]) == (True, third)
    with pytest.raises(TableStateError, match=rf"snapshot {third}: it is not in main's history .* Nothing"):
        _ref_action(spark, RollbackSpec(table, snapshot_id=third), "another:rollback")
    assert lake.state(table) == state

    tag = TagSpec(table, tag="eod_20240102")
    assert _ref_action(spark, tag, "eod:tag")["snapshot_id"] == later
    newest = write_table(spark, write_spec(table, "append", ROWS))["snapshot_id"]
    _ref_action(spark, tag, "eod:tag")
    assert _refs(lake, table)["eod_20240102"] == later != newest  # the retry did not move it
    pinned = TagSpec(table, tag="keep", snapshot_id=first, replace=False)
    _ref_action(spark, pinned, "keep:tag")
    assert _ref_action(spark, pinned, "keep:tag")["already_tagged"] is True
    assert _refs(lake, table)["keep"] == first

    # A rollback try killed right after recording where main was: its retry finishes the rollback.
    from airflow_iceberg.jobs import rollback

    record = rollback.record_snapshot

    def record_then_die(*args):
        record(*args)
        raise KeyboardInterrupt

    monkeypatch.setattr(rollback, "record_snapshot", record_then_die)
    again = RollbackSpec(table, snapshot_id=later)
    with pytest.raises(KeyboardInterrupt):
        _ref_action(spark, again, "second:rollback")
    assert lake.current_snapshot_id(table) == newest
    monkeypatch.undo()
    assert _ref_action(spark, again, "second:rollback")["snapshot_id"] == later
    assert lake.current_snapshot_id(table) == later


def test_a_rollback_retry_over_connect_never_undoes_a_commit_that_brought_its_snapshot_back(
    connect_lake, table
):
    """main good->R; a branch from R; rollback; the branch gets C, which reaches main: the retry keeps C.

    The publish of that branch is refused over Connect too (it would bring R back; the log comes
    from the ``history`` metadata table), so another tool's fast-forward brings R back here.
    """
    from airflow_iceberg.jobs.branches import procedure_call
    from airflow_iceberg.jobs.spec.branches import PublishSpec, RollbackSpec
    from airflow_iceberg.jobs.table_state import TableStateError
    from airflow_iceberg.jobs.writes import write_table

    spark, lake = connect_lake
    good = write_table(spark, write_spec(table, "create", ROWS))["snapshot_id"]
    bad = write_table(spark, write_spec(table, "append", values_query([(66, "bad")], "id, name")))
    write_table(spark, write_spec(table, "append", values_query([(3, "c")], "id, name"), branch="audit"))
    spec = RollbackSpec(table, snapshot_id=good)
    _ref_action(spark, spec, "repair:rollback")  # its success is lost
    assert lake.current_snapshot_id(table) == good
    after = write_table(
        spark, write_spec(table, "append", values_query([(4, "d")], "id, name"), branch="audit")
    )
    state = lake.state(table)
    with pytest.raises(TableStateError, match=rf"holds snapshot {bad['snapshot_id']}, which was in main's"):
        _ref_action(
            spark, PublishSpec(table, branch="audit", expected_snapshot_id=after["snapshot_id"]), "wap:pub"
        )
    assert lake.state(table) == state
    procedure_call(spark, table, "fast_forward", {"branch": "'main'", "to": "'audit'"})
    state = lake.state(table)
    retried = _ref_action(spark, spec, "repair:rollback")
    assert 4 in lake.ids(table), "the retry rolled main back again, dropping the published commit"
    assert lake.state(table) == state and retried["already_rolled_back"] is True
    assert lake.current_snapshot_id(table) == after["snapshot_id"]


def test_a_failed_branch_write_over_connect_never_drops_a_branch_made_meanwhile(
    connect_lake, table, monkeypatch
):
    """Another writer makes the branch (and commits on it) between the check and CREATE BRANCH."""
    from airflow_iceberg.jobs import branches
    from airflow_iceberg.jobs.writes import write_table

    spark, lake = connect_lake
    write_table(spark, write_spec(table, "create", ROWS))
    original, other = branches._main_to_branch_from, []

    def another_writer_makes_the_branch_meanwhile(spark_, table_, branch):
        main = original(spark_, table_, branch)
        if not other:
            other.append(0)
            staged = values_query([(7, "other writer")], "id, name")
            other[0] = write_table(spark, write_spec(table, "append", staged, branch=branch))["snapshot_id"]
        return main

    monkeypatch.setattr(branches, "_main_to_branch_from", another_writer_makes_the_branch_meanwhile)
    failing = "SELECT CASE WHEN id = 1 THEN raise_error('source broke') ELSE id END AS id, name FROM " + (
        "VALUES (1, 'a') AS v(id, name)"
    )
    with pytest.raises(Exception, match="source broke"):
        write_table(spark, write_spec(table, "append", failing, branch="audit"))
    assert _refs(lake, table).get("audit") == other[0], "the other writer's branch and commit were dropped"
    assert sorted(lake.ids(table, other[0])) == [1, 2, 7]


# ------------------------------------------------------------------ operators, in this process


@pytest.fixture
def connect_connections(spark_connect_server, tmp_path, monkeypatch):
    """``spark_default`` is the Connect server; ``iceberg_catalog_default`` a Hadoop catalog."""
    warehouse = tmp_path / "warehouse"
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(spark_connect_server.connection()))
    monkeypatch.setenv(
        "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", json.dumps(hadoop_catalog_connection(warehouse))
    )
    return Lake(warehouse, catalog="demo")


def test_on_kill_interrupts_a_long_write_and_the_table_is_left_as_it_was(
    connect_connections, spark_connect_server
):
    from airflow_iceberg.operators import IcebergAppendOperator, IcebergCreateTableOperator
    from airflow_iceberg.operators.connect_tries import DEFAULT_USER_ID, RemoteOperations

    lake = connect_connections
    execute(IcebergCreateTableOperator(task_id="create", table="db.events", source_query=ROWS))
    before = lake.state("demo.db.events")
    slow = SLOW_WRITE
    append = IcebergAppendOperator(task_id="slow_append", table="db.events", source_query=slow)
    outcome: dict[str, BaseException | None] = {}

    def run() -> None:
        try:
            execute(append)
            outcome["error"] = None
        except BaseException as error:  # the interrupted job's failure, reported by the operator
            outcome["error"] = error

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    deadline = time.monotonic() + 120
    while getattr(getattr(append, "_connect_job", None), "_session", None) is None:
        assert worker.is_alive() and time.monotonic() < deadline, outcome
        time.sleep(0.1)
    job = append._connect_job
    time.sleep(8)  # well into the write: configured, checked, Spark's tasks hashing rows
    assert worker.is_alive(), outcome
    killed_at = time.monotonic()
    append.on_kill()
    worker.join(60)
    assert not worker.is_alive(), "the write went on after on_kill"
    assert time.monotonic() - killed_at < 60
    assert isinstance(outcome["error"], IcebergJobError)
    assert "the task was killed; its Spark Connect operations (tag airflow-iceberg-" in str(outcome["error"])
    assert lake.state("demo.db.events") == before
    assert lake.ids("demo.db.events") == [1, 2]
    # The session was released once the interrupted write had ended, not before.
    remote = RemoteOperations(f"{spark_connect_server.url}/;user_id={DEFAULT_USER_ID}")
    try:
        assert remote.session_state(job.ids.session_id) == "closed"
    finally:
        remote.close()


def test_a_per_session_secret_is_refused_before_anything_runs(
    connect_connections, spark_connect_server, monkeypatch
):
    """Spark would write it in clear to the server's event log; the task says what to do instead."""
    from airflow_iceberg.operators import IcebergCreateTableOperator

    lake = connect_connections
    sentinel = "SENTINEL-CONNECT-REFUSED-5d07"
    catalog = hadoop_catalog_connection(lake.warehouse)
    catalog["password"] = sentinel
    catalog["extra"]["pass_property"] = "jdbc.other"  # not on the server; connect_server_credentials off
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", json.dumps(catalog))
    create = IcebergCreateTableOperator(task_id="create", table="db.refused", source_query=ROWS)
    with pytest.raises(InvalidCatalogConfigError) as refused:
        execute(create)
    message = str(refused.value)
    assert message.startswith(
        "Spark Connect: catalog 'demo' has secret setting(s) spark.sql.catalog.demo.jdbc.other, and a task "
        "never sends a secret per session"
    )
    assert "--conf spark.sql.catalog.demo.jdbc.other=..." in message
    assert "connect_server_credentials" in message and "spark-submit mode" in message
    assert sentinel not in message
    assert not lake.exists("demo.db.refused")
    assert sentinel not in spark_connect_server.event_log_text()


def test_a_failed_job_reports_sparks_analysis_error_as_its_first_line(connect_connections):
    from airflow_iceberg.operators import IcebergAppendOperator

    lake = connect_connections
    append = IcebergAppendOperator(
        task_id="append", table="db.missing_source", source_query="SELECT * FROM nope"
    )
    with pytest.raises(IcebergJobError) as failed:
        execute(append)
    first_line = str(failed.value).splitlines()[0]
    assert first_line.startswith("demo.db.missing_source: ")
    assert "TABLE_OR_VIEW_NOT_FOUND" in first_line or "does not exist" in first_line
    assert not lake.exists("demo.db.missing_source")


# ------------------------------------------------------------- real Airflow: the DAGs, over Connect


@pytest.fixture(scope="module")
def daily_orders_over_connect(airflow_runner, spark_connect_server, tmp_path_factory):
    """The example DAG in Connect mode, with sentinel secrets in its catalog connection.

    Its secrets are the server's, so is its warehouse: a server-held catalog connects only where the
    server says."""
    warehouse = spark_connect_server.demo_warehouse
    catalog = hadoop_catalog_connection(warehouse)
    catalog["password"] = DEMO_SECRETS["jdbc.pw"]
    catalog["extra"].update(
        pass_property="jdbc.pw",
        secret_properties={key: DEMO_SECRETS[key] for key in ("rest.auth.token", "s3.secret-access-key")},
        connect_server_credentials=True,  # the server starts with these (connect_catalog_secrets.py)
    )
    started = time.monotonic()
    imports = tmp_path_factory.mktemp("connect-imports") / "imports.jsonl"
    with CommandLineSampler() as sampler:
        completed = airflow_runner.airflow(
            "dags",
            "test",
            "iceberg_daily_orders",
            "2024-01-02",
            connections={
                "iceberg_catalog_default": catalog,
                "spark_default": spark_connect_server.connection(),
            },
            env=recording_imports(imports),
        )
    assert completed.returncode == 0, (completed.stdout + completed.stderr)[-5000:]
    print(f"iceberg_daily_orders over Spark Connect: {time.monotonic() - started:.1f} s")
    return {"warehouse": warehouse, "completed": completed, "sampler": sampler, "imports": imports}


def test_a_connect_task_never_imports_spark_submit_or_kubernetes(daily_orders_over_connect):
    """In the task process (tests/integration/plugins/imported_modules.py), all four tasks over
    Spark Connect: pyspark's client, never the provider's spark-submit modules or Kubernetes."""
    records = recorded_imports(daily_orders_over_connect["imports"])
    assert len(records) == 8 and records[0]["heavy"] == [], records
    heavy = {name for record in records for name in record["heavy"]}
    assert "pyspark" in heavy, records  # the recorder sees what the tasks import
    assert heavy.isdisjoint((*SPARK_SUBMIT, *KUBERNETES)), records


def test_the_example_dag_over_connect_writes_the_same_history(daily_orders_over_connect, airflow_runner):
    from scripts.show_table import load_table

    warehouse = daily_orders_over_connect["warehouse"]
    orders = load_table(warehouse, "db.orders")
    history = [
        (s.summary.operation.value, s.summary.get("added-records"), s.summary.get("total-records"))
        for s in orders.snapshots()
    ]
    assert history == [("overwrite", "100", "100"), ("append", "80", "180"), ("overwrite", "90", "170")]
    for snapshot in orders.snapshots():  # the server's Spark made them, tagged by the task
        assert snapshot.summary["engine-version"].startswith(f"{SERVER_SPARK_LINE}.")
        assert snapshot.summary["airflow.dag-id"] == "iceberg_daily_orders"
    append = airflow_runner.xcom("iceberg_daily_orders", "append_day_two")
    assert append["snapshot_id"] == orders.snapshots()[1].snapshot_id
    assert (append["status"], append["mode"], append["added_records"]) == ("success", "append", 80)
    assert set(append) == {  # the keys of a spark-submit write's XCom (README), nothing more
        "status",
        "table",
        "mode",
        "committed",
        "operation",
        "snapshot_id",
        "parent_snapshot_id",
        "added_records",
        "deleted_records",
        "total_records",
        "added_data_files",
        "deleted_data_files",
        "total_data_files",
        "committed_at",
        "record_count_change",
        "summary",
    }
    before = load_table(warehouse, "db.orders_before_correction")
    assert before.scan().to_arrow().num_rows == 180
    output = daily_orders_over_connect["completed"].stdout  # `dags test` shows the task logs
    assert output.count("Spark Connect session") == 4 and "Spark-Submit cmd" not in output


def test_no_secret_over_connect_in_command_lines_logs_rendered_fields_xcom_or_server_logs(
    daily_orders_over_connect, airflow_runner, spark_connect_server
):
    """The task used the server's own secrets and sent none: the server's event log holds none in
    clear, only redacted, and nothing else the run touched holds one either."""
    completed = daily_orders_over_connect["completed"]
    event_log = spark_connect_server.event_log_text()
    assert '"Event":"SparkListenerJobStart"' in event_log, "the server's event log must have the run's jobs"
    for key in DEMO_SECRETS:
        assert shows_redacted(event_log, f"spark.sql.catalog.demo.{key}"), key
    assert "the task sends no secret; the server must define spark.sql.catalog.demo" in completed.stdout
    texts = [completed.stdout, completed.stderr, spark_connect_server.log_path.read_text(errors="replace")]
    texts.append(event_log)
    logs = [p for p in (airflow_runner.home / "logs").rglob("*") if p.is_file()]
    texts += [p.read_text(errors="replace") for p in logs]
    assert any("Spark Connect session" in text for text in texts), "the task logs must have been captured"
    with sqlite3.connect(airflow_runner.home / "airflow.db") as db:
        texts += [str(row) for row in db.execute("SELECT * FROM rendered_task_instance_fields")]
        texts += [str(row) for row in db.execute("SELECT * FROM xcom")]
    sampler = daily_orders_over_connect["sampler"]
    for sentinel in SENTINELS:
        assert not [t for t in texts if sentinel in t]
        assert sampler.matching(sentinel) == []


@pytest.fixture
def own_rest_catalog(connect_rest_catalog):
    """The REST catalog whose secrets and endpoints the Connect server holds (tests/servers/fixtures.py):
    a server-held catalog connects only where the server says."""
    return connect_rest_catalog


def test_the_story_dags_over_connect_in_one_airflow_process(
    airflow_runner, spark_connect_server, own_rest_catalog, tmp_path
):
    """EMR quickstart, Prophecy target, daily diff, incremental feed: four runs, one Airflow start."""
    rest_catalog = own_rest_catalog
    connection = rest_spark_connection(rest_catalog, packages=False, io_impl=RESOLVING_FILE_IO)
    connection["extra"]["connect_server_credentials"] = True  # its OAuth2 and S3 secrets are the server's
    checkpoints = tmp_path / "checkpoints"
    started = time.monotonic()
    completed = airflow_runner.dags_test(
        "2024-01-02",
        "iceberg_emr_quickstart",
        "iceberg_prophecy_target",
        "iceberg_daily_diff",
        f'iceberg_incremental_feed:{{"checkpoints": "{checkpoints}"}}',
        connections={
            "iceberg_catalog_default": connection,
            "spark_default": spark_connect_server.connection(),
        },
    )
    assert completed.returncode == 0, (completed.stdout + completed.stderr)[-5000:]
    print(f"four story DAGs over Spark Connect: {time.monotonic() - started:.1f} s")
    assert "Spark-Submit cmd" not in completed.stdout + completed.stderr
    catalog = rest_reader(rest_catalog)

    sample = catalog.load_table("iceberg_db.sample")
    first, second = sample.snapshots()
    assert sorted(sample.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": i, "data": d} for i, d in zip(range(1, 7), "abcdef", strict=True)
    ]
    read_all = airflow_runner.xcom("iceberg_emr_quickstart", "read_all")
    assert (read_all["row_count"], read_all["snapshot_id"]) == (6, second.snapshot_id)
    assert sorted(r["id"] for r in read_all["preview"]) == [1, 2, 3, 4, 5, 6]
    read_first = airflow_runner.xcom("iceberg_emr_quickstart", "read_first_snapshot")
    assert (read_first["row_count"], read_first["snapshot_id"]) == (3, first.snapshot_id)
    assert sorted((r["id"], r["data"]) for r in read_first["preview"]) == [(1, "a"), (2, "b"), (3, "c")]
    assert sample.scan(snapshot_id=first.snapshot_id).to_arrow().num_rows == 3

    employees = catalog.load_table("prophecy_doc_demo.employees_test")
    assert [f.name for f in employees.schema().fields] == ["Id", "Name", "Department", "Salary", "Bonus"]
    assert [(str(f.transform), f.name) for f in employees.spec().fields] == [("identity", "Department")]
    assert employees.metadata.properties["write.spark.accept-any-schema"] == "true"
    rows = {
        (r["Name"], r["Department"], r["Salary"], r["Bonus"]) for r in employees.scan().to_arrow().to_pylist()
    }
    assert rows == {
        ("Ann", "Engineering", 110, 10),
        ("Eve", "Engineering", 95, 0),
        ("Cid", "Sales", 80, None),
        ("Dee", "Sales", 85, 5),
    }
    replace = employees.snapshots()[-1].summary
    assert (replace.operation.value, replace["deleted-records"], replace["changed-partition-count"]) == (
        "overwrite",
        "2",
        "1",
    )

    orders = catalog.load_table("diff_demo.orders")
    yesterday, today = orders.snapshots()
    assert airflow_runner.xcom("iceberg_daily_diff", "before")["snapshot_id"] == yesterday.snapshot_id
    after = airflow_runner.xcom("iceberg_daily_diff", "after")
    assert (after["selector"], after["snapshot_id"]) == ("as_of_timestamp", today.snapshot_id)
    diff = {
        (r["change"], r["id"], r["amount"], r["day"])
        for r in catalog.load_table("diff_demo.daily_diff").scan().to_arrow().to_pylist()
    }
    day_one, day_two = date(2024, 1, 1), date(2024, 1, 2)
    assert diff == {
        ("added", 2, 21, day_one),
        ("added", 10, 100, day_two),
        ("added", 11, 110, day_two),
        ("added", 12, 120, day_two),
        ("removed", 2, 20, day_one),
        ("removed", 4, 40, day_one),
    }

    events = catalog.load_table("feed.events")
    created, _batch_one, two, _batch_three = events.snapshots()
    new_events = catalog.load_table("feed.new_events").scan().to_arrow()
    assert sorted(new_events["id"].to_pylist()) == list(range(10, 20))
    incremental = airflow_runner.xcom("iceberg_incremental_feed", "new_since_create")
    assert (incremental["start_snapshot_id"], incremental["end_snapshot_id"]) == (
        created.snapshot_id,
        two.snapshot_id,
    )
    mirror = catalog.load_table("feed.events_mirror")
    assert sorted(mirror.scan().to_arrow()["id"].to_pylist()) == list(range(10, 25))
    first_run, second_run = (s.summary for s in mirror.snapshots())
    assert (first_run["added-records"], second_run["added-records"]) == ("10", "5")
    mirror_again = airflow_runner.xcom("iceberg_incremental_feed", "mirror_again")
    assert (mirror_again["rows_read"], mirror_again["row_count"], mirror_again["batches"]) == (5, 5, 1)
    assert list(checkpoints.rglob("offsets"))  # the server wrote the checkpoints where the DAG said


# ------------------------------------------------ exactly-once and isolation over Connect (issue 17)

#: The try a killed worker leaves behind: its write goes on on the server, detached.
KILLED_TRY = """
from tests.integration.in_process import execute
from tests.integration.test_spark_connect import big_append

execute(big_append())
"""


def big_append():
    """The 2M-row append of the robustness DAG (events 1000 ..): long enough to be killed mid-write."""
    from airflow_iceberg.operators import IcebergAppendOperator
    from tests.integration.robustness_dags.iceberg_robustness import BIG_APPEND_ROWS, events

    return IcebergAppendOperator(
        task_id="big_append", table="db.events", source_query=events(1000, BIG_APPEND_ROWS)
    )


def _new_data_file_holds_bytes(table_dir, before) -> bool:
    from tests.integration.task_processes import data_files

    return any(f.stat().st_size > 0 for f in data_files(table_dir) - before if f.exists())


def test_a_retry_after_the_worker_died_mid_write_waits_for_that_write_and_commits_once(
    connect_connections, tmp_path
):
    """Try 1's process is SIGKILLed mid-write; its write goes on on the server. Try 2, started at
    once with the same commit id, must wait for it, find its commit, and write nothing."""
    import pyarrow.compute as pc

    from airflow_iceberg.operators import IcebergCreateTableOperator
    from tests.integration.robustness_dags.iceberg_robustness import BIG_APPEND_ROWS, events
    from tests.integration.task_processes import data_files, wait_until

    lake, table = connect_connections, "demo.db.events"
    execute(
        IcebergCreateTableOperator(
            task_id="create",
            table="db.events",
            source_query=events(0, 1000),
            table_properties={"write.parquet.row-group-size-bytes": str(1 << 20)},
        )
    )
    before = lake.state(table)
    table_dir = lake.warehouse / "db" / "events"
    files_before = data_files(table_dir)
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the SIGKILLed operator cannot remove its temp dir
    with open(tmp_path / "try-1.log", "w") as output:
        first = subprocess.Popen(
            [sys.executable, "-c", KILLED_TRY], env=env, stdout=output, stderr=subprocess.STDOUT
        )
        try:
            wait_until(
                lambda: _new_data_file_holds_bytes(table_dir, files_before) or first.poll() is not None,
                240,
                "try 1 writing data files",
            )
            assert first.poll() is None, (tmp_path / "try-1.log").read_text()[-3000:]
            first.send_signal(signal.SIGKILL)  # the worker dies; the server knows nothing of it
            assert first.wait(30) == -signal.SIGKILL
        finally:
            if first.poll() is None:
                first.kill()
    assert lake.state(table) == before, "the kill must come before try 1's commit"

    retried = execute(big_append(), try_number=2)

    commit_id = "robust_bad_input:big_append:manual__robustness:-1:1:"
    tagged = [s for s in lake.snapshots(table) if s.summary.get("airflow-iceberg.commit-id") == commit_id]
    assert len(tagged) == 1, [s.summary.additional_properties for s in tagged]
    assert int(tagged[0].summary["added-records"]) == BIG_APPEND_ROWS
    assert (retried["reused_earlier_commit"], retried["snapshot_id"]) == (True, tagged[0].snapshot_id)
    ids = lake.load(table).scan(selected_fields=("event_id",)).to_arrow()["event_id"]
    assert len(ids) == 1000 + BIG_APPEND_ROWS and pc.count_distinct(ids).as_py() == len(ids)


def test_a_merge_or_delete_retried_after_its_commit_landed_finds_it_and_writes_nothing(connect_connections):
    """Try 1 committed, then its worker died before Airflow heard of it; try 2 (same commit id)
    settles try 1's operation on the server, finds its commit and commits nothing: one commit each."""
    from airflow_iceberg.operators import (
        IcebergCreateTableOperator,
        IcebergDeleteOperator,
        IcebergMergeOperator,
    )

    lake, table = connect_connections, "demo.db.orders"
    execute(IcebergCreateTableOperator(task_id="create", table="db.orders", source_query=ROWS))
    merge = IcebergMergeOperator(
        task_id="merge",
        table="db.orders",
        source_query=values_query([(2, "B"), (3, "c")], "id, name"),
        keys=["id"],
        clauses=list(MERGE_CLAUSES),
    )
    delete = IcebergDeleteOperator(task_id="delete", table="db.orders", condition="id = 1")
    for operator, rows in ((merge, [(1, "a"), (2, "B"), (3, "c")]), (delete, [(2, "B"), (3, "c")])):
        first = execute(operator)
        retried = execute(operator, try_number=2)
        commit_id = f"robust_bad_input:{operator.task_id}:manual__robustness:-1:1:"
        (commit,) = _tagged(lake, table, commit_id)
        assert first["snapshot_id"] == commit.snapshot_id == lake.current_snapshot_id(table)
        assert (retried["reused_earlier_commit"], retried["snapshot_id"]) == (True, commit.snapshot_id)
        assert [(r["id"], r["name"]) for r in lake.rows(table)] == rows


def test_the_task_logs_name_no_session_or_operation_id_only_fingerprints(
    daily_orders_over_connect, airflow_runner, spark_connect_server
):
    """``sc://...;session_id=<id>`` joins a session: no id the server keys sessions by is logged."""
    from airflow_iceberg.operators.connect_tries import fingerprint

    server_log = spark_connect_server.log_path.read_text(errors="replace")
    keys = set(re.findall(r"ExecuteKey\(([^,]*),([0-9a-f-]{36}),([0-9a-f-]{36})\)", server_log))
    completed = daily_orders_over_connect["completed"]
    texts = [completed.stdout, completed.stderr]
    texts += [p.read_text(errors="replace") for p in (airflow_runner.home / "logs").rglob("*") if p.is_file()]
    for _user, session, operation in keys:  # every session of the server, the DAG's among them
        assert not [text for text in texts if session in text or operation in text], session
    tasks = {session for user, session, _ in keys if user == "airflow-iceberg"}  # no Login: this user id
    logged = set(re.findall(r"Spark Connect session ([0-9a-f]{8}) ", completed.stdout))
    assert len(logged) == 4 and logged <= {fingerprint(session) for session in tasks}


def _s3a_catalog(rest, bucket: str, secret: str) -> dict[str, str]:
    """A Hadoop catalog on ``s3a://bucket`` with its S3A keys per catalog, as a task would set it."""
    prefix = "spark.sql.catalog.lake"
    return {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "hadoop",
        f"{prefix}.warehouse": f"s3a://{bucket}/warehouse",
        f"{prefix}.hadoop.fs.s3a.endpoint": rest.s3_endpoint,
        f"{prefix}.hadoop.fs.s3a.path.style.access": "true",
        f"{prefix}.hadoop.fs.s3a.endpoint.region": rest.region,
        f"{prefix}.hadoop.fs.s3a.access.key": rest.access_key,
        f"{prefix}.hadoop.fs.s3a.secret.key": secret,
    }


def test_per_task_s3a_keys_leak_between_sessions_so_the_operators_refuse_them(
    spark_connect_server, rest_catalog, monkeypatch
):
    """Hadoop caches one S3A file system per bucket for the whole server: the first session's keys
    serve every later one. Shown with two raw sessions; then the operators refuse such settings
    before any session opens, so a task with wrong keys can neither read nor write."""
    from pyspark.sql.connect.session import SparkSession

    from airflow_iceberg.jobs.iceberg_job import describe_error
    from airflow_iceberg.operators import IcebergAppendOperator, IcebergCreateTableOperator
    from tests.integration.catalog_connections import s3_filesystem, s3_objects, s3a_connection

    rest, run = rest_catalog, uuid.uuid4().hex[:8]
    s3 = s3_filesystem(rest, allow_bucket_creation=True)
    buckets = {name: f"s3a-{name}-{run}" for name in ("alone", "shared", "tasks")}
    for bucket in buckets.values():
        s3.create_dir(bucket)
    sessions = []

    def session(bucket: str, secret: str):
        spark = SparkSession.Builder().remote(spark_connect_server.url).create()
        sessions.append(spark)
        for key, value in _s3a_catalog(rest, bucket, secret).items():
            spark.conf.set(key, value)
        return spark

    try:
        # Alone, wrong keys are refused by S3: the keys matter.
        create = "CREATE TABLE lake.db.t (id BIGINT) USING iceberg"
        with pytest.raises(Exception) as refused:
            session(buckets["alone"], "WRONG").sql(create).collect()
        assert "403" in describe_error(refused.value)
        # After a session with the right keys used the bucket, wrong keys read and write it.
        right = session(buckets["shared"], rest.secret_key)
        right.sql(create).collect()
        right.sql("INSERT INTO lake.db.t VALUES (1), (2)").collect()
        wrong = session(buckets["shared"], "WRONG")
        assert sorted(row.id for row in wrong.table("lake.db.t").collect()) == [1, 2]
        wrong.sql("INSERT INTO lake.db.t VALUES (3)").collect()
        assert sorted(row.id for row in wrong.table("lake.db.t").collect()) == [1, 2, 3]
    finally:
        for spark in sessions:
            spark.stop()

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(spark_connect_server.connection()))
    for secret in (rest.secret_key, "WRONG"):
        connection = s3a_connection(rest, buckets["tasks"])
        connection["password"] = secret
        monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", json.dumps(connection))
        for operator in (
            IcebergCreateTableOperator(task_id="create", table="db.t", source_query=ROWS),
            IcebergAppendOperator(task_id="append", table="db.t", source_query=ROWS),
        ):
            with pytest.raises(InvalidSpecError) as failed:
                execute(operator)
            message = str(failed.value)
            assert "per-task Hadoop file system settings cannot work over Spark Connect" in message
            assert "hadoop_properties 'fs.s3a.endpoint'" in message
            assert "login (it sets hadoop.fs.s3a.access.key)" in message and "S3FileIO" in message
            assert secret not in message
    assert s3_objects(rest, buckets["tasks"]) == {}


def test_a_wrong_server_held_s3_key_fails_with_s3s_403_named_and_leaves_the_table_alone(
    spark_connect_server, own_rest_catalog, monkeypatch
):
    """S3FileIO's clients belong to one catalog of one session: right after a task on catalog
    ``rest`` wrote a table, a task on ``rest_wrong_s3`` (the same REST catalog, with a wrong S3
    secret key held by the server) can neither read nor write it; a create there names S3's 403
    under Spark's "Failed to close current writer", which alone says nothing."""
    from airflow_iceberg.operators import (
        IcebergAppendOperator,
        IcebergCreateTableOperator,
        IcebergTimeTravelReadOperator,
    )
    from tests.integration.catalog_connections import rest_reader, rest_spark_connection
    from tests.servers.connect_catalog_secrets import WRONG_S3_SECRET

    rest, namespace = own_rest_catalog, f"connect_keys_{uuid.uuid4().hex[:8]}"
    right = rest_spark_connection(rest, packages=False)
    wrong = rest_spark_connection(rest, packages=False, catalog_name="rest_wrong_s3")
    for connection in (right, wrong):  # their secrets are the server's (connect_catalog_secrets.py)
        connection["extra"]["connect_server_credentials"] = True
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(spark_connect_server.connection()))
    monkeypatch.setenv("AIRFLOW_CONN_RIGHT_KEYS", json.dumps(right))
    monkeypatch.setenv("AIRFLOW_CONN_WRONG_KEYS", json.dumps(wrong))
    table = f"{namespace}.orders"
    created = execute(
        IcebergCreateTableOperator(
            task_id="create", table=table, source_query=ROWS, iceberg_conn_id="right_keys"
        )
    )
    reader = rest_reader(rest)
    before = reader.load_table(table).metadata

    wrong_keys = {"table": table, "iceberg_conn_id": "wrong_keys"}
    wrong_tasks = [
        IcebergAppendOperator(task_id="append", source_query=ROWS, **wrong_keys),
        IcebergTimeTravelReadOperator(
            task_id="read", snapshot_id=created["snapshot_id"], preview_rows=5, **wrong_keys
        ),
    ]
    for task in wrong_tasks:
        with pytest.raises(IcebergJobError, match=r"S3Exception.*Status Code: 403"):
            execute(task)
    after = reader.load_table(table)
    assert after.metadata.snapshots == before.snapshots
    assert sorted(after.scan().to_arrow()["id"].to_pylist()) == [1, 2]

    with pytest.raises(IcebergJobError) as create_failed:
        execute(
            IcebergCreateTableOperator(
                task_id="create_other",
                table=f"{namespace}.other",
                source_query=ROWS,
                iceberg_conn_id="wrong_keys",
            )
        )
    message = str(create_failed.value)
    assert message.startswith(
        f"rest_wrong_s3.{namespace}.other: SparkException: Job aborted due to stage failure"
    )
    assert "Failed to close current writer (caused by S3Exception: " in message
    assert "Status Code: 403" in message
    assert WRONG_S3_SECRET not in message
    assert not reader.table_exists(f"{namespace}.other")
    # the right catalog still works after the wrong one's failures: its S3 clients are its own
    appended = execute(
        IcebergAppendOperator(
            task_id="append_right", source_query=ROWS, table=table, iceberg_conn_id="right_keys"
        )
    )
    assert reader.load_table(table).current_snapshot().snapshot_id == appended["snapshot_id"]


def test_a_session_the_server_drops_under_a_running_task_fails_it_saying_what_happened(
    connect_connections, spark_connect_server
):
    """The server loses the task's session mid-write (released here; a restart does the same):
    the task fails with what happened and what to do, without the session's id."""
    from airflow_iceberg.operators import IcebergAppendOperator, IcebergCreateTableOperator
    from airflow_iceberg.operators.connect_tries import DEFAULT_USER_ID, RemoteOperations

    lake = connect_connections
    execute(IcebergCreateTableOperator(task_id="create", table="db.events", source_query=ROWS))
    before = lake.state("demo.db.events")
    slow = SLOW_WRITE
    append = IcebergAppendOperator(task_id="dropped_session", table="db.events", source_query=slow)
    outcome: dict[str, BaseException | None] = {}

    def run() -> None:
        try:
            execute(append)
            outcome["error"] = None
        except BaseException as error:
            outcome["error"] = error

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    deadline = time.monotonic() + 120
    while not getattr(getattr(append, "_connect_job", None), "commit_started", False):
        assert worker.is_alive() and time.monotonic() < deadline, outcome
        time.sleep(0.1)
    time.sleep(3)  # the write is under way on the server
    ids = append._connect_job.ids
    remote = RemoteOperations(f"{spark_connect_server.url}/;user_id={DEFAULT_USER_ID}")
    try:
        remote.release_session(ids.session_id)
    finally:
        remote.close()
    worker.join(120)
    assert not worker.is_alive(), "the task went on without its session"
    error = outcome["error"]
    assert isinstance(error, IcebergJobError), error
    message = str(error)
    assert message.startswith("demo.db.events: the Spark Connect server no longer has this task's session")
    assert "(INVALID_HANDLE.SESSION_CLOSED)" in message and "Retrying is safe" in message
    assert ids.session_id not in message and ids.operation_id not in message
    assert lake.state("demo.db.events") == before


class _RecordingEndpoint:
    """An HTTP endpoint on loopback that records every request (a stand-in for anyone's)."""

    def __init__(self) -> None:
        import http.server

        requests = self.requests = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def _record(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                requests.append(
                    f"{self.command} {self.path} {self.headers}{self.rfile.read(length).decode()}"
                )
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"error": "invalid_client"}')

            do_GET = do_POST = _record

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/catalog"

    def __enter__(self) -> _RecordingEndpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_task_cannot_point_a_server_held_catalog_at_another_endpoint(spark_connect_server, monkeypatch):
    """The server holds catalog ``rest``'s OAuth2 client secret; a connection naming ``rest`` with
    another ``uri`` (``connect_server_credentials`` on) would make the server's catalog post
    ``client_secret=<it>`` there. The task is refused, in its fresh session, before it sets
    anything: the endpoint is never called. (A hostile client that is not these operators can
    still do it: the server is the trust boundary, docs/spark-connect.md.)"""
    from airflow_iceberg.operators import IcebergAppendOperator

    with _RecordingEndpoint() as elsewhere:
        connection = {
            "conn_type": "iceberg_catalog",
            "host": elsewhere.uri,
            "extra": {"catalog_name": "rest", "catalog_type": "rest", "connect_server_credentials": True},
        }
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(spark_connect_server.connection()))
        monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", json.dumps(connection))
        append = IcebergAppendOperator(task_id="append", table="db.t", source_query="SELECT 1 AS id")
        with pytest.raises(InvalidCatalogConfigError) as refused:
            execute(append)
    assert "spark.sql.catalog.rest.uri, which the server defines otherwise" in str(refused.value)
    assert elsewhere.uri not in str(refused.value)
    assert elsewhere.requests == []

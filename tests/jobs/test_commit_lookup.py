"""Cluster deploy mode's result: the commit found in the catalog is the one the job reported.

In cluster deploy mode the worker never sees the job's result file; it reads the table's metadata
with pyiceberg and finds the snapshot by its commit id (:mod:`airflow_iceberg.catalog.commit_lookup`).
Here each kind of commit a cluster-mode task can make runs in the shared session, and what pyiceberg
finds for its commit id must be exactly what the job itself reported: the same snapshot, parent,
operation, time, summary and counts, except counts the job vouched for by reading manifests, which
the lookup leaves unknown (None, with its reason) rather than guess.
"""

from __future__ import annotations

import pytest

from airflow_iceberg.catalog.commit_lookup import UNCHECKED_COUNT_REASON, committed_by
from airflow_iceberg.jobs.merges import delete_from, merge_into
from airflow_iceberg.jobs.reads import read_table
from airflow_iceberg.jobs.spec.request import SOURCE_SNAPSHOT_PROPERTY
from airflow_iceberg.jobs.spec.row_changes import DeleteSpec, MergeSpec
from airflow_iceberg.jobs.spec.sources import Source
from airflow_iceberg.jobs.writes import write_table
from tests.jobs.helpers import read_spec, values_query, write_spec

#: What the job adds beside the commit's description (and the lookup cannot, or need not, know).
NOT_COMPARED = {"table", "mode", "branch", "reused_earlier_commit"}
ROWS = values_query([(1, "ann", 10), (2, "bob", 20), (3, "cid", 30)], "id, name, score")
COLUMNS = ("id", "name", "score")
MORE = values_query([(4, "dee", 40)], "id, name, score")


def _same_commit(job_result: dict, found: dict) -> None:
    assert found["committed"] is True and found["snapshot_id"] == job_result["snapshot_id"]
    expected = {k: v for k, v in job_result.items() if k not in NOT_COMPARED}
    if found.get("record_count_unknown") == UNCHECKED_COUNT_REASON:  # the job read manifests; we did not
        for key in ("deleted_records", "record_count_change", "record_count_unknown"):
            expected.pop(key, None)
            assert key in found
        assert found["deleted_records"] is None and found["record_count_change"] is None
        unchecked = ("deleted_records", "record_count_change", "record_count_unknown")
        found = {k: v for k, v in found.items() if k not in unchecked}
    assert found == expected


def test_writes_are_found_as_the_job_reported_them(spark, lake, table):
    created = write_table(spark, write_spec(table, "create", ROWS), commit_id="c-create")
    _same_commit(created, committed_by(lake.load(table), "c-create", "main"))
    appended = write_table(spark, write_spec(table, "append", MORE), commit_id="c-append")
    _same_commit(appended, committed_by(lake.load(table), "c-append", "main"))
    overwritten = write_table(
        spark, write_spec(table, "overwrite", MORE, condition="id >= 4"), commit_id="c-overwrite"
    )
    _same_commit(overwritten, committed_by(lake.load(table), "c-overwrite", "main"))
    # The earlier commits are still found by their own ids, not mistaken for the newest.
    assert committed_by(lake.load(table), "c-append", "main")["snapshot_id"] == appended["snapshot_id"]


def test_a_copy_into_a_sink_table_is_found_with_the_snapshot_it_read(spark, lake, table, new_table):
    created = write_table(spark, write_spec(table, "create", ROWS), commit_id="c-create")
    write_table(spark, write_spec(table, "append", MORE), commit_id="c-append")
    sink = new_table("copy")
    read = read_table(
        spark, read_spec(table, snapshot_id=created["snapshot_id"], sink_table=sink), commit_id="c-copy"
    )
    found = committed_by(lake.load(sink), "c-copy", "main")
    _same_commit(read["sink"], found)
    assert int(found["summary"][SOURCE_SNAPSHOT_PROPERTY]) == read["snapshot_id"] == created["snapshot_id"]
    assert found["added_records"] == read["row_count"] == 3


def test_a_commit_no_snapshot_carries_is_reported_as_not_committed(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS), commit_id="c-create")
    assert committed_by(lake.load(table), "c-never-ran", "main") == {"committed": False, "snapshot_id": None}


def test_a_branch_write_is_found_on_its_branch_and_after_a_publish_on_main(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS), commit_id="c-create")
    on_branch = write_table(spark, write_spec(table, "append", MORE, branch="audit"), commit_id="c-branch")
    _same_commit(on_branch, committed_by(lake.load(table), "c-branch", "audit"))
    assert committed_by(lake.load(table), "c-branch", "main") == {"committed": False, "snapshot_id": None}
    # Published (main fast-forwarded) and the branch dropped before the worker looked.
    spark.sql(f"CALL lake.system.fast_forward('{table.split('.', 1)[1]}', 'main', 'audit')")
    spark.sql(f"ALTER TABLE {table} DROP BRANCH audit")
    found = committed_by(lake.load(table), "c-branch", "audit")
    assert found["snapshot_id"] == on_branch["snapshot_id"] and found["found_on_branch"] == "main"


def test_a_rolled_back_commit_is_not_found(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS), commit_id="c-create")
    appended = write_table(spark, write_spec(table, "append", MORE), commit_id="c-append")
    name, parent = table.split(".", 1)[1], appended["parent_snapshot_id"]
    spark.sql(f"CALL lake.system.rollback_to_snapshot('{name}', {parent})")
    assert committed_by(lake.load(table), "c-append", "main")["committed"] is False


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_merges_and_deletes_are_found_as_the_job_reported_them(spark, lake, table, mode):
    properties = {"format-version": "2", **{f"write.{op}.mode": mode for op in ("merge", "delete", "update")}}
    write_table(spark, write_spec(table, "create", ROWS, table_properties=properties), commit_id="c-create")
    changes = values_query([(1, "ANN", 11), (5, "eve", 50)], "id, name, score")
    merged = merge_into(
        spark,
        MergeSpec(
            table,
            source=Source(query=changes),
            keys=("id",),
            clauses=(
                {"when": "matched", "then": "update", "set": {"name": "s.name", "score": "s.score"}},
                {"when": "not_matched", "then": "insert", "values": {c: f"s.{c}" for c in COLUMNS}},
            ),
        ).validated(),
        commit_id="c-merge",
    )
    _same_commit(merged, committed_by(lake.load(table), "c-merge", "main"))
    deleted = delete_from(spark, DeleteSpec(table, condition="id = 2").validated(), commit_id="c-delete")
    _same_commit(deleted, committed_by(lake.load(table), "c-delete", "main"))
    # After merge-on-read deletes, a copy-on-write delete of the same files may count dead rows:
    # the job decides from manifests, the lookup leaves the counts unknown rather than guess.
    if mode == "merge-on-read":
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('write.delete.mode'='copy-on-write')")
        whole = delete_from(spark, DeleteSpec(table, condition="id = 1").validated(), commit_id="c-cow")
        found = committed_by(lake.load(table), "c-cow", "main")
        assert found["record_count_unknown"] == UNCHECKED_COUNT_REASON
        _same_commit(whole, found)

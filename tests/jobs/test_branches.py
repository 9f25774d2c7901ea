"""Write-audit-publish: writes, merges and deletes on a branch leave main alone until published."""

from __future__ import annotations

import pytest

from airflow_iceberg.jobs import action_specs
from airflow_iceberg.jobs.branches import PublishError, publish_branch, tag_snapshot
from airflow_iceberg.jobs.job_spec import Source
from airflow_iceberg.jobs.merges import MergeSourceError, delete_from, merge_into
from airflow_iceberg.jobs.reads import read_table
from airflow_iceberg.jobs.table_state import ref_snapshot_id
from airflow_iceberg.jobs.writes import write_table
from tests.jobs.helpers import read_spec, values_query, write_spec

ROWS = values_query([(1, "a"), (2, "b")], "id, name")


def _refs(lake, table) -> dict[str, int]:
    return {name: ref.snapshot_id for name, ref in lake.load(table).metadata.refs.items()}


def test_branch_write_merge_and_delete_leave_main_untouched_until_published(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS, table_properties={"format-version": "2"}))
    main_before = lake.current_snapshot_id(table)

    appended = write_table(
        spark,
        write_spec(table, "append", values_query([(3, "c")], "id, name"), branch="audit_20240102"),
        commit_id="wap:append",
        reuse_commit=True,
    )
    merge_into(
        spark,
        action_specs.MergeSpec(
            table,
            source=Source(query=values_query([(1, "A")], "id, name")),
            keys=("id",),
            branch="audit_20240102",
        ).validated(),
    )
    delete_from(
        spark, action_specs.DeleteSpec(table, condition="id = 2", branch="audit_20240102").validated()
    )

    refs = _refs(lake, table)
    assert refs["main"] == main_before and lake.ids(table) == [1, 2]  # main: untouched
    assert appended["branch"] == "audit_20240102"
    assert [(r["id"], r["name"]) for r in lake.rows(table, refs["audit_20240102"])] == [(1, "A"), (3, "c")]
    audit = read_table(spark, read_spec(table, branch="audit_20240102", filter="id = 3"))
    assert audit["row_count"] == 1

    retried = write_table(
        spark,
        write_spec(table, "append", values_query([(3, "c")], "id, name"), branch="audit_20240102"),
        commit_id="wap:append",
        reuse_commit=True,
    )
    assert retried["reused_earlier_commit"] is True

    published = publish_branch(
        spark, action_specs.PublishSpec(table, branch="audit_20240102", drop_branch=True).validated()
    )
    assert (published["previous_snapshot_id"], published["snapshot_id"]) == (
        main_before,
        refs["audit_20240102"],
    )
    assert _refs(lake, table) == {"main": refs["audit_20240102"]}  # branch dropped
    assert [(r["id"], r["name"]) for r in lake.rows(table)] == [(1, "A"), (3, "c")]


def test_publish_fails_clearly_when_main_moved_and_changes_nothing(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS))
    write_table(spark, write_spec(table, "append", ROWS, branch="audit"))
    write_table(spark, write_spec(table, "append", ROWS))  # main moves on
    state = lake.state(table)
    with pytest.raises(PublishError, match=r"main moved since the branch was made.*main is unchanged"):
        publish_branch(spark, action_specs.PublishSpec(table, branch="audit", drop_branch=True).validated())
    assert lake.state(table) == state and "audit" in _refs(lake, table)


def test_a_failed_merge_into_a_new_branch_leaves_no_branch_behind(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS))
    main = lake.current_snapshot_id(table)
    duplicates = Source(query=values_query([(1, "x"), (1, "y")], "id, name"))
    with pytest.raises(MergeSourceError):
        merge_into(
            spark, action_specs.MergeSpec(table, source=duplicates, keys=("id",), branch="audit").validated()
        )
    assert _refs(lake, table) == {"main": main}


def test_tag_with_retention_and_replace(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS))
    first = lake.current_snapshot_id(table)
    tag_snapshot(spark, action_specs.TagSpec(table, tag="eod_20240102", retain_days=7).validated())
    write_table(spark, write_spec(table, "append", ROWS))
    result = tag_snapshot(spark, action_specs.TagSpec(table, tag="eod_20240102").validated())

    ref = lake.load(table).metadata.refs["eod_20240102"]
    assert result["snapshot_id"] == ref.snapshot_id == lake.current_snapshot_id(table) != first
    assert ref_snapshot_id(spark, table, "eod_20240102", "TAG") == ref.snapshot_id
    retained = tag_snapshot(
        spark, action_specs.TagSpec(table, tag="keep", snapshot_id=first, retain_days=7).validated()
    )
    assert retained["snapshot_id"] == first
    assert lake.load(table).metadata.refs["keep"].max_ref_age_ms == 7 * 24 * 3600 * 1000

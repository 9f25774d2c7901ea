"""Write-audit-publish: writes, merges and deletes on a branch leave main alone until published."""

from __future__ import annotations

import pytest

from airflow_iceberg.jobs import action_specs
from airflow_iceberg.jobs.branches import PublishError, publish_branch, reset_branch, tag_snapshot
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


def _branch_change(kind: str, branch: str = "audit", **fields):
    """A write, merge or delete on ``branch``, as (function, spec)."""
    if kind == "append":
        return write_table, write_spec(
            table=fields.pop("table"), mode="append", query=ROWS, branch=branch, **fields
        )
    if kind == "merge":
        source = Source(query=fields.pop("source", values_query([(1, "A"), (9, "i")], "id, name")))
        return merge_into, action_specs.MergeSpec(
            fields.pop("table"), source=source, keys=("id",), branch=branch, **fields
        ).validated()
    return delete_from, action_specs.DeleteSpec(
        fields.pop("table"), condition="id = 2", branch=branch, **fields
    ).validated()


@pytest.mark.parametrize("kind", ["append", "merge", "delete"])
def test_a_branch_write_retried_after_its_branch_was_published_and_dropped_reuses_its_commit(
    spark, lake, table, kind
):
    """The try committed, the audit passed, publish moved main and dropped the branch; then the retry."""
    write_table(spark, write_spec(table, "create", ROWS, table_properties={"format-version": "2"}))
    change, spec = _branch_change(kind, table=table)
    first = change(spark, spec, commit_id=f"wap:{kind}", reuse_commit=True)
    publish_branch(spark, action_specs.PublishSpec(table, branch="audit", drop_branch=True).validated())
    state, rows = lake.state(table), lake.rows(table)

    retried = change(spark, spec, commit_id=f"wap:{kind}", reuse_commit=True)

    assert lake.state(table) == state and lake.rows(table) == rows  # no second write, no branch made again
    assert _refs(lake, table) == {"main": first["snapshot_id"]}
    assert retried["reused_earlier_commit"] is True and retried["snapshot_id"] == first["snapshot_id"]
    assert retried["found_on_branch"] == "main"


def test_a_branch_write_finds_its_commit_on_another_branch_after_main(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS))
    first = write_table(
        spark, write_spec(table, "append", ROWS, branch="audit"), commit_id="wap:x", reuse_commit=True
    )
    spark.sql(f"ALTER TABLE {table} CREATE BRANCH kept AS OF VERSION {first['snapshot_id']}")
    spark.sql(f"ALTER TABLE {table} DROP BRANCH audit")
    state = lake.state(table)

    retried = write_table(
        spark, write_spec(table, "append", ROWS, branch="audit"), commit_id="wap:x", reuse_commit=True
    )

    assert (retried["snapshot_id"], retried["found_on_branch"]) == (first["snapshot_id"], "kept")
    assert lake.state(table) == state
    # A write to main looks at main alone: the commit of a branch never published is not main's.
    on_main = write_table(spark, write_spec(table, "append", ROWS), commit_id="wap:x", reuse_commit=True)
    assert "reused_earlier_commit" not in on_main and lake.ids(table) == [1, 1, 2, 2]


STALE = values_query([(1, "bad")], "id, name")
GOOD = values_query([(1, "good"), (4, "d")], "id, name")


def _failed_audit(spark, lake, table, branch: str = "audit_20240103") -> int:
    """Main with rows 1, 2, 3; the branch holding the failed audit's merge on top of an older main."""
    write_table(spark, write_spec(table, "create", ROWS, table_properties={"format-version": "2"}))
    merge_into(
        spark,
        action_specs.MergeSpec(table, source=Source(query=STALE), keys=("id",), branch=branch).validated(),
        commit_id="wap:merge_changes:run:1",
    )
    write_table(spark, write_spec(table, "append", values_query([(3, "c")], "id, name")))  # main moves on
    return lake.current_snapshot_id(table)


def _names(lake, table, snapshot_id=None) -> list[tuple[int, str]]:
    return [(row["id"], row["name"]) for row in lake.rows(table, snapshot_id)]


@pytest.mark.parametrize("kind", ["merge", "append"])
def test_reset_branch_starts_a_stale_branch_afresh_from_main_and_a_retry_reuses_its_commit(
    spark, lake, table, kind
):
    main = _failed_audit(spark, lake, table)
    change, spec = _branch_change(
        kind,
        branch="audit_20240103",
        table=table,
        reset_branch=True,
        **({"source": GOOD} if kind == "merge" else {}),
    )
    repaired = change(spark, spec, commit_id="wap:merge_changes:run:2", reuse_commit=True)

    head = _refs(lake, table)["audit_20240103"]
    assert head == repaired["snapshot_id"] and lake.snapshot(table, head).parent_snapshot_id == main
    assert _names(lake, table, head) == (
        [(1, "good"), (2, "b"), (3, "c"), (4, "d")]
        if kind == "merge"
        else [(1, "a"), (1, "a"), (2, "b"), (2, "b"), (3, "c")]
    )
    assert _names(lake, table) == [(1, "a"), (2, "b"), (3, "c")]  # main: untouched
    state = lake.state(table)
    retried = change(spark, spec, commit_id="wap:merge_changes:run:2", reuse_commit=True)
    assert retried["reused_earlier_commit"] is True and retried["snapshot_id"] == head
    assert lake.state(table) == state  # found before any reset: the branch is not reset again
    publish_branch(
        spark, action_specs.PublishSpec(table, branch="audit_20240103", drop_branch=True).validated()
    )
    again = change(spark, spec, commit_id="wap:merge_changes:run:2", reuse_commit=True)  # after the publish
    assert (again["snapshot_id"], again["found_on_branch"]) == (head, "main")
    assert _refs(lake, table) == {"main": head}


def test_a_try_killed_between_the_reset_and_its_write_is_completed_once_by_its_retry(spark, lake, table):
    reset_at = _failed_audit(spark, lake, table)
    reset_branch(spark, table, "audit_20240103")  # all the killed try did
    assert _refs(lake, table)["audit_20240103"] == reset_at
    write_table(spark, write_spec(table, "append", values_query([(5, "e")], "id, name")))  # main moves on
    main = lake.current_snapshot_id(table)
    _, spec = _branch_change("merge", branch="audit_20240103", table=table, reset_branch=True, source=GOOD)

    retried = merge_into(spark, spec, commit_id="wap:merge_changes:run:2", reuse_commit=True)

    assert lake.snapshot(table, retried["snapshot_id"]).parent_snapshot_id == main  # reset again, once
    assert _names(lake, table, retried["snapshot_id"]) == [
        (1, "good"),
        (2, "b"),
        (3, "c"),
        (4, "d"),
        (5, "e"),
    ]


def test_a_reset_write_that_fails_leaves_the_stale_branch_as_it_was(spark, lake, table):
    _failed_audit(spark, lake, table)
    state, refs = lake.state(table), _refs(lake, table)
    duplicates = values_query([(5, "x"), (5, "y")], "id, name")
    _, spec = _branch_change(
        "merge", branch="audit_20240103", table=table, reset_branch=True, source=duplicates
    )
    with pytest.raises(MergeSourceError):
        merge_into(spark, spec, commit_id="wap:merge_changes:run:2")
    assert _refs(lake, table) == refs  # the branch is back where it was, for inspection
    assert lake.current_snapshot_id(table) == state[1]


def test_a_reset_write_with_isolation_validates_from_mains_snapshot_not_the_stale_branchs(spark, lake, table):
    """The stale head is no ancestor of the reset branch: validating from it would always fail."""
    main = _failed_audit(spark, lake, table)
    spec = write_spec(
        table,
        "overwrite_partitions",
        values_query([(7, "g")], "id, name"),
        branch="audit_20240103",
        reset_branch=True,
        write_options={"isolation-level": "serializable"},
    )
    written = write_table(spark, spec, commit_id="wap:overwrite:run:2")
    assert lake.snapshot(table, written["snapshot_id"]).parent_snapshot_id == main
    assert _names(lake, table, written["snapshot_id"]) == [(7, "g")]  # unpartitioned: all rows replaced

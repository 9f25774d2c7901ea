"""A retry of a try that already committed writes nothing new and reports the earlier commit."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from airflow_iceberg.jobs import table_state
from airflow_iceberg.jobs.commits import earlier_commit
from airflow_iceberg.jobs.iceberg_job import run
from airflow_iceberg.jobs.maintenance import remove_orphan_files
from airflow_iceberg.jobs.reads import read_table
from airflow_iceberg.jobs.spec.request import JobRequest, parse_argv
from airflow_iceberg.jobs.spec.upkeep import OrphanFilesSpec
from airflow_iceberg.jobs.table_state import find_commit, ref_head
from airflow_iceberg.jobs.writes import with_default_validate_from, write_table
from tests.jobs.helpers import read_spec, values_query, write_spec

ROWS = values_query([(1, "a"), (2, "b")], "id, name")
TRY_KEY = "orders:append:manual__2024-01-02:-1"


@pytest.mark.parametrize("mode", ["append", "overwrite_partitions"])
def test_a_retried_write_reuses_the_commit_of_the_earlier_try(spark, lake, table, mode):
    write_table(spark, write_spec(table, "create", ROWS))
    first = write_table(spark, write_spec(table, mode, ROWS), commit_id=TRY_KEY, reuse_commit=True)
    committed = lake.state(table)

    retried = write_table(spark, write_spec(table, mode, ROWS), commit_id=TRY_KEY, reuse_commit=True)

    assert lake.state(table) == committed
    assert retried["snapshot_id"] == first["snapshot_id"] == lake.current_snapshot_id(table)
    assert retried["reused_earlier_commit"] is True and "reused_earlier_commit" not in first
    assert lake.ids(table) == ([1, 1, 2, 2] if mode == "append" else [1, 2])


def test_a_create_retried_after_its_commit_does_not_fail_on_the_existing_table(spark, lake, table):
    first = write_table(spark, write_spec(table, "create", ROWS), commit_id=TRY_KEY, reuse_commit=True)
    retried = write_table(spark, write_spec(table, "create", ROWS), commit_id=TRY_KEY, reuse_commit=True)
    assert retried["snapshot_id"] == first["snapshot_id"]
    assert len(lake.snapshots(table)) == 1


def test_without_reuse_or_with_another_task_identity_the_write_happens(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS))
    write_table(spark, write_spec(table, "append", ROWS), commit_id=TRY_KEY, reuse_commit=True)
    write_table(spark, write_spec(table, "append", ROWS), commit_id=TRY_KEY)  # reuse not asked for
    write_table(spark, write_spec(table, "append", ROWS), commit_id="other-task", reuse_commit=True)
    assert len(lake.snapshots(table)) == 4
    assert len(lake.ids(table)) == 8


def test_a_retried_read_does_not_append_to_its_sink_twice(spark, lake, table, new_table):
    sink = new_table("sink")
    write_table(spark, write_spec(table, "create", ROWS))
    write_table(spark, write_spec(sink, "create", ROWS))
    spec = read_spec(table, sink_table=sink, sink_mode="append")
    first = read_table(spark, spec, commit_id=TRY_KEY, reuse_commit=True)
    retried = read_table(spark, spec, commit_id=TRY_KEY, reuse_commit=True)
    assert retried["sink"]["snapshot_id"] == first["sink"]["snapshot_id"]
    assert retried["sink"]["reused_earlier_commit"] is True
    assert retried["row_count"] == first["row_count"] == 2
    assert lake.ids(sink) == [1, 1, 2, 2]


def test_reuse_commit_travels_through_argv(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS))
    request = JobRequest(spec=write_spec(table, "append", ROWS), commit_id=TRY_KEY, reuse_commit=True)
    parsed = parse_argv(request.to_argv())
    assert parsed.reuse_commit is True
    first, second = run(spark, parsed), run(spark, parsed)
    assert first["snapshot_id"] == second["snapshot_id"]
    assert len(lake.snapshots(table)) == 2


def test_files_of_a_write_that_never_committed_are_found_and_removed(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS))
    state = lake.state(table)
    data_dir = lake._metadata_dir(table).parent / "data"
    stray = data_dir / "00000-killed-write.parquet"  # what a write killed before its commit leaves
    stray.write_bytes(Path(next(data_dir.glob("*.parquet"))).read_bytes())
    cutoff = int(time.time() * 1000) + 1000

    found = remove_orphan_files(spark, OrphanFilesSpec(table, older_than=cutoff, allow_recent_files=True))
    assert found["orphan_file_count"] == 1 and found["orphan_files"][0].endswith(stray.name)
    assert stray.exists()
    removed = remove_orphan_files(
        spark, OrphanFilesSpec(table, older_than=cutoff, dry_run=False, allow_recent_files=True)
    )
    assert removed["orphan_file_count"] == 1 and not stray.exists()
    assert lake.state(table) == state
    assert lake.ids(table) == [1, 2]


def test_a_rolled_back_commit_is_not_found_so_the_repair_writes_again(spark, lake, table):
    """Roll back, fix, clear: the cleared task must write, although its rolled-back snapshot still exists."""
    write_table(spark, write_spec(table, "create", ROWS))
    base = lake.current_snapshot_id(table)
    wrong = write_table(spark, write_spec(table, "append", ROWS), commit_id=TRY_KEY, reuse_commit=True)
    spark.sql(f"CALL lake.system.rollback_to_snapshot('{table.split('.', 1)[1]}', {base})")
    assert lake.current_snapshot_id(table) == base and lake.ids(table) == [1, 2]

    fixed = values_query([(3, "c")], "id, name")
    repaired = write_table(spark, write_spec(table, "append", fixed), commit_id=TRY_KEY, reuse_commit=True)

    assert "reused_earlier_commit" not in repaired
    assert repaired["snapshot_id"] == lake.current_snapshot_id(table) != wrong["snapshot_id"]
    assert repaired["parent_snapshot_id"] == base
    assert lake.ids(table) == [1, 2, 3]
    # A plain retry after the repair (no rollback) still finds the repair's commit.
    retried = write_table(spark, write_spec(table, "append", fixed), commit_id=TRY_KEY, reuse_commit=True)
    assert retried["reused_earlier_commit"] is True and retried["snapshot_id"] == repaired["snapshot_id"]
    assert lake.ids(table) == [1, 2, 3]


def test_commits_are_looked_up_in_the_history_of_the_ref_being_written(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS))
    base = lake.current_snapshot_id(table)
    spark.sql(f"ALTER TABLE {table} CREATE BRANCH audit AS OF VERSION {base}")
    appended = write_table(spark, write_spec(table, "append", ROWS), commit_id=TRY_KEY)

    assert find_commit(spark, table, TRY_KEY)["snapshot_id"] == appended["snapshot_id"]
    assert find_commit(spark, table, TRY_KEY, ref="audit") is None
    assert find_commit(spark, table, TRY_KEY, ref="no_such_branch") is None
    # A branch write looks further, main first: a published (and dropped) branch's commit is there.
    found = earlier_commit(spark, table, TRY_KEY, ref="audit")
    assert (found["snapshot_id"], found["found_on_branch"]) == (appended["snapshot_id"], "main")
    assert (ref_head(spark, table), ref_head(spark, table, "audit")) == (appended["snapshot_id"], base)


def test_isolation_pins_validate_from_to_the_head_of_the_ref_being_written(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS))
    base = lake.current_snapshot_id(table)
    spark.sql(f"ALTER TABLE {table} CREATE BRANCH audit AS OF VERSION {base}")
    head = write_table(spark, write_spec(table, "append", ROWS))["snapshot_id"]
    spec = write_spec(table, "overwrite_partitions", ROWS, write_options={"isolation-level": "serializable"})

    pinned = {ref: with_default_validate_from(spark, spec, ref).write_options for ref in ("main", "audit")}

    assert pinned["main"]["validate-from-snapshot-id"] == str(head)
    assert pinned["audit"]["validate-from-snapshot-id"] == str(base)


def test_an_empty_dynamic_overwrite_reports_no_commit_not_the_current_snapshot(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS, partition_by=("name",)))
    before = lake.state(table)

    nothing = f"SELECT * FROM ({ROWS}) WHERE id < 0"
    result = write_table(spark, write_spec(table, "overwrite_partitions", nothing), commit_id=TRY_KEY)

    assert lake.state(table) == before  # Iceberg skipped the commit ...
    assert (result["committed"], result["snapshot_id"]) == (False, None)  # ... and the result says so
    assert "added_records" not in result


def test_past_the_walk_limit_the_lookup_still_searches_only_the_refs_history(spark, lake, table, monkeypatch):
    write_table(spark, write_spec(table, "create", ROWS))
    base = lake.current_snapshot_id(table)
    old = write_table(spark, write_spec(table, "append", ROWS), commit_id="old")
    write_table(spark, write_spec(table, "append", ROWS), commit_id="newer")
    rolled_back = write_table(spark, write_spec(table, "append", ROWS), commit_id="rolled-back")
    name = table.split(".", 1)[1]
    spark.sql(f"CALL lake.system.rollback_to_snapshot('{name}', {rolled_back['parent_snapshot_id']})")
    monkeypatch.setattr(table_state, "ANCESTOR_WALK_LIMIT", 1)  # the head only; the rest via Spark

    assert find_commit(spark, table, "old")["snapshot_id"] == old["snapshot_id"]
    assert find_commit(spark, table, "rolled-back") is None
    assert find_commit(spark, table, "never") is None
    assert find_commit(spark, table, "newer")["parent_snapshot_id"] == old["snapshot_id"] != base


@pytest.mark.parametrize("mode", ["append", "overwrite_partitions"])
def test_a_retry_finds_its_commit_under_another_writers_later_commit(spark, lake, table, mode):
    """The earlier try's commit is no longer the head: the lookup walks back from it, in the driver."""
    write_table(spark, write_spec(table, "create", ROWS))
    first = write_table(spark, write_spec(table, mode, ROWS), commit_id=TRY_KEY, reuse_commit=True)
    write_table(spark, write_spec(table, "append", values_query([(3, "c")], "id, name")))  # another writer
    committed = lake.state(table)

    retried = write_table(spark, write_spec(table, mode, ROWS), commit_id=TRY_KEY, reuse_commit=True)

    assert lake.state(table) == committed
    assert retried["reused_earlier_commit"] is True and retried["snapshot_id"] == first["snapshot_id"]
    assert lake.ids(table) == ([1, 1, 2, 2, 3] if mode == "append" else [1, 2, 3])

"""Upkeep procedures, checked with pyiceberg: compaction keeps rows, expiry drops snapshots, rollback."""

from __future__ import annotations

import time

import pytest

from airflow_iceberg.jobs import action_specs
from airflow_iceberg.jobs.branches import tag_snapshot
from airflow_iceberg.jobs.job_spec import InvalidSpecError
from airflow_iceberg.jobs.merges import delete_from
from airflow_iceberg.jobs.upkeep import (
    expire_snapshots,
    rewrite_data_files,
    rewrite_manifests,
    rewrite_position_deletes,
    rollback,
)
from airflow_iceberg.jobs.writes import write_table
from tests.jobs.helpers import values_query, write_spec


def _small_files(spark, table: str, batches: int = 4, **properties: str) -> None:
    write_table(
        spark,
        write_spec(
            table,
            "create",
            values_query([(0, "d0")], "id, day"),
            table_properties={"format-version": "2", **properties},
        ),
    )
    for batch in range(1, batches + 1):
        write_table(spark, write_spec(table, "append", values_query([(batch, f"d{batch % 2}")], "id, day")))


def test_compaction_keeps_every_row_in_fewer_larger_files(spark, lake, table):
    _small_files(spark, table)
    rows, files = lake.rows(table), lake.data_files(table)

    result = rewrite_data_files(
        spark, action_specs.RewriteDataFilesSpec(table, options={"min-input-files": "2"}).validated()
    )

    compacted = lake.data_files(table)
    assert lake.rows(table) == rows
    assert (len(files), len(compacted)) == (5, 1)
    assert compacted[0].file_size_in_bytes > max(f.file_size_in_bytes for f in files)
    assert (result["rewritten_data_files_count"], result["added_data_files_count"]) == (5, 1)
    assert result["rewritten_bytes_count"] == sum(f.file_size_in_bytes for f in files)
    assert result["snapshot_id"] == lake.current_snapshot_id(table) != result["previous_snapshot_id"]


def test_sort_compaction_of_one_partition_only(spark, lake, table):
    _small_files(spark, table)
    rows = lake.rows(table)
    result = rewrite_data_files(
        spark,
        action_specs.RewriteDataFilesSpec(
            table,
            strategy="sort",
            sort_order="id DESC NULLS LAST",
            where="day = 'd1'",
            options={"min-input-files": "2"},
        ).validated(),
    )
    assert lake.rows(table) == rows
    assert (result["rewritten_data_files_count"], result["added_data_files_count"]) == (2, 1)  # ids 1 and 3
    assert len(lake.data_files(table)) == 4


def test_expiry_drops_old_snapshots_but_keeps_the_tagged_one_for_time_travel(spark, lake, table):
    _small_files(spark, table, batches=3)
    first, second, *_ = [s.snapshot_id for s in lake.snapshots(table)]
    tag_snapshot(spark, action_specs.TagSpec(table, tag="month_end", snapshot_id=second).validated())
    current = lake.current_snapshot_id(table)

    result = expire_snapshots(
        spark,
        action_specs.ExpireSnapshotsSpec(
            table, older_than=int(time.time() * 1000) + 1000, retain_last=1
        ).validated(),
    )

    kept = {s.snapshot_id for s in lake.snapshots(table)}
    assert kept == {second, current} and first not in kept
    assert result["expired_snapshots_count"] == 2
    assert result["deleted_manifest_lists_count"] == 2
    assert lake.ids(table, second) == [0, 1]  # time travel to the kept snapshot still works
    assert lake.ids(table) == [0, 1, 2, 3]


def test_rewrite_manifests_and_position_deletes_keep_the_rows(spark, lake, table):
    write_table(
        spark,
        write_spec(
            table,
            "create",
            values_query([(i, "d") for i in range(6)], "id, day"),
            table_properties={
                "format-version": "2",
                "write.delete.mode": "merge-on-read",
                "write.distribution-mode": "none",
            },
        ),
    )
    for condition in ("id = 1", "id = 4"):  # a row of each data file: position deletes, not file drops
        delete_from(spark, action_specs.DeleteSpec(table, condition=condition).validated())
    rows = lake.rows(table)
    assert [r["id"] for r in rows] == [0, 2, 3, 5]

    deletes = rewrite_position_deletes(
        spark, action_specs.RewritePositionDeletesSpec(table, options={"rewrite-all": "true"}).validated()
    )
    manifests = rewrite_manifests(spark, action_specs.RewriteManifestsSpec(table).validated())

    assert lake.rows(table) == rows
    assert deletes["rewritten_delete_files_count"] == 2
    assert manifests["rewritten_manifests_count"] > manifests["added_manifests_count"] >= 1


def test_rollback_to_a_snapshot_and_to_a_timestamp_makes_it_current(spark, lake, table):
    _small_files(spark, table, batches=2)
    first, second, third = [s.snapshot_id for s in lake.snapshots(table)]
    second_at = lake.snapshot(table, second).timestamp_ms

    by_time = rollback(spark, action_specs.RollbackSpec(table, timestamp=second_at + 1).validated())
    assert lake.current_snapshot_id(table) == second == by_time["current_snapshot_id"]
    assert by_time["previous_snapshot_id"] == third
    by_id = rollback(spark, action_specs.RollbackSpec(table, snapshot_id=first).validated())
    assert lake.current_snapshot_id(table) == first == by_id["snapshot_id"]
    assert lake.ids(table) == [0]
    again = rollback(spark, action_specs.RollbackSpec(table, snapshot_id=first).validated())  # a retry
    assert again["snapshot_id"] == first


def test_a_where_that_is_not_one_expression_is_refused(spark, lake, table):
    _small_files(spark, table, batches=1)
    state = lake.state(table)
    with pytest.raises(InvalidSpecError, match="not one SQL expression"):
        rewrite_data_files(spark, action_specs.RewriteDataFilesSpec(table, where="id = 1 OR").validated())
    assert lake.state(table) == state

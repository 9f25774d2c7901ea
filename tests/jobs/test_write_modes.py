"""DataFrameWriterV2 modes through ``write_table``, checked with pyiceberg (not Spark)."""

from __future__ import annotations

import pytest

from airflow_iceberg.jobs.spec.request import COMMIT_ID_PROPERTY
from airflow_iceberg.jobs.table_state import TableAlreadyExistsError, TableNotFoundError
from airflow_iceberg.jobs.writes import write_table
from tests.jobs.helpers import values_query, write_spec

ROWS = values_query([(1, "a"), (2, "b"), (3, "c")], "id, name")


def test_create_commits_the_rows_and_reports_that_snapshot(spark, lake, table):
    result = write_table(
        spark,
        write_spec(table, "create", ROWS),
        commit_id="run-1",
        commit_properties={"airflow.dag-id": "orders"},
    )

    assert lake.rows(table) == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": "c"}]
    summary = lake.summary(table)
    assert result["snapshot_id"] == lake.current_snapshot_id(table)
    assert (result["operation"], result["added_records"], result["total_records"]) == (
        summary["operation"],
        int(summary["added-records"]),
        int(summary["total-records"]),
    )
    assert summary[COMMIT_ID_PROPERTY] == "run-1"
    assert summary["airflow.dag-id"] == "orders"


def test_create_refuses_an_existing_table_and_leaves_it_untouched(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS))
    before = lake.state(table)

    with pytest.raises(
        TableAlreadyExistsError, match=f"table {table} already exists; use mode 'create_or_replace'"
    ):
        write_table(spark, write_spec(table, "create", values_query([(9, "z")], "id, name")))

    assert lake.state(table) == before
    assert lake.ids(table) == [1, 2, 3]


def test_replace_swaps_the_rows_and_keeps_the_history(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS))
    first = lake.current_snapshot_id(table)

    result = write_table(
        spark, write_spec(table, "replace", values_query([(7, "x", 1.5)], "id, name, score"))
    )

    assert lake.rows(table) == [{"id": 7, "name": "x", "score": 1.5}]
    assert result["snapshot_id"] == lake.current_snapshot_id(table) != first
    assert lake.ids(table, snapshot_id=first) == [1, 2, 3]


@pytest.mark.parametrize("mode", ["replace", "append", "overwrite_partitions"])
def test_modes_that_need_a_table_fail_without_creating_one(spark, lake, table, mode):
    with pytest.raises(TableNotFoundError, match=f"table {table} does not exist"):
        write_table(spark, write_spec(table, mode, ROWS))
    assert not lake.exists(table)


def test_overwrite_with_a_condition_needs_a_table_too(spark, lake, table):
    with pytest.raises(TableNotFoundError):
        write_table(spark, write_spec(table, "overwrite", ROWS, condition="id = 1"))
    assert not lake.exists(table)


def test_create_or_replace_creates_then_replaces(spark, lake, table):
    write_table(spark, write_spec(table, "create_or_replace", ROWS))
    assert lake.ids(table) == [1, 2, 3]

    write_table(spark, write_spec(table, "create_or_replace", values_query([(4, "d")], "id, name")))

    assert lake.ids(table) == [4]
    assert len(lake.snapshots(table)) == 2


def test_append_adds_rows_in_a_new_append_snapshot(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS))
    first = lake.current_snapshot_id(table)

    result = write_table(spark, write_spec(table, "append", values_query([(4, "d")], "id, name")))

    assert lake.ids(table) == [1, 2, 3, 4]
    summary = lake.summary(table)
    assert summary["operation"] == "append"
    assert lake.snapshot(table, result["snapshot_id"]).parent_snapshot_id == first
    assert result["added_records"] == int(summary["added-records"]) == 1


def test_overwrite_partitions_replaces_only_the_partitions_it_writes(spark, lake, table):
    rows = values_query([(1, "a"), (2, "a"), (3, "b"), (4, "c")], "id, part")
    write_table(spark, write_spec(table, "create", rows, partition_by=("part",)))

    write_table(
        spark, write_spec(table, "overwrite_partitions", values_query([(30, "b"), (31, "b")], "id, part"))
    )

    assert [(r["id"], r["part"]) for r in lake.rows(table)] == [
        (1, "a"),
        (2, "a"),
        (4, "c"),
        (30, "b"),
        (31, "b"),
    ]
    assert lake.summary(table)["operation"] == "overwrite"


def test_overwrite_deletes_what_the_condition_matches_and_adds_the_new_rows(spark, lake, table):
    write_table(
        spark,
        write_spec(
            table, "create", values_query([(1, "a"), (2, "b"), (3, "b")], "id, part"), partition_by=("part",)
        ),
    )

    result = write_table(
        spark, write_spec(table, "overwrite", values_query([(20, "b")], "id, part"), condition="part = 'b'")
    )

    assert [(r["id"], r["part"]) for r in lake.rows(table)] == [(1, "a"), (20, "b")]
    summary = lake.summary(table)
    assert summary["operation"] == "overwrite"
    assert result["deleted_records"] == int(summary["deleted-records"]) == 2


@pytest.mark.parametrize(
    ("properties", "version"), [({}, 2), ({"format-version": "3"}, 3)], ids=["default", "v3"]
)
def test_a_created_table_is_format_v2_unless_asked_for_v3_and_pyiceberg_reads_both(
    spark, lake, table, properties, version
):
    """Iceberg's default format is still v2 in 1.12 (and 1.11); v3 is chosen with table_properties."""
    created = values_query([(1, "a"), (2, "b")], "id, name")
    write_table(spark, write_spec(table, "create", created, table_properties=properties))
    write_table(spark, write_spec(table, "append", values_query([(3, "c")], "id, name")))
    assert lake.load(table).metadata.format_version == version
    assert [(row["id"], row["name"]) for row in lake.rows(table)] == [(1, "a"), (2, "b"), (3, "c")]

"""Partition transforms: the spec Iceberg stored and the partitions the data landed in (read by pyiceberg)."""

from __future__ import annotations

import re

import pytest

from airflow_iceberg.jobs.spec.request import COMMIT_ID_PROPERTY
from airflow_iceberg.jobs.table_state import SchemaMismatchError
from airflow_iceberg.jobs.writes import write_table
from tests.jobs.helpers import write_spec

# Two years, three months, three days, four hours; names with two 2-letter prefixes.
SOURCE = (
    "SELECT * FROM VALUES "
    "(1, TIMESTAMP'2023-01-01 00:00:00', 'abc'), (2, TIMESTAMP'2024-01-01 00:00:00', 'abd'), "
    "(3, TIMESTAMP'2024-02-01 00:00:00', 'xyz'), (4, TIMESTAMP'2024-02-01 05:00:00', 'xya') "
    "AS v(id, ts, name)"
)


def _bucket_count(ids: list[int], buckets: int) -> int:
    from pyiceberg.transforms import BucketTransform
    from pyiceberg.types import IntegerType

    bucket = BucketTransform(buckets).transform(IntegerType())
    return len({bucket(value) for value in ids})


@pytest.mark.parametrize(
    ("transform", "field", "partitions"),
    [
        ("years(ts)", ("ts", "year"), 2),
        ("months(ts)", ("ts", "month"), 3),
        ("days(ts)", ("ts", "day"), 3),
        ("hours(ts)", ("ts", "hour"), 4),
        ("bucket(4, id)", ("id", "bucket[4]"), _bucket_count([1, 2, 3, 4], 4)),
        ("truncate(2, name)", ("name", "truncate[2]"), 2),
        ("name", ("name", "identity"), 4),
    ],
)
def test_each_transform_becomes_the_partition_spec(spark, lake, table, transform, field, partitions):
    write_table(spark, write_spec(table, "create", SOURCE, partition_by=(transform,)))

    assert lake.partition_fields(table) == [field]
    assert len({tuple(f.partition) for f in lake.data_files(table)}) == partitions
    assert lake.ids(table) == [1, 2, 3, 4]


def test_several_transforms_make_a_multi_field_spec(spark, lake, table):
    write_table(
        spark, write_spec(table, "create_or_replace", SOURCE, partition_by=("days(ts)", "bucket(2, id)"))
    )
    assert lake.partition_fields(table) == [("ts", "day"), ("id", "bucket[2]")]


def test_truncate_tables_carry_commit_tags_and_quoted_properties(spark, lake, table):
    """The SQL CTAS path gets snapshot properties through Iceberg's CommitMetadata, not write options."""
    spec = write_spec(
        table,
        "create",
        SOURCE,
        partition_by=("truncate(2, name)",),
        table_properties={"comment": "it's a \\ test", "format-version": "1"},
        write_options={"snapshot-property.source": "crm"},
    )

    result = write_table(spark, spec, commit_id="run-7", commit_properties={"airflow.task-id": "load"})

    summary = lake.summary(table)
    assert (summary[COMMIT_ID_PROPERTY], summary["airflow.task-id"], summary["source"]) == (
        "run-7",
        "load",
        "crm",
    )
    assert result["snapshot_id"] == lake.current_snapshot_id(table)
    loaded = lake.load(table)
    assert loaded.properties["comment"] == "it's a \\ test"
    assert loaded.metadata.format_version == 1


def test_truncate_replace_keeps_the_history(spark, lake, table):
    write_table(spark, write_spec(table, "create", SOURCE, partition_by=("truncate(2, name)",)))
    write_table(
        spark,
        write_spec(table, "replace", "SELECT 9 AS id, 'qq' AS name", partition_by=("truncate(1, name)",)),
    )

    assert lake.rows(table) == [{"id": 9, "name": "qq"}]
    assert lake.partition_fields(table) == [("name", "truncate[1]")]
    assert len(lake.snapshots(table)) == 2


@pytest.mark.parametrize("transform", ["days(nope)", "truncate(2, nope)", "nope"])
def test_partition_column_not_in_the_source_is_a_clear_error_and_creates_nothing(
    spark, lake, table, transform
):
    message = (
        f"partition_by '{transform}' uses column 'nope', which is not in the source (columns: id, ts, name)"
    )
    with pytest.raises(SchemaMismatchError, match=re.escape(message)):
        write_table(spark, write_spec(table, "create", SOURCE, partition_by=(transform,)))
    assert not lake.exists(table)


def test_partition_column_check_leaves_an_existing_table_alone_on_replace(spark, lake, table):
    write_table(spark, write_spec(table, "create", SOURCE))
    before = lake.state(table)
    with pytest.raises(SchemaMismatchError):
        write_table(spark, write_spec(table, "replace", SOURCE, partition_by=("bucket(2, missing)",)))
    assert lake.state(table) == before

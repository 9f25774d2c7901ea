"""Reads: time travel, incremental ranges, read options, pushdown, sinks, preview, and clear errors.

Expected rows and snapshot ids always come from pyiceberg (``lake``), never from the job.
"""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace

import pytest

from airflow_iceberg.jobs.reads import read_frame, read_table, resolve_snapshot
from airflow_iceberg.jobs.scan import with_spark_time_travel
from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.reads import ReadSpec
from airflow_iceberg.jobs.spec.request import COMMIT_ID_PROPERTY
from airflow_iceberg.jobs.table_state import (
    SnapshotNotFoundError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from airflow_iceberg.jobs.writes import write_table
from tests.jobs.helpers import CATALOG, NAMESPACE, read_spec, values_query, write_spec


def _append(spark, table, *ids):
    write_table(spark, write_spec(table, "append", values_query([(i, f"n{i}") for i in ids], "id, name")))
    time.sleep(0.01)  # distinct commit milliseconds, so as-of-timestamp has something to tell apart


@pytest.fixture(scope="module")
def history(spark, lake):
    """A table read by many tests (never written by them): three appends, a tag and a branch.

    s1 holds id 1; s2 adds 2; s3 adds 3 (in two files). Tag ``first`` is s1; branch ``dev`` is s3 plus id 99.
    """
    table = f"{CATALOG}.{NAMESPACE}.history_{uuid.uuid4().hex[:8]}"
    write_table(spark, write_spec(table, "create", values_query([(1, "n1")], "id, name")))
    time.sleep(0.01)
    _append(spark, table, 2)
    _append(spark, table, 3)
    s1, s2, s3 = (s.snapshot_id for s in lake.snapshots(table))
    spark.sql(f"ALTER TABLE {table} CREATE TAG first AS OF VERSION {s1}")
    spark.sql(f"ALTER TABLE {table} CREATE BRANCH dev")
    spark.sql(f"INSERT INTO {table}.branch_dev VALUES (99, 'dev')")
    return SimpleNamespace(table=table, s1=s1, s2=s2, s3=s3)


def _timestamp(lake, table, snapshot_id):
    return lake.snapshot(table, snapshot_id).timestamp_ms


# --------------------------------------------------------------------------- time travel


def test_current_read(spark, lake, history):
    result = read_table(spark, read_spec(history.table, preview_rows=10))

    assert result["snapshot_id"] == lake.current_snapshot_id(history.table) == history.s3
    assert result["selector"] is None
    assert result["row_count"] == len(lake.rows(history.table)) == 3
    assert sorted(row["id"] for row in result["preview"]) == lake.ids(history.table)


def test_snapshot_id(spark, lake, history):
    result = read_table(spark, read_spec(history.table, snapshot_id=history.s2, preview_rows=10))

    assert (result["snapshot_id"], result["selector"]) == (history.s2, "snapshot_id")
    assert sorted(row["id"] for row in result["preview"]) == lake.ids(history.table, history.s2) == [1, 2]


def test_as_of_timestamp_picks_the_snapshot_current_at_that_millisecond(spark, lake, history):
    at_s2 = _timestamp(lake, history.table, history.s2)
    assert read_table(spark, read_spec(history.table, as_of_timestamp=at_s2))["snapshot_id"] == history.s2
    result = read_table(spark, read_spec(history.table, as_of_timestamp=at_s2 - 1, preview_rows=10))
    assert result["snapshot_id"] == history.s1
    assert [row["id"] for row in result["preview"]] == lake.ids(history.table, history.s1) == [1]


def test_branch(spark, lake, history):
    head = lake.load(history.table).metadata.refs["dev"].snapshot_id
    result = read_table(spark, read_spec(history.table, branch="dev", preview_rows=10))
    assert result["snapshot_id"] == head
    assert sorted(row["id"] for row in result["preview"]) == lake.ids(history.table, head) == [1, 2, 3, 99]


def test_tag(spark, lake, history):
    result = read_table(spark, read_spec(history.table, tag="first", preview_rows=10))
    assert result["snapshot_id"] == lake.load(history.table).metadata.refs["first"].snapshot_id == history.s1
    assert [row["id"] for row in result["preview"]] == [1]


@pytest.mark.parametrize(
    ("selector", "error", "message"),
    [
        (
            {"as_of_timestamp": 1},
            SnapshotNotFoundError,
            "as_of_timestamp 1 .* is before the first snapshot of table",
        ),
        ({"snapshot_id": 123}, SnapshotNotFoundError, "snapshot_id 123 is not a snapshot of table"),
        ({"branch": "nope"}, SnapshotNotFoundError, "branch 'nope' does not exist in table"),
        ({"tag": "nope"}, SnapshotNotFoundError, "tag 'nope' does not exist in table"),
        ({"branch": "first"}, SnapshotNotFoundError, "branch 'first' does not exist"),  # a tag, not a branch
        ({"tag": "dev"}, SnapshotNotFoundError, "tag 'dev' does not exist"),
        (
            {"start_snapshot_id": 123},
            SnapshotNotFoundError,
            "start_snapshot_id 123 is not a snapshot of table",
        ),
    ],
)
def test_selectors_that_point_nowhere_fail_before_reading_or_writing(
    spark, lake, history, new_table, selector, error, message
):
    sink = new_table("sink")
    before = lake.state(history.table)
    with pytest.raises(error, match=message):
        read_table(spark, read_spec(history.table, sink_table=sink, **selector))
    assert lake.state(history.table) == before
    assert not lake.exists(sink)


def test_two_selectors_are_rejected_before_spark(spark, history):
    with pytest.raises(InvalidSpecError, match="give exactly one of"):
        read_table(spark, ReadSpec(history.table, snapshot_id=history.s1, tag="first").validated())


def test_missing_table(spark, new_table):
    missing = new_table("missing")
    with pytest.raises(TableNotFoundError, match=f"table {missing} does not exist"):
        read_table(spark, read_spec(missing))


# --------------------------------------------------------------------------- read options and pushdown


def _partitions(spark, table, **options):
    return read_frame(spark, read_spec(table, read_options=options)).rdd.getNumPartitions()


def test_split_size_and_file_open_cost_change_how_files_are_planned(spark, lake, history):
    """Three small files: one split by default; one split each when a split or an open cost is that big."""
    files = len(lake.data_files(history.table))
    assert files == 3
    assert _partitions(spark, history.table) == 1
    assert _partitions(spark, history.table, **{"split-size": "1", "lookback": "1"}) == files
    assert (
        _partitions(spark, history.table, **{"split-size": "1000000", "file-open-cost": "1000000"}) == files
    )


@pytest.mark.parametrize("enabled", [True, False])
def test_vectorization_enabled_switches_the_columnar_reader(spark, lake, history, enabled):
    frame = read_frame(
        spark, read_spec(history.table, read_options={"vectorization-enabled": enabled, "batch-size": "2"})
    )
    plan = frame._jdf.queryExecution().executedPlan().toString()
    assert ("ColumnarToRow" in plan) is enabled
    assert sorted(row.id for row in frame.collect()) == lake.ids(history.table)


def _scan_line(frame):
    plan = frame._jdf.queryExecution().executedPlan().toString()
    return next(line.strip() for line in plan.splitlines() if "BatchScan" in line)


def test_columns_and_filter_are_pushed_into_the_scan(spark, lake, history):
    spec = read_spec(history.table, columns=("id",), filter="id <> 2", preview_rows=10)

    scan = _scan_line(read_frame(spark, spec))

    assert "filters=id IS NOT NULL, NOT (id = 2)" in scan
    assert scan.split("]")[0].split("[")[1].startswith("id#") and "name#" not in scan  # only id is read
    result = read_table(spark, spec)
    expected = [row["id"] for row in lake.rows(history.table) if row["id"] != 2]
    assert sorted(row["id"] for row in result["preview"]) == expected == [1, 3]
    assert all(set(row) == {"id"} for row in result["preview"])


def test_filter_may_use_a_column_that_is_not_kept(spark, lake, history):
    result = read_table(
        spark, read_spec(history.table, columns=("id",), filter="name = 'n3'", preview_rows=10)
    )
    assert result["preview"] == [{"id": row["id"]} for row in lake.rows(history.table) if row["name"] == "n3"]
    assert "filters=name IS NOT NULL, name = 'n3'" in _scan_line(
        read_frame(spark, read_spec(history.table, columns=("id",), filter="name = 'n3'"))
    )


def test_preview_is_bounded(spark, lake, history):
    result = read_table(spark, read_spec(history.table, preview_rows=2))
    assert result["row_count"] == 3
    assert len(result["preview"]) == 2
    assert all(row in lake.rows(history.table) for row in result["preview"])


def test_current_read_is_pinned_to_the_snapshot_it_resolved(spark, lake, table):
    """The count, preview and sink scan separately; a commit landing meanwhile must not leak in."""
    write_table(spark, write_spec(table, "create", values_query([(1, "a")], "id, name")))
    spec = read_spec(table)
    snapshot = resolve_snapshot(spark, spec)
    _append(spark, table, 2)  # a concurrent commit, after the job resolved the current snapshot

    frame = read_frame(spark, spec, snapshot)

    assert sorted(row.id for row in frame.collect()) == lake.ids(table, snapshot) == [1]


# --------------------------------------------------------------------------- incremental


def test_incremental_read_returns_the_rows_appended_in_the_range(spark, lake, history):
    result = read_table(
        spark,
        read_spec(history.table, start_snapshot_id=history.s1, end_snapshot_id=history.s2, preview_rows=10),
    )
    assert [row["id"] for row in result["preview"]] == [2]
    assert (result["start_snapshot_id"], result["end_snapshot_id"], result["snapshot_id"]) == (
        history.s1,
        history.s2,
        history.s2,
    )
    assert result["skipped_snapshot_ids"] == []


def test_incremental_read_ends_at_the_current_snapshot_by_default(spark, lake, history):
    result = read_table(spark, read_spec(history.table, start_snapshot_id=history.s1, preview_rows=10))
    expected = sorted(set(lake.ids(history.table)) - set(lake.ids(history.table, history.s1)))
    assert sorted(row["id"] for row in result["preview"]) == expected == [2, 3]
    assert result["end_snapshot_id"] == lake.current_snapshot_id(history.table)


def test_incremental_read_with_nothing_new_is_empty_not_an_error(spark, history):
    result = read_table(spark, read_spec(history.table, start_snapshot_id=history.s3, columns=("id",)))
    assert result["row_count"] == 0


def test_incremental_range_must_run_forwards(spark, history):
    with pytest.raises(
        SnapshotNotFoundError,
        match=f"start_snapshot_id {history.s3} is not an ancestor of end_snapshot_id {history.s1}",
    ):
        read_table(spark, read_spec(history.table, start_snapshot_id=history.s3, end_snapshot_id=history.s1))


def test_incremental_read_reports_the_overwrites_it_cannot_include(spark, lake, table):
    write_table(spark, write_spec(table, "create", values_query([(1, "a")], "id, name")))
    start = lake.current_snapshot_id(table)
    _append(spark, table, 2)
    write_table(
        spark, write_spec(table, "overwrite", values_query([(10, "x")], "id, name"), condition="id = 1")
    )
    overwrite = lake.current_snapshot_id(table)
    _append(spark, table, 3)

    result = read_table(spark, read_spec(table, start_snapshot_id=start, preview_rows=10))

    assert sorted(row["id"] for row in result["preview"]) == [2, 3]
    assert result["skipped_snapshot_ids"] == [overwrite]
    assert lake.summary(table, overwrite)["operation"] == "overwrite"


# --------------------------------------------------------------------------- sinks


@pytest.mark.parametrize("mode", ["create", "create_or_replace"])
def test_sink_table_is_created_with_the_rows_read(spark, lake, history, new_table, mode):
    sink = new_table("sink")
    result = read_table(
        spark,
        read_spec(history.table, snapshot_id=history.s2, sink_table=sink, sink_mode=mode),
        commit_id="read-1",
    )
    assert lake.rows(sink) == lake.rows(history.table, history.s2)
    assert result["sink"]["snapshot_id"] == lake.current_snapshot_id(sink)
    assert lake.summary(sink)[COMMIT_ID_PROPERTY] == "read-1"


def test_sink_append_replace_and_overwrite_partitions(spark, lake, history, new_table):
    sink = new_table("sink")
    read_table(spark, read_spec(history.table, tag="first", sink_table=sink, sink_mode="create"))
    read_table(spark, read_spec(history.table, filter="id = 2", sink_table=sink, sink_mode="append"))
    assert lake.ids(sink) == [1, 2]

    read_table(
        spark, read_spec(history.table, filter="id = 3", sink_table=sink, sink_mode="overwrite_partitions")
    )
    assert lake.ids(sink) == [3]  # unpartitioned: the one partition is replaced

    read_table(spark, read_spec(history.table, snapshot_id=history.s2, sink_table=sink, sink_mode="replace"))
    assert lake.ids(sink) == [1, 2]
    assert [s.summary.operation.value for s in lake.snapshots(sink)][:2] == ["append", "append"]


def test_sink_table_state_is_checked_before_reading(spark, lake, history, new_table):
    sink = new_table("sink")
    read_table(spark, read_spec(history.table, sink_table=sink, sink_mode="create"))
    before = lake.state(sink)
    with pytest.raises(TableAlreadyExistsError):
        read_table(spark, read_spec(history.table, sink_table=sink, sink_mode="create"))
    assert lake.state(sink) == before
    with pytest.raises(TableNotFoundError):
        read_table(spark, read_spec(history.table, sink_table=new_table("nosink"), sink_mode="append"))


@pytest.mark.parametrize("file_format", ["parquet", "json", "orc", "csv"])
def test_sink_files(spark, lake, history, tmp_path, file_format):
    out = tmp_path / "out"
    result = read_table(spark, read_spec(history.table, sink_path=str(out), sink_format=file_format))

    assert result["sink"] == {"path": str(out), "format": file_format}
    assert sorted(_read_files(out, file_format)) == lake.ids(history.table)


def _read_files(directory, file_format):
    """The ``id`` column of every data file Spark wrote, read with pyarrow."""
    import pyarrow.csv
    import pyarrow.json
    import pyarrow.orc
    import pyarrow.parquet

    ids = []
    for path in directory.glob("part-*"):
        if file_format == "parquet":
            ids += pyarrow.parquet.read_table(path).column("id").to_pylist()
        elif file_format == "orc":
            ids += pyarrow.orc.read_table(path).column("id").to_pylist()
        elif file_format == "json":
            ids += pyarrow.json.read_json(path).column("id").to_pylist()
        else:
            options = pyarrow.csv.ReadOptions(column_names=["id", "name"])
            ids += pyarrow.csv.read_csv(path, read_options=options).column("id").to_pylist()
    return ids


def test_sink_path_mode_error_refuses_existing_files(spark, history, tmp_path):
    out = tmp_path / "out"
    read_table(spark, read_spec(history.table, sink_path=str(out)))
    with pytest.raises(Exception, match="already exists"):
        read_table(spark, read_spec(history.table, sink_path=str(out), sink_path_mode="error"))
    read_table(spark, read_spec(history.table, sink_path=str(out), sink_path_mode="append"))
    assert len(_read_files(out, "parquet")) == 6


@pytest.mark.parametrize("sink", ["table", "path"])
def test_a_filtered_sink_write_counts_its_rows_without_a_scan_of_its_own(
    spark, history, new_table, tmp_path, monkeypatch, sink
):
    """row_count comes from the sink commit's added-records, or is observed while files are written."""
    from pyspark.sql import DataFrame

    def count(self):
        raise AssertionError("a separate count() scans the rows a second time")

    monkeypatch.setattr(DataFrame, "count", count)
    target = {"sink_table": new_table("sink")} if sink == "table" else {"sink_path": str(tmp_path / "out")}

    result = read_table(spark, read_spec(history.table, filter="id >= 2", **target))

    assert result["row_count"] == 2


@pytest.mark.parametrize(
    ("version", "options", "expected"),
    [
        ("4.1.4", {"tag": "t", "split-size": "1"}, {"split-size": "1", "versionAsOf": "7"}),
        ("4.1.4", {"snapshot-id": "7"}, {"versionAsOf": "7"}),
        ("4.1.4", {"as-of-timestamp": "1700000000000"}, {"versionAsOf": "7"}),
        ("4.1.4", {"branch": "audit"}, {"branch": "audit"}),  # still Iceberg's option on 4.1
        ("4.0.5", {"snapshot-id": "7"}, {"snapshot-id": "7"}),
        ("3.5.9", {"tag": "t"}, {"tag": "t"}),
    ],
)
def test_from_spark_4_1_time_travel_uses_sparks_version_as_of(version, options, expected):
    """Iceberg 1.11's Spark 4.1 runtime refuses its own snapshot-id, as-of-timestamp and tag options."""
    assert with_spark_time_travel(SimpleNamespace(version=version), options, 7) == expected

"""stream_from_timestamp: a bounded (availableNow) Structured Streaming read resuming from its checkpoint."""

from __future__ import annotations

import json
import time

import pytest

from airflow_iceberg.jobs.reads import read_table
from airflow_iceberg.jobs.spec.request import COMMIT_ID_PROPERTY
from airflow_iceberg.jobs.table_state import TableNotFoundError
from airflow_iceberg.jobs.writes import write_table
from tests.jobs.helpers import read_spec, values_query, write_spec


def _append(spark, table, *ids):
    write_table(spark, write_spec(table, "append", values_query([(i, f"n{i}") for i in ids], "id, name")))
    time.sleep(0.01)


@pytest.fixture
def source(spark, lake, new_table):
    """A table with three appends (ids 1, 2, 3); returns (name, timestamp of the second snapshot)."""
    table = new_table("events")
    write_table(spark, write_spec(table, "create", values_query([(1, "n1")], "id, name")))
    time.sleep(0.01)
    _append(spark, table, 2)
    _append(spark, table, 3)
    return table, lake.snapshots(table)[1].timestamp_ms


def test_stream_into_a_table_picks_up_only_new_commits_on_each_run(spark, lake, source, new_table, tmp_path):
    table, from_second = source
    sink = new_table("sink")
    spec = read_spec(
        table,
        stream_from_timestamp=from_second,
        checkpoint_location=str(tmp_path / "ck"),
        sink_table=sink,
        sink_mode="append",
    )

    first = read_table(spark, spec, commit_id="run-1")
    assert lake.ids(sink) == [2, 3]
    assert (first["row_count"], first["rows_read"]) == (2, 2)
    assert first["snapshot_id"] == lake.current_snapshot_id(table)
    assert first["sink"]["snapshot_id"] == lake.current_snapshot_id(sink)
    assert lake.summary(sink)[COMMIT_ID_PROPERTY] == "run-1"

    _append(spark, table, 4)
    second = read_table(spark, spec, commit_id="run-2")
    assert lake.ids(sink) == [2, 3, 4]
    assert second["row_count"] == 1

    before = lake.state(sink)
    third = read_table(spark, spec, commit_id="run-3")
    assert (third["row_count"], third["sink"]["committed"]) == (0, False)
    assert lake.state(sink) == before


def test_stream_to_files_with_filter_and_columns(spark, lake, source, tmp_path):
    table, from_second = source
    out = tmp_path / "out"
    spec = read_spec(
        table,
        stream_from_timestamp=from_second,
        checkpoint_location=str(tmp_path / "ck"),
        sink_path=str(out),
        sink_format="json",
        sink_path_mode="append",
        columns=("id",),
        filter="id <> 2",
    )

    result = read_table(spark, spec)

    rows = [json.loads(line) for path in out.glob("part-*.json") for line in path.read_text().splitlines()]
    assert rows == [{"id": 3}]
    assert result["rows_read"] == 2  # ids 2 and 3 were read; the filter dropped 2
    assert result["row_count"] is None  # the file sink does not report how many rows it wrote
    assert lake.ids(table) == [1, 2, 3]  # the source is only read


def test_stream_fails_clearly_on_an_overwrite_unless_told_to_skip_it(
    spark, lake, source, new_table, tmp_path
):
    table, from_second = source
    write_table(
        spark, write_spec(table, "overwrite", values_query([(9, "x")], "id, name"), condition="id = 1")
    )
    sink = new_table("sink")
    spec = read_spec(
        table,
        stream_from_timestamp=from_second,
        checkpoint_location=str(tmp_path / "ck"),
        sink_table=sink,
        sink_mode="append",
    )

    with pytest.raises(Exception, match="Cannot process overwrite snapshot"):
        read_table(spark, spec)
    assert not lake.exists(sink) or lake.current_snapshot_id(sink) is None  # nothing was committed

    skipping = read_spec(
        table,
        stream_from_timestamp=from_second,
        checkpoint_location=str(tmp_path / "ck2"),
        sink_table=sink,
        sink_mode="append",
        read_options={"streaming-skip-overwrite-snapshots": "true"},
    )
    read_table(spark, skipping)
    assert lake.ids(sink) == [2, 3]


def test_stream_from_a_missing_table(spark, new_table, tmp_path):
    missing = new_table("missing")
    with pytest.raises(TableNotFoundError):
        read_table(
            spark,
            read_spec(
                missing,
                stream_from_timestamp=0,
                checkpoint_location=str(tmp_path / "ck"),
                sink_path=str(tmp_path / "o"),
                sink_path_mode="append",
            ),
        )


def test_stream_into_a_table_counts_the_rows_written_after_the_filter(
    spark, lake, source, new_table, tmp_path
):
    table, from_second = source
    sink = new_table("sink")
    spec = read_spec(
        table,
        stream_from_timestamp=from_second,
        checkpoint_location=str(tmp_path / "ck"),
        sink_table=sink,
        sink_mode="append",
        filter="id <> 2",
    )

    result = read_table(spark, spec)

    assert lake.ids(sink) == [3]
    assert (result["rows_read"], result["row_count"]) == (2, 1)
    assert result["sink"]["added_records"] == int(lake.summary(sink)["added-records"]) == 1


@pytest.mark.parametrize(
    ("mode", "operation"), [("create", "append"), ("create_or_replace", "overwrite")]
)
def test_a_new_tables_first_snapshot_and_what_a_stream_from_its_start_reads(
    spark, lake, new_table, tmp_path, mode, operation
):
    """docs/operators.md: `create` starts a table with an append, `create_or_replace` with an
    overwrite, which stops a stream from the start; skipping it loses its rows."""
    table = new_table("first")
    write_table(spark, write_spec(table, mode, values_query([(1, "n1"), (2, "n2")], "id, name")))
    assert lake.summary(table)["operation"] == operation
    _append(spark, table, 3)
    start = lake.snapshots(table)[0].timestamp_ms

    def stream(sink: str, **read_options: str) -> None:
        spec = read_spec(table, stream_from_timestamp=start, checkpoint_location=str(tmp_path / sink),
                         sink_table=sink, sink_mode="append", read_options=read_options)
        read_table(spark, spec)

    if mode == "create":
        everything = new_table("all")
        stream(everything)
        assert lake.ids(everything) == [1, 2, 3]
        return
    with pytest.raises(Exception, match="Cannot process overwrite snapshot"):
        stream(new_table("stopped"))
    skipping = new_table("skipping")
    stream(skipping, **{"streaming-skip-overwrite-snapshots": "true"})
    assert lake.ids(skipping) == [3]  # the first snapshot's rows are skipped with it

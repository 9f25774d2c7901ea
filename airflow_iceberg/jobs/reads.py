"""Batch reads: time travel, incremental ranges, and the sink the rows go to.

The snapshot a read will see is resolved first, from the table's metadata tables, so a selector
that points nowhere fails with a message naming the table and the value; every later scan
(count, preview, sink) is pinned to that one snapshot.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from pyspark.sql import Observation
from pyspark.sql import functions as F

from airflow_iceberg.jobs.commits import earlier_commit, new_commit_id, result_of_write, write_options_for
from airflow_iceberg.jobs.scan import project, reader_options, with_spark_time_travel
from airflow_iceberg.jobs.spec.identifiers import quote_identifier
from airflow_iceberg.jobs.spec.reads import ReadSpec
from airflow_iceberg.jobs.spec.request import SOURCE_SNAPSHOT_PROPERTY
from airflow_iceberg.jobs.spec.writes import CREATE_MODES
from airflow_iceberg.jobs.streams import stream_table
from airflow_iceberg.jobs.table_state import (
    SnapshotNotFoundError,
    check_table_state,
    current_snapshot_id,
    ensure_namespace,
    metadata_table,
    ref_snapshot_id,
    require_table,
    snapshot_exists,
)
from airflow_iceberg.jobs.writes import write_frame

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def resolve_snapshot(spark: SparkSession, spec: ReadSpec) -> int | None:
    """Find the snapshot a read will see, and fail clearly when the selector points nowhere.

    Checking the table's metadata tables first gives errors that name the table and the bad
    value, instead of a Java stack trace from deep inside the scan. For an incremental read
    this is the end of the range; for a stream it is None (the checkpoint decides).
    """
    table = spec.table
    if spec.snapshot_id is not None:
        if not snapshot_exists(spark, table, spec.snapshot_id):
            raise SnapshotNotFoundError(f"snapshot_id {spec.snapshot_id} is not a snapshot of table {table}")
        return spec.snapshot_id
    if spec.as_of_timestamp is not None:
        return _snapshot_as_of(spark, table, spec.as_of_timestamp)
    if spec.branch is not None or spec.tag is not None:
        kind, name = ("BRANCH", spec.branch) if spec.branch is not None else ("TAG", spec.tag)
        found = ref_snapshot_id(spark, table, str(name), kind)
        if found is None:
            raise SnapshotNotFoundError(f"{kind.lower()} {name!r} does not exist in table {table}")
        return found
    if spec.start_snapshot_id is not None:
        return incremental_range(spark, spec)[1]
    if spec.is_stream:
        return None
    return current_snapshot_id(spark, table)


def _snapshot_as_of(spark: SparkSession, table: str, timestamp_ms: int) -> int:
    history = spark.table(metadata_table(table, "history")).withColumn(
        "made_ms", F.expr("unix_millis(made_current_at)")
    )
    rows = history.where(F.col("made_ms") <= timestamp_ms).orderBy(F.col("made_ms").desc()).limit(1).collect()
    if rows:
        return int(rows[0].snapshot_id)
    first = history.agg(F.min("made_ms").alias("first")).collect()[0].first
    when = datetime.fromtimestamp(timestamp_ms / 1000, tz=timezone.utc).isoformat()
    if first is None:
        raise SnapshotNotFoundError(f"table {table} has no snapshots to time-travel to")
    first_iso = datetime.fromtimestamp(first / 1000, tz=timezone.utc).isoformat()
    raise SnapshotNotFoundError(
        f"as_of_timestamp {timestamp_ms} ({when}) is before the first snapshot of table {table} "
        f"({first} = {first_iso})"
    )


def _snapshot_graph(spark: SparkSession, table: str) -> dict[int, tuple[int | None, str]]:
    """Every snapshot of the table: id -> (parent id, operation)."""
    rows = (
        spark.table(metadata_table(table, "snapshots"))
        .select("snapshot_id", "parent_id", "operation")
        .collect()
    )
    return {
        int(row.snapshot_id): (int(row.parent_id) if row.parent_id is not None else None, row.operation)
        for row in rows
    }


def incremental_range(spark: SparkSession, spec: ReadSpec) -> tuple[int, int, list[int]]:
    """Check an incremental read's range and return ``(start, end, skipped non-append snapshot ids)``.

    The start is exclusive and must be an ancestor of (or equal to) the end; the end defaults to
    the current snapshot. Iceberg's incremental scan returns only rows *appended* in the range;
    the ids of the overwrite/delete/replace snapshots it passes over are returned so the result
    can say so instead of silently dropping them.
    """
    table, start = spec.table, int(spec.start_snapshot_id or 0)
    graph = _snapshot_graph(spark, table)
    end = spec.end_snapshot_id if spec.end_snapshot_id is not None else current_snapshot_id(spark, table)
    for name, snapshot in (("start_snapshot_id", start), ("end_snapshot_id", end)):
        if snapshot is None or snapshot not in graph:
            raise SnapshotNotFoundError(f"{name} {snapshot} is not a snapshot of table {table}")
    assert end is not None
    skipped: list[int] = []
    cursor: int | None = end
    while cursor is not None and cursor != start:
        parent, operation = graph.get(cursor, (None, ""))
        if operation != "append":
            skipped.append(cursor)
        cursor = parent
    if cursor is None:
        raise SnapshotNotFoundError(
            f"start_snapshot_id {start} is not an ancestor of end_snapshot_id {end} in table {table}"
        )
    return start, end, sorted(skipped)


def read_frame(spark: SparkSession, spec: ReadSpec, snapshot_id: int | None = None) -> DataFrame:
    """The batch DataFrame a read produces (options, selector, filter and columns applied)."""
    empty_range = spec.start_snapshot_id is not None and spec.start_snapshot_id == snapshot_id
    if empty_range:
        # An empty range: Iceberg rejects start == end, but "nothing new since start" is a normal
        # outcome for a pipeline that reads incrementally from where it stopped.
        options = {**spec.read_options, "snapshot-id": str(snapshot_id)}
    else:
        options = reader_options(spec, snapshot_id)
    df = spark.read.options(**with_spark_time_travel(spark, options, snapshot_id)).table(
        quote_identifier(spec.table)
    )
    return project(df.limit(0) if empty_range else df, spec)


def read_table(
    spark: SparkSession,
    spec: ReadSpec,
    commit_id: str | None = None,
    commit_properties: Mapping[str, str] | None = None,
    reuse_commit: bool = False,
) -> dict[str, Any]:
    """Read the table (as of the chosen snapshot), write the rows to the sink, report the count.

    The rows are scanned once for the sink: ``row_count`` is the sink commit's ``added-records``
    (a table sink) or a count observed while the files were written (a path sink). Only a read
    without a sink, or whose sink an earlier try already wrote, counts with a scan of its own.
    With ``reuse_commit``, a sink table that an earlier try already wrote is not written again.
    """
    if spec.is_stream:
        return stream_table(spark, spec, commit_id, commit_properties)
    require_table(spark, spec.table)
    result: dict[str, Any] = {"table": spec.table, "selector": spec.selector}
    if spec.start_snapshot_id is not None:
        start, snapshot_id, skipped = incremental_range(spark, spec)
        result.update(start_snapshot_id=start, end_snapshot_id=snapshot_id, skipped_snapshot_ids=skipped)
    else:
        snapshot_id = resolve_snapshot(spark, spec)
    result["snapshot_id"] = snapshot_id
    earlier = earlier_commit(spark, spec.sink_table, commit_id) if spec.sink_table and reuse_commit else None
    if spec.sink_table and earlier is None:
        check_table_state(spark, spec.sink_table, spec.sink_mode)
    df = read_frame(spark, spec, snapshot_id)
    if spec.preview_rows:
        rows = [row.asDict(recursive=True) for row in df.limit(spec.preview_rows).collect()]
        result["preview"] = json.loads(json.dumps(rows, default=str))
    if earlier is not None:
        result["row_count"] = df.count()
        result["sink"] = {
            "table": spec.sink_table,
            "mode": spec.sink_mode,
            "committed": True,
            **earlier,
            "reused_earlier_commit": True,
        }
    elif spec.sink_table:
        # The sink commit names the snapshot it copied: what a reader of the catalog alone (the
        # operator in cluster deploy mode) reports as the read's snapshot_id.
        tagged = {**(commit_properties or {}), SOURCE_SNAPSHOT_PROPERTY: str(snapshot_id)}
        result["sink"] = _write_sink_table(spark, spec, df, commit_id or new_commit_id(), tagged)
        result["row_count"] = result["sink"].get("added_records", 0)
    elif spec.sink_path and spec.sink_path_mode != "ignore":
        observation = Observation("airflow_iceberg_sink")
        observed = df.observe(observation, F.count(F.lit(1)).alias("rows"))
        observed.write.format(spec.sink_format).mode(spec.sink_path_mode).save(spec.sink_path)
        result["row_count"] = int(observation.get["rows"])
        result["sink"] = {"path": spec.sink_path, "format": spec.sink_format}
    else:  # no sink, or files in mode "ignore", which may write nothing (and observe nothing)
        result["row_count"] = df.count()
        if spec.sink_path:
            df.write.format(spec.sink_format).mode(spec.sink_path_mode).save(spec.sink_path)
            result["sink"] = {"path": spec.sink_path, "format": spec.sink_format}
    return result


def _write_sink_table(
    spark: SparkSession,
    spec: ReadSpec,
    df: DataFrame,
    commit_id: str,
    commit_properties: Mapping[str, str] | None,
) -> dict[str, Any]:
    """Write the rows to the sink table with the writes' own writer (so a create is an Iceberg table)."""
    table = str(spec.sink_table)
    if spec.sink_mode in CREATE_MODES:
        ensure_namespace(spark, table)
    write_frame(df, table, spec.sink_mode, write_options_for({}, commit_id, commit_properties))
    return result_of_write(spark, table, spec.sink_mode, commit_id)

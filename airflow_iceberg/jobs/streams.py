"""Bounded streaming reads: a Structured Streaming query with ``trigger(availableNow=True)``.

It reads what was committed since its checkpoint, writes it to the sink, and stops, so an
incremental feed can run as an ordinary scheduled task.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_iceberg.jobs.commits import write_options_for
from airflow_iceberg.jobs.scan import project, reader_options
from airflow_iceberg.jobs.spec.identifiers import quote_identifier
from airflow_iceberg.jobs.spec.reads import ReadSpec
from airflow_iceberg.jobs.table_state import (
    current_snapshot_id,
    ensure_namespace,
    require_table,
    snapshot_summary,
    table_exists,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery


def stream_table(
    spark: SparkSession,
    spec: ReadSpec,
    commit_id: str | None = None,
    commit_properties: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Append what was committed since the last run (or since ``stream_from_timestamp``) to the sink.

    A Structured Streaming read with ``trigger(availableNow=True)``: it processes every snapshot
    appended up to now, in one or more micro-batches, then stops, so it fits a scheduled task.
    The checkpoint remembers where it stopped; ``stream_from_timestamp`` only matters on the
    first run. Overwrite and delete snapshots fail the stream unless the read options
    ``streaming-skip-overwrite-snapshots`` / ``streaming-skip-delete-snapshots`` are true.
    """
    require_table(spark, spec.table)
    source = (
        spark.readStream.format("iceberg")
        .options(**reader_options(spec))
        .load(quote_identifier(spec.table))
    )
    writer = project(source, spec).writeStream.option("checkpointLocation", str(spec.checkpoint_location))
    writer = writer.trigger(availableNow=True)
    if spec.sink_table:
        ensure_namespace(spark, spec.sink_table)
        exists = table_exists(spark, spec.sink_table)
        sink_before = current_snapshot_id(spark, spec.sink_table) if exists else None
        options = write_options_for({}, commit_id, commit_properties)
        query = (
            writer.format("iceberg")
            .outputMode("append")
            .options(**options)
            .toTable(quote_identifier(spec.sink_table))
        )
    else:
        query = writer.format(spec.sink_format).option("path", str(spec.sink_path)).start()
    progress = _await(query)
    rows_read = sum(int(update.get("numInputRows", 0)) for update in progress)
    result: dict[str, Any] = {
        "table": spec.table,
        "selector": spec.selector,
        "stream_from_timestamp": spec.stream_from_timestamp,
        "snapshot_id": _stream_end_snapshot(progress),
        "rows_read": rows_read,
        "row_count": _rows_written(progress, rows_read, filtered=bool(spec.filter)),
        "batches": sum(1 for update in progress if int(update.get("numInputRows", 0)) > 0),
    }
    if spec.sink_table:
        sink_after = current_snapshot_id(spark, spec.sink_table)
        committed = sink_after is not None and sink_after != sink_before
        sink = snapshot_summary(spark, spec.sink_table, sink_after) if committed else {}  # type: ignore[arg-type]
        result["sink"] = {"table": spec.sink_table, "mode": "append", "committed": committed, **sink}
    else:
        result["sink"] = {"path": spec.sink_path, "format": spec.sink_format}
    return result


def _rows_written(progress: Sequence[Mapping[str, Any]], rows_read: int, filtered: bool) -> int | None:
    """Rows the stream wrote: what the sink reports (Iceberg does, the file sink says -1).

    Without a filter every row read is written, so the source's count is exact; with a filter
    and a sink that does not report, the number is unknown and None says so.
    """
    reported = [
        int(update.get("sink", {}).get("numOutputRows", -1))
        for update in progress
        if int(update.get("numInputRows", 0)) > 0
    ]
    if all(count >= 0 for count in reported):  # also when no batch had input: nothing was written
        return sum(reported)
    if not filtered:
        return rows_read
    return None


def _await(query: StreamingQuery) -> list[dict[str, Any]]:
    """Wait for an availableNow query and return its progress updates (raises if the stream failed)."""
    try:
        query.awaitTermination()
    finally:
        if query.isActive:
            query.stop()
    return [_as_json_dict(update) for update in query.recentProgress]


def _as_json_dict(update: Mapping[str, Any]) -> dict[str, Any]:
    """A progress update as Spark's own JSON says it.

    pyspark 3.5 gives plain dicts. pyspark 4's ``StreamingQueryProgress`` objects hold each source
    offset as ``str()`` of a dict, a Python repr that is not JSON; their ``json`` property is exact.
    Over Spark Connect that JSON has no top-level ``numInputRows``: it is the sum of the sources'.
    """
    text = getattr(update, "json", None)
    described = json.loads(text) if isinstance(text, str) else dict(update)
    if described.get("numInputRows") is None:  # Spark Connect's progress leaves the total to its sources
        sources = described.get("sources") or []
        described["numInputRows"] = sum(int(source.get("numInputRows") or 0) for source in sources)
    return described


def _stream_end_snapshot(progress: Sequence[Mapping[str, Any]]) -> int | None:
    """The source snapshot the stream has read up to, from the last progress update's end offset."""
    for update in reversed(progress):
        for source in update.get("sources", []):
            offset = source.get("endOffset")
            if isinstance(offset, str):
                offset = json.loads(offset)
            if isinstance(offset, dict) and offset.get("snapshot_id") is not None:
                return int(offset["snapshot_id"])
    return None

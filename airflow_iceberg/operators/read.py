"""Operators that read an Iceberg table: as of a version, incrementally, or as a bounded stream.

All of them push ``columns`` and ``filter`` into the scan and send the rows to a sink: another
Iceberg table, files, or a small preview in the XCom. They differ in *which* rows they read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_iceberg.jobs.spec.action import ActionSpec
from airflow_iceberg.jobs.spec.partition_keys import partition_condition
from airflow_iceberg.jobs.spec.reads import ReadSpec
from airflow_iceberg.operators.base import IcebergSparkSubmitOperator
from airflow_iceberg.operators.rendered import as_branch, as_dict, as_list
from airflow_iceberg.timestamps import to_epoch_millis, to_snapshot_id


class IcebergReadOperator(IcebergSparkSubmitOperator):
    """Read the current version of an Iceberg table and write the rows somewhere.

    The table is an inlet; a ``sink_table`` is an outlet (see docs/assets-and-lineage.md).

    The XCom is ``{"table", "snapshot_id", "selector", "row_count", "sink", "preview"}``: the
    snapshot that was actually read and how many rows it gave after ``columns`` and ``filter``.

    :param read_options: Iceberg read options: ``split-size``, ``lookback``, ``file-open-cost``,
        ``vectorization-enabled``, ``batch-size``. (templated)
    :param columns: Columns to keep (pushed into the scan), bare or in backticks. Default: all. (templated)
    :param filter: A Spark SQL boolean expression pushed into the scan. (templated)
    :param sink_table: Write the rows to this Iceberg table. (templated)
    :param sink_mode: How to write ``sink_table``: ``create``, ``replace``, ``create_or_replace``
        (default), ``append`` or ``overwrite_partitions``.
    :param sink_path: Write the rows as files here instead. (templated)
    :param sink_format: File format for ``sink_path``: ``parquet`` (default), ``csv``, ``json``,
        ``orc``, ``text``.
    :param sink_path_mode: Spark save mode for ``sink_path``: ``error`` (default), ``overwrite``,
        ``append`` or ``ignore``.
    :param preview_rows: Also return up to this many rows in the XCom (0 to 1000). Default 0.
    :param partition_key: Read only the rows of this time partition: an Airflow partition key,
        ``2024-01-02T05`` (an hour), ``2024-01-02`` (a day), ``2024-01`` or ``2024``, usually
        ``"{{ partition_key }}"`` in a partition-scoped DAG. ANDed with ``filter``. (templated)
    :param partition_column: The DATE or TIMESTAMP column ``partition_key`` selects on, the
        table's partition column (``event_ts`` for ``hours(event_ts)``). (templated)
    """

    reads_table = True
    template_fields: Sequence[str] = (
        *IcebergSparkSubmitOperator.template_fields,
        "read_options",
        "columns",
        "filter",
        "sink_table",
        "sink_path",
        "partition_key",
        "partition_column",
    )

    def __init__(
        self,
        *,
        read_options: Mapping[str, Any] | None = None,
        columns: Sequence[str] | str = (),
        filter: str | None = None,
        sink_table: str | None = None,
        sink_mode: str = "create_or_replace",
        sink_path: str | None = None,
        sink_format: str = "parquet",
        sink_path_mode: str = "error",
        preview_rows: int = 0,
        partition_key: str | None = None,
        partition_column: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.partition_key = partition_key
        self.partition_column = partition_column
        self.read_options = read_options
        self.columns = columns
        self.filter = filter
        self.sink_table = sink_table
        self.sink_mode = sink_mode
        self.sink_path = sink_path
        self.sink_format = sink_format
        self.sink_path_mode = sink_path_mode
        self.preview_rows = preview_rows
        if sink_table:
            self.declare_written_table(sink_table)

    def written_commits(self, result: Mapping[str, Any]) -> list[Mapping[str, Any] | None]:
        """The sink table's commit, matching the alias :meth:`declare_written_table` declared."""
        sink = result.get("sink")
        return [sink if sink and sink.get("table") else None]

    def written_table_names(self, spec: Any) -> list[str | None]:
        """The sink table behind that alias, qualified (None when a templated one rendered empty)."""
        return [getattr(spec, "sink_table", None)] if self.table_alias_names else []

    def selectors(self) -> dict[str, Any]:
        """Which rows to read, as :class:`ReadSpec` fields; none means the current snapshot."""
        return {}

    def build_spec(self) -> ReadSpec:
        return ReadSpec(
            table=self.table,
            read_options=as_dict(self.read_options, "read_options"),
            columns=tuple(as_list(self.columns, "columns")),
            filter=partition_condition(self.partition_key, self.partition_column, self.filter or None),
            sink_table=self.sink_table or None,
            sink_mode=self.sink_mode,
            sink_path=self.sink_path or None,
            sink_format=self.sink_format,
            sink_path_mode=self.sink_path_mode,
            preview_rows=self.preview_rows,
            **self.selectors(),
        )

    def qualify_spec(self, spec: ActionSpec, catalog_names: Sequence[str]) -> ReadSpec:
        assert isinstance(spec, ReadSpec)
        sink_table = self.qualify(spec.sink_table, catalog_names) if spec.sink_table else None
        return dataclasses.replace(spec, table=self.qualify(spec.table, catalog_names), sink_table=sink_table)

    def log_result(self, result: Mapping[str, Any]) -> None:
        self.log.info(
            "Read %s rows from %s at snapshot %s (%s)",
            result.get("row_count"),
            result.get("table"),
            result.get("snapshot_id"),
            result.get("selector") or "current",
        )


class IcebergTimeTravelReadOperator(IcebergReadOperator):
    """Read an Iceberg table as it was: by snapshot id, timestamp, branch or tag.

    Give at most one selector; with none, the current snapshot is read. The selector is checked
    against the table's metadata before the scan, so an unknown snapshot, branch or tag, or a
    timestamp before the first snapshot, fails with a message that names it.

    :param snapshot_id: Read this snapshot. Accepts an XCom template such as
        ``"{{ ti.xcom_pull(task_ids='append')['snapshot_id'] }}"``. (templated)
    :param as_of_timestamp: Read the snapshot current at this time: epoch milliseconds, an
        ISO-8601 string (e.g. ``"{{ data_interval_end }}"``) or a datetime; naive means UTC. (templated)
    :param branch: Read the head of this branch. (templated)
    :param tag: Read the snapshot this tag points at. (templated)
    """

    template_fields: Sequence[str] = (
        *IcebergReadOperator.template_fields,
        "snapshot_id",
        "as_of_timestamp",
        "branch",
        "tag",
    )

    def __init__(
        self,
        *,
        snapshot_id: int | str | None = None,
        as_of_timestamp: Any = None,
        branch: str | None = None,
        tag: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.snapshot_id = snapshot_id
        self.as_of_timestamp = as_of_timestamp
        self.branch = branch
        self.tag = tag

    def selectors(self) -> dict[str, Any]:
        return {
            "snapshot_id": to_snapshot_id(self.snapshot_id),
            "as_of_timestamp": to_epoch_millis(self.as_of_timestamp),
            "branch": as_branch(self.branch),
            "tag": self.tag or None,
        }


class IcebergIncrementalReadOperator(IcebergReadOperator):
    """Read only the rows appended between two snapshots (Iceberg's incremental append scan).

    The XCom adds ``start_snapshot_id``, ``end_snapshot_id`` and ``skipped_snapshot_ids``: the
    overwrite or delete snapshots in the range, whose changes an append scan does not include.

    :param start_snapshot_id: Read what was appended after this snapshot (exclusive). (templated)
    :param end_snapshot_id: Up to and including this snapshot; default the current one. (templated)
    """

    template_fields: Sequence[str] = (
        *IcebergReadOperator.template_fields,
        "start_snapshot_id",
        "end_snapshot_id",
    )

    def __init__(
        self, *, start_snapshot_id: int | str, end_snapshot_id: int | str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.start_snapshot_id = start_snapshot_id
        self.end_snapshot_id = end_snapshot_id

    def selectors(self) -> dict[str, Any]:
        return {
            "start_snapshot_id": to_snapshot_id(self.start_snapshot_id, "start_snapshot_id"),
            "end_snapshot_id": to_snapshot_id(self.end_snapshot_id, "end_snapshot_id"),
        }


class IcebergStreamReadOperator(IcebergReadOperator):
    """Append what was committed since the last run to a sink: a bounded Structured Streaming read.

    Runs ``spark.readStream`` on the table with ``trigger(availableNow=True)``: it processes every
    snapshot not yet recorded in ``checkpoint_location`` and stops. The first run starts at
    ``stream_from_timestamp``; later runs continue from the checkpoint, exactly once.

    :param stream_from_timestamp: Where the first run starts: epoch ms, ISO-8601 or a datetime. (templated)
    :param checkpoint_location: Structured Streaming checkpoint directory; keep it per sink. (templated)
    """

    template_fields: Sequence[str] = (
        *IcebergReadOperator.template_fields,
        "stream_from_timestamp",
        "checkpoint_location",
    )

    def __init__(
        self,
        *,
        stream_from_timestamp: Any,
        checkpoint_location: str,
        sink_mode: str = "append",
        sink_path_mode: str = "append",
        **kwargs: Any,
    ) -> None:
        super().__init__(sink_mode=sink_mode, sink_path_mode=sink_path_mode, **kwargs)
        self.stream_from_timestamp = stream_from_timestamp
        self.checkpoint_location = checkpoint_location

    def selectors(self) -> dict[str, Any]:
        return {
            "stream_from_timestamp": to_epoch_millis(self.stream_from_timestamp, "stream_from_timestamp"),
            "checkpoint_location": self.checkpoint_location or None,
        }

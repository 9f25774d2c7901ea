"""Read an Iceberg table as it was: time travel by snapshot id, timestamp, branch or tag."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_iceberg.jobs.job_spec import ReadSpec, WriteSpec
from airflow_iceberg.operators.base import IcebergSparkSubmitOperator
from airflow_iceberg.timestamps import to_epoch_millis, to_snapshot_id


class IcebergTimeTravelReadOperator(IcebergSparkSubmitOperator):
    """Read an Iceberg table (optionally as of an older version) and write the rows somewhere.

    Give at most one time-travel selector; with none, the current snapshot is read. The XCom is
    ``{"table", "snapshot_id", "selector", "row_count", "sink", "preview"}``: the snapshot that
    was actually read and how many rows it had after ``columns`` and ``filter``.

    :param snapshot_id: Read this snapshot. Accepts an XCom template such as
        ``"{{ ti.xcom_pull(task_ids='append')['snapshot_id'] }}"``. (templated)
    :param as_of_timestamp: Read the snapshot current at this time: epoch milliseconds, an
        ISO-8601 string (e.g. ``"{{ data_interval_end }}"``) or a datetime. (templated)
    :param branch: Read the head of this branch. (templated)
    :param tag: Read the snapshot this tag points at. (templated)
    :param read_options: Iceberg read options, e.g. ``{"split-size": "134217728"}``. (templated)
    :param columns: Columns to keep (pushed into the scan). Default: all.
    :param filter: A Spark SQL boolean expression to push into the scan. (templated)
    :param sink_table: Write the rows to this Iceberg table. (templated)
    :param sink_mode: How to write ``sink_table``: ``create``, ``replace``, ``create_or_replace``
        (default), ``append`` or ``overwrite_partitions``.
    :param sink_path: Write the rows as files here instead. (templated)
    :param sink_format: File format for ``sink_path``. Default ``parquet``.
    :param sink_path_mode: Spark save mode for ``sink_path``: ``error`` (default), ``overwrite``,
        ``append`` or ``ignore``.
    :param preview_rows: Also return up to this many rows in the XCom (0 to 1000). Default 0.
    """

    template_fields: Sequence[str] = (
        *IcebergSparkSubmitOperator.template_fields,
        "snapshot_id",
        "as_of_timestamp",
        "branch",
        "tag",
        "read_options",
        "filter",
        "sink_table",
        "sink_path",
    )

    def __init__(
        self,
        *,
        snapshot_id: int | str | None = None,
        as_of_timestamp: Any = None,
        branch: str | None = None,
        tag: str | None = None,
        read_options: Mapping[str, Any] | None = None,
        columns: Sequence[str] = (),
        filter: str | None = None,
        sink_table: str | None = None,
        sink_mode: str = "create_or_replace",
        sink_path: str | None = None,
        sink_format: str = "parquet",
        sink_path_mode: str = "error",
        preview_rows: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.snapshot_id = snapshot_id
        self.as_of_timestamp = as_of_timestamp
        self.branch = branch
        self.tag = tag
        self.read_options = dict(read_options or {})
        self.columns = list(columns)
        self.filter = filter
        self.sink_table = sink_table
        self.sink_mode = sink_mode
        self.sink_path = sink_path
        self.sink_format = sink_format
        self.sink_path_mode = sink_path_mode
        self.preview_rows = preview_rows

    def build_spec(self) -> ReadSpec:
        return ReadSpec(
            table=self.table,
            snapshot_id=to_snapshot_id(self.snapshot_id),
            as_of_timestamp=to_epoch_millis(self.as_of_timestamp),
            branch=self.branch or None,
            tag=self.tag or None,
            read_options=self.read_options,
            columns=tuple(self.columns),
            filter=self.filter or None,
            sink_table=self.sink_table or None,
            sink_mode=self.sink_mode,
            sink_path=self.sink_path or None,
            sink_format=self.sink_format,
            sink_path_mode=self.sink_path_mode,
            preview_rows=self.preview_rows,
        )

    def qualify_spec(self, spec: WriteSpec | ReadSpec, catalog_names: Sequence[str]) -> ReadSpec:
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

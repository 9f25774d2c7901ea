"""How a read is set up, for batch and streaming reads alike: reader options, filter, columns."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_iceberg.jobs import job_spec
from airflow_iceberg.jobs.user_sql import expression

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: ReadSpec field -> Iceberg read option, for the options that choose which data is read.
_SELECTOR_OPTIONS = (
    ("snapshot_id", "snapshot-id"),
    ("as_of_timestamp", "as-of-timestamp"),
    ("branch", "branch"),
    ("tag", "tag"),
    ("start_snapshot_id", "start-snapshot-id"),
    ("end_snapshot_id", "end-snapshot-id"),
    ("stream_from_timestamp", "stream-from-timestamp"),
)


def reader_options(spec: job_spec.ReadSpec, snapshot_id: int | None = None) -> dict[str, str]:
    """The DataFrameReader options: the user's read options plus the one selector.

    A read of the current snapshot is pinned to ``snapshot_id`` (the one resolved when the job
    started) and an incremental read's end defaults to it, so that the count, preview and sink,
    which scan the table separately, all see the same data. A branch read keeps the ``branch``
    option: Iceberg reads a branch with the table's current schema, a snapshot id with the
    snapshot's own, so pinning would change what a branch read returns.
    """
    options = dict(spec.read_options)
    for name, key in _SELECTOR_OPTIONS:
        value = getattr(spec, name)
        if value is not None:
            options[key] = str(value)
    if snapshot_id is not None and spec.selector is None:
        options["snapshot-id"] = str(snapshot_id)
    if snapshot_id is not None and spec.start_snapshot_id is not None:
        options["end-snapshot-id"] = str(snapshot_id)
    return options


def project(df: DataFrame, spec: job_spec.ReadSpec) -> DataFrame:
    """Apply the filter, then keep the columns: Spark pushes both into the Iceberg scan.

    Filtering first lets the filter use columns that are not kept. The filter is parsed as an
    expression only (:func:`~airflow_iceberg.jobs.user_sql.expression`).
    """
    if spec.filter:
        df = df.where(expression(spec.filter, "filter"))
    if spec.columns:
        df = df.select(*spec.columns)
    return df

"""How a read is set up, for batch and streaming reads alike: reader options, filter, columns."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from airflow_iceberg.jobs.spec.identifiers import quote_column
from airflow_iceberg.jobs.spec.reads import ReadSpec
from airflow_iceberg.jobs.user_sql import expression

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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


def reader_options(spec: ReadSpec, snapshot_id: int | None = None) -> dict[str, str]:
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


#: Iceberg's own time-travel read options, which its Spark 4.1 runtime (Iceberg 1.11) refuses:
#: "Time travel option `snapshot-id` is no longer supported, use Spark built-in `versionAsOf`".
_ICEBERG_TIME_TRAVEL_OPTIONS = ("snapshot-id", "as-of-timestamp", "tag")


def with_spark_time_travel(
    spark: SparkSession, options: dict[str, str], snapshot_id: int | None
) -> dict[str, str]:
    """On Spark 4.1 and later, time-travel with Spark's ``versionAsOf`` instead of Iceberg's options.

    ``snapshot_id`` is the snapshot the job resolved for the read's selector (a snapshot id, the
    snapshot current at a timestamp, or a tag's), so reading that snapshot by id reads the same
    data with the same (snapshot's) schema. Earlier Spark lines keep Iceberg's options unchanged.
    """
    travels = [key for key in _ICEBERG_TIME_TRAVEL_OPTIONS if key in options]
    release = tuple(int(part) for part in spark.version.split(".")[:2] if part.isdigit())
    if not travels or snapshot_id is None or release < (4, 1):
        return options
    kept = {key: value for key, value in options.items() if key not in travels}
    return {**kept, "versionAsOf": str(snapshot_id)}


def project(df: DataFrame, spec: ReadSpec) -> DataFrame:
    """Apply the filter, then keep the columns: Spark pushes both into the Iceberg scan.

    Filtering first lets the filter use columns that are not kept. The filter is parsed as an
    expression only (:func:`~airflow_iceberg.jobs.user_sql.expression`).
    """
    if spec.filter:
        df = df.where(expression(spec.filter, "filter"))
    if spec.columns:
        df = df.select(*[F.col(quote_column(column)) for column in spec.columns])
    return df

"""The PySpark application every airflow-iceberg operator submits.

spark-submit runs this file on the driver. It parses its arguments with ``job_spec.parse_argv``
(the same module the operators used to build them), applies the catalog secrets it receives
through the environment, runs one DataFrameWriterV2 write, batch read or bounded stream, and
writes a small JSON result (snapshot id, operation, counts) for the operator to return as XCom.

Every function below takes a SparkSession it does not own, so tests drive them against one
shared local session. ``main`` is the only place that creates (and stops) a session; the work
itself is :func:`run_job`. Nothing here imports Airflow.

Checks that can fail (missing table, unknown snapshot, a source that does not fit the table)
run before anything is written, so a failed job leaves every table as it was.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

try:  # on the cluster, job_spec.py arrives as a loose file beside this one (--py-files)
    import job_spec  # type: ignore[import-not-found]
except ImportError:  # imported as part of the installed package (tests, local tooling)
    from airflow_iceberg.jobs import job_spec

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

WRITE_SUMMARY_COUNTS = {
    "added_records": "added-records",
    "deleted_records": "deleted-records",
    "total_records": "total-records",
    "added_data_files": "added-data-files",
    "deleted_data_files": "deleted-data-files",
    "total_data_files": "total-data-files",
}
#: Table property without which Iceberg refuses a writer whose schema differs from the table's.
ACCEPT_ANY_SCHEMA = "write.spark.accept-any-schema"


class TableStateError(RuntimeError):
    """The table is not in the state the request needs; nothing was written."""


class TableNotFoundError(TableStateError):
    """The table (or a source or sink table) does not exist."""


class TableAlreadyExistsError(TableStateError):
    """``create`` was asked for a table that already exists."""


class SnapshotNotFoundError(TableStateError):
    """A snapshot id, timestamp, branch or tag points at no snapshot of the table."""


class SchemaMismatchError(TableStateError):
    """The source's columns do not fit the table (or the partition spec) and merge_schema cannot help."""


# --------------------------------------------------------------------------- secrets


def apply_secret_conf(spark: SparkSession, environ: Mapping[str, str]) -> list[str]:
    """Set the catalog secrets passed through ``AIRFLOW_ICEBERG_SECRET_CONF`` on the session.

    The secrets never travel in argv (visible in ``ps`` and task logs). They are set as session
    SQL configuration before any catalog is used: Spark creates catalogs lazily from that
    configuration, and session settings are not shipped to executors. Returns the keys set;
    error messages never include the values.
    """
    raw = environ.get(job_spec.SECRET_CONF_ENV)
    if not raw:
        return []
    try:
        secrets = json.loads(raw)
    except ValueError:
        secrets = None
    if not isinstance(secrets, dict):
        raise job_spec.InvalidSpecError(f"{job_spec.SECRET_CONF_ENV} must be a JSON object of Spark settings")
    for key, value in secrets.items():
        spark.conf.set(str(key), str(value))
    return sorted(secrets)


# --------------------------------------------------------------------------- tables and snapshots


def load_source(spark: SparkSession, source: job_spec.Source) -> DataFrame:
    """Return the DataFrame a write takes its rows from."""
    if source.query is not None:
        return spark.sql(job_spec.validate_query(source.query))
    if source.table is not None:
        require_table(spark, source.table, "source table")
        return spark.table(source.table)
    return spark.read.format(str(source.format)).options(**source.options).load(source.path)


def table_exists(spark: SparkSession, table: str) -> bool:
    return bool(spark.catalog.tableExists(table))


def require_table(spark: SparkSession, table: str, what: str = "table") -> None:
    """Fail with the table's name rather than Spark's TABLE_OR_VIEW_NOT_FOUND stack trace."""
    if not table_exists(spark, table):
        raise TableNotFoundError(f"{what} {table} does not exist")


def ensure_namespace(spark: SparkSession, table: str) -> None:
    """Create the table's namespace if needed, so a first create works on Hive and JDBC catalogs too."""
    namespace = table.rsplit(".", 1)[0]
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")


def table_properties(spark: SparkSession, table: str) -> dict[str, str]:
    return {row.key: row.value for row in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}


def current_snapshot_id(spark: SparkSession, table: str) -> int | None:
    """The id the table's ``main`` branch points at, or None for a table with no snapshot yet."""
    return _ref_snapshot_id(spark, table, "main", "BRANCH")


def _ref_snapshot_id(spark: SparkSession, table: str, name: str, kind: str) -> int | None:
    from pyspark.sql import functions as F

    rows = (spark.table(f"{table}.refs").where((F.col("name") == name) & (F.col("type") == kind))
            .select("snapshot_id").collect())
    return int(rows[0].snapshot_id) if rows else None


def snapshot_exists(spark: SparkSession, table: str, snapshot_id: int) -> bool:
    from pyspark.sql import functions as F

    return bool(spark.table(f"{table}.snapshots").where(F.col("snapshot_id") == snapshot_id).limit(1).count())


def snapshot_summary(spark: SparkSession, table: str, snapshot_id: int) -> dict[str, Any]:
    """Describe one snapshot: id, parent, operation, commit time and the summary counts."""
    from pyspark.sql import functions as F

    rows = spark.table(f"{table}.snapshots").where(F.col("snapshot_id") == snapshot_id).collect()
    if not rows:
        raise SnapshotNotFoundError(f"snapshot {snapshot_id} is not in table {table}")
    return _describe_snapshot(rows[0])


def _describe_snapshot(row: Any) -> dict[str, Any]:
    summary = dict(row.summary or {})
    described: dict[str, Any] = {
        "snapshot_id": int(row.snapshot_id),
        "parent_snapshot_id": int(row.parent_id) if row.parent_id is not None else None,
        "operation": row.operation,
        "committed_at": _iso(row.committed_at),
        "summary": summary,
    }
    for name, key in WRITE_SUMMARY_COUNTS.items():
        described[name] = int(summary[key]) if key in summary else 0
    return described


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.astimezone()
    return value.astimezone(timezone.utc).isoformat()


def find_commit(spark: SparkSession, table: str, commit_id: str) -> dict[str, Any] | None:
    """Find the snapshot an earlier run tagged with ``commit_id`` in its summary, if any."""
    from pyspark.sql import functions as F

    rows = (
        spark.table(f"{table}.snapshots")
        .where(F.col("summary")[job_spec.COMMIT_ID_PROPERTY] == commit_id)
        .orderBy(F.col("committed_at").desc())
        .limit(1)
        .collect()
    )
    return _describe_snapshot(rows[0]) if rows else None


# --------------------------------------------------------------------------- writes


def transform_column(expression: str) -> Column:
    """Turn ``days(ts)``, ``bucket(16, id)`` and friends into the Column DataFrameWriterV2 takes."""
    from pyspark.sql import functions as F

    transform, column, argument = job_spec.parse_transform(expression)
    if transform == "identity":
        return F.col(column)
    if transform == "bucket":
        return F.bucket(int(argument or 0), F.col(column))
    return getattr(F, transform)(F.col(column))


def _transform_sql(expression: str) -> str:
    transform, column, argument = job_spec.parse_transform(expression)
    if transform == "identity":
        return column
    return f"{transform}({argument}, {column})" if argument is not None else f"{transform}({column})"


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def snapshot_properties_for(
    spec: job_spec.WriteSpec, commit_id: str | None, commit_properties: Mapping[str, str]
) -> dict[str, str]:
    """The snapshot-summary entries of a write: the user's ``snapshot-property.*``, Airflow's tags, the id."""
    prefix = job_spec.SNAPSHOT_PROPERTY_PREFIX
    properties = {
        key[len(prefix):]: value
        for key, value in spec.write_options.items()
        if key.lower().startswith(prefix)
    }
    properties.update(commit_properties)
    if commit_id:
        properties[job_spec.COMMIT_ID_PROPERTY] = commit_id
    return properties


def write_options_for(
    spec: job_spec.WriteSpec, commit_id: str | None, commit_properties: Mapping[str, str]
) -> dict[str, str]:
    """The DataFrameWriterV2 options: the user's, merge-schema, and the snapshot-summary tags."""
    prefix = job_spec.SNAPSHOT_PROPERTY_PREFIX
    options = {key: value for key, value in spec.write_options.items() if not key.lower().startswith(prefix)}
    if spec.merge_schema:
        options["merge-schema"] = "true"
    for key, value in snapshot_properties_for(spec, commit_id, commit_properties).items():
        options[f"{prefix}{key}"] = value
    return options


def table_properties_for(spec: job_spec.WriteSpec) -> dict[str, str]:
    properties = dict(spec.table_properties)
    if spec.merge_schema:
        # Iceberg only accepts a wider schema from a writer when the table allows it.
        properties.setdefault(ACCEPT_ANY_SCHEMA, "true")
    return properties


def check_table_state(spark: SparkSession, table: str, mode: str) -> None:
    """Fail before any work when the mode needs a table that is missing, or must not find one."""
    exists = table_exists(spark, table)
    if mode == "create" and exists:
        raise TableAlreadyExistsError(
            f"table {table} already exists; use mode 'create_or_replace' or 'replace' to replace it"
        )
    if mode not in ("create", "create_or_replace") and not exists:
        raise TableNotFoundError(
            f"table {table} does not exist; create it first (IcebergCreateTableOperator, mode 'create')"
        )


def check_partition_columns(spec: job_spec.WriteSpec, columns: Sequence[str]) -> None:
    """Name the bad partition_by entry, instead of Spark's "Couldn't find column" with a schema dump."""
    known = {column.lower() for column in columns}
    for expression in spec.partition_by:
        column = job_spec.parse_transform(expression)[1]
        if column.lower() not in known:
            raise SchemaMismatchError(
                f"partition_by {expression!r} uses column {column!r}, which is not in the source "
                f"(columns: {', '.join(columns)})"
            )


def check_source_fits_table(spark: SparkSession, spec: job_spec.WriteSpec, columns: Sequence[str]) -> None:
    """Compare the source's columns with the existing table's before writing.

    Without merge_schema, extra or missing columns are an error that names them (Spark's own
    message does not). With merge_schema, Iceberg needs ``write.spark.accept-any-schema=true``
    on the table; without it Spark would fail with an arity error that hides the reason.
    """
    if spec.merge_schema:
        if table_properties(spark, spec.table).get(ACCEPT_ANY_SCHEMA, "").lower() != "true":
            raise SchemaMismatchError(
                f"merge_schema needs table property {ACCEPT_ANY_SCHEMA}=true on {spec.table}: create the "
                f"table with merge_schema=True, or run ALTER TABLE {spec.table} SET TBLPROPERTIES "
                f"('{ACCEPT_ANY_SCHEMA}'='true')"
            )
        return
    table_columns = spark.table(spec.table).columns
    in_table = {column.lower() for column in table_columns}
    in_source = {column.lower() for column in columns}
    extra = [column for column in columns if column.lower() not in in_table]
    missing = [column for column in table_columns if column.lower() not in in_source]
    if extra:
        raise SchemaMismatchError(
            f"source columns {', '.join(extra)} are not in table {spec.table} "
            f"(columns: {', '.join(table_columns)}); set merge_schema=True to add them to the table"
        )
    if missing:
        raise SchemaMismatchError(
            f"the source has no column {', '.join(missing)} of table {spec.table}; "
            "select it (NULL if unknown) or set merge_schema=True"
        )


def check_validate_from(spark: SparkSession, spec: job_spec.WriteSpec) -> None:
    """An unknown validate-from-snapshot-id would fail at commit time, after all the data is written."""
    value = job_spec.option_value(spec.write_options, "validate-from-snapshot-id")
    if value is not None and not snapshot_exists(spark, spec.table, int(value)):
        raise SnapshotNotFoundError(
            f"validate-from-snapshot-id {value} is not a snapshot of table {spec.table}"
        )


def earlier_commit(spark: SparkSession, table: str, commit_id: str | None) -> dict[str, Any] | None:
    """The snapshot an earlier try of the same task committed to ``table``, if there is one.

    This is what makes retries exactly-once: a try that committed and then died (killed worker,
    lost heartbeat) left its commit id in the snapshot summary, so the retry finds it and
    reports that commit instead of writing the rows a second time.
    """
    if not commit_id or not table_exists(spark, table):
        return None
    earlier = find_commit(spark, table, commit_id)
    if earlier is not None:
        print(f"airflow-iceberg: {table} already has snapshot {earlier['snapshot_id']} committed by an "
              f"earlier try ({job_spec.COMMIT_ID_PROPERTY}={commit_id}); not writing again", flush=True)
    return earlier


def with_default_validate_from(spark: SparkSession, spec: job_spec.WriteSpec) -> job_spec.WriteSpec:
    """Pin ``validate-from-snapshot-id`` to the current snapshot when only ``isolation-level`` is set.

    Without it Iceberg validates an overwrite against the table's whole history, so the files the
    overwritten rows already had count as conflicts and the write always fails. Pinned to the
    snapshot current before the source is read, it means: fail if a conflicting commit landed
    while this job ran.
    """
    options = spec.write_options
    if (
        spec.mode not in ("overwrite", "overwrite_partitions")
        or job_spec.option_value(options, "isolation-level") is None
        or job_spec.option_value(options, "validate-from-snapshot-id") is not None
    ):
        return spec
    current = current_snapshot_id(spark, spec.table)
    if current is None:
        return spec
    return dataclasses.replace(spec, write_options={**options, "validate-from-snapshot-id": str(current)})


def write_table(
    spark: SparkSession,
    spec: job_spec.WriteSpec,
    commit_id: str | None = None,
    commit_properties: Mapping[str, str] | None = None,
    reuse_commit: bool = False,
) -> dict[str, Any]:
    """Run one DataFrameWriterV2 call and describe the snapshot it committed.

    Everything that can be checked is checked before the write, so a failure leaves the table
    (and the catalog) as it was. With ``reuse_commit``, a commit an earlier try already made is
    returned instead (see :func:`earlier_commit`).
    """
    earlier = earlier_commit(spark, spec.table, commit_id) if reuse_commit else None
    if earlier is not None:
        return {"table": spec.table, "mode": spec.mode, **earlier, "reused_earlier_commit": True}
    check_table_state(spark, spec.table, spec.mode)
    spec = with_default_validate_from(spark, spec)  # before the source is read
    df = load_source(spark, spec.source)
    if spec.mode in job_spec.CREATE_MODES:
        check_partition_columns(spec, df.columns)
        ensure_namespace(spark, spec.table)  # only now: a failed check must not leave a namespace behind
    else:
        check_source_fits_table(spark, spec, df.columns)
        check_validate_from(spark, spec)
    if spec.created_with_sql:
        properties = snapshot_properties_for(spec, commit_id, commit_properties or {})
        with_commit_properties(spark, properties, lambda: _create_with_sql(spark, spec, df))
    else:
        _write_frame(df, spec, write_options_for(spec, commit_id, commit_properties or {}))
    return _result_of_write(spark, spec.table, spec.mode, commit_id)


def _write_frame(df: DataFrame, spec: job_spec.WriteSpec, options: Mapping[str, str]) -> None:
    from pyspark.sql import functions as F

    writer = df.writeTo(spec.table).options(**options)
    if spec.mode in job_spec.CREATE_MODES:
        writer = writer.using("iceberg")
        for key, value in table_properties_for(spec).items():
            writer = writer.tableProperty(key, value)
        if spec.partition_by:
            writer = writer.partitionedBy(*[transform_column(e) for e in spec.partition_by])
    if spec.mode == "overwrite":
        writer.overwrite(F.expr(str(spec.condition)))
    else:
        getattr(writer, _WRITER_METHOD[spec.mode])()


_WRITER_METHOD = {
    "create": "create",
    "replace": "replace",
    "create_or_replace": "createOrReplace",
    "append": "append",
    "overwrite_partitions": "overwritePartitions",
}


def _create_with_sql(spark: SparkSession, spec: job_spec.WriteSpec, df: DataFrame) -> None:
    """Create through SQL CTAS: DataFrameWriterV2.partitionedBy cannot express ``truncate(W, col)``.

    CTAS on an Iceberg SparkCatalog is atomic (a staged table), like the DataFrameWriterV2 path.
    It takes no write options, so its snapshot properties come from :func:`with_commit_properties`.
    """
    view = f"airflow_iceberg_source_{uuid.uuid4().hex}"
    df.createOrReplaceTempView(view)
    sql = f"{_CTAS_VERB[spec.mode]} {spec.table} USING iceberg"
    if spec.partition_by:
        sql += " PARTITIONED BY (" + ", ".join(_transform_sql(e) for e in spec.partition_by) + ")"
    properties = table_properties_for(spec)
    if properties:
        sql += " TBLPROPERTIES (" + ", ".join(
            f"{_sql_string(k)}={_sql_string(v)}" for k, v in properties.items()) + ")"
    try:
        spark.sql(f"{sql} AS SELECT * FROM {view}")
    finally:
        spark.catalog.dropTempView(view)


_CTAS_VERB = {
    "create": "CREATE TABLE", "replace": "REPLACE TABLE", "create_or_replace": "CREATE OR REPLACE TABLE",
}


class _JavaCallable:
    """A Python function the JVM can call as a ``java.util.concurrent.Callable`` (through py4j)."""

    def __init__(self, action: Callable[[], object]) -> None:
        self.action = action
        self.error: BaseException | None = None

    def call(self) -> bool:
        try:
            self.action()
        except BaseException as error:  # kept so the caller re-raises the original, not py4j's wrapper
            self.error = error
            raise
        return True

    class Java:
        implements = ["java.util.concurrent.Callable"]


def with_commit_properties(
    spark: SparkSession, properties: Mapping[str, str], action: Callable[[], object]
) -> None:
    """Run ``action`` (SQL) with Iceberg snapshot-summary properties, as write options do for the writer API.

    Iceberg's documented way for SQL is ``CommitMetadata.withCommitProperties``: it keeps the
    properties in a JVM thread-local while the callable runs. PySpark pins each Python thread to
    one JVM thread, and py4j runs the callback's own JVM calls on that same thread, so the
    commit made by ``action`` sees them.
    """
    if not properties:
        action()
        return
    from pyspark.java_gateway import ensure_callback_server_started

    context = spark.sparkContext
    ensure_callback_server_started(context._gateway)
    java_properties = context._jvm.java.util.HashMap()
    for key, value in properties.items():
        java_properties.put(key, value)
    callable_ = _JavaCallable(action)
    runtime_exception = context._jvm.java.lang.RuntimeException._java_lang_class
    try:
        context._jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(
            java_properties, callable_, runtime_exception
        )
    except Exception:
        if callable_.error is not None:
            raise callable_.error from None
        raise


def _result_of_write(spark: SparkSession, table: str, mode: str, commit_id: str | None) -> dict[str, Any]:
    found = find_commit(spark, table, commit_id) if commit_id else None
    if found is None:
        snapshot_id = current_snapshot_id(spark, table)
        found = snapshot_summary(spark, table, snapshot_id) if snapshot_id is not None else {}
    return {"table": table, "mode": mode, **found}


# --------------------------------------------------------------------------- reads


def resolve_snapshot(spark: SparkSession, spec: job_spec.ReadSpec) -> int | None:
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
        found = _ref_snapshot_id(spark, table, str(name), kind)
        if found is None:
            raise SnapshotNotFoundError(f"{kind.lower()} {name!r} does not exist in table {table}")
        return found
    if spec.start_snapshot_id is not None:
        return incremental_range(spark, spec)[1]
    if spec.is_stream:
        return None
    return current_snapshot_id(spark, table)


def _snapshot_as_of(spark: SparkSession, table: str, timestamp_ms: int) -> int:
    from pyspark.sql import functions as F

    history = spark.table(f"{table}.history").withColumn("made_ms", F.expr("unix_millis(made_current_at)"))
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
    rows = spark.table(f"{table}.snapshots").select("snapshot_id", "parent_id", "operation").collect()
    return {
        int(row.snapshot_id): (int(row.parent_id) if row.parent_id is not None else None, row.operation)
        for row in rows
    }


def incremental_range(spark: SparkSession, spec: job_spec.ReadSpec) -> tuple[int, int, list[int]]:
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


_SELECTOR_OPTIONS = (
    ("snapshot_id", "snapshot-id"), ("as_of_timestamp", "as-of-timestamp"), ("branch", "branch"),
    ("tag", "tag"),
    ("start_snapshot_id", "start-snapshot-id"), ("end_snapshot_id", "end-snapshot-id"),
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

    Filtering first lets the filter use columns that are not kept.
    """
    from pyspark.sql import functions as F

    if spec.filter:
        df = df.where(F.expr(spec.filter))
    if spec.columns:
        df = df.select(*spec.columns)
    return df


def read_frame(spark: SparkSession, spec: job_spec.ReadSpec, snapshot_id: int | None = None) -> DataFrame:
    """The batch DataFrame a read produces (options, selector, filter and columns applied)."""
    if spec.start_snapshot_id is not None and spec.start_snapshot_id == snapshot_id:
        # An empty range: Iceberg rejects start == end, but "nothing new since start" is a normal
        # outcome for a pipeline that reads incrementally from where it stopped.
        options = {**spec.read_options, "snapshot-id": str(snapshot_id)}
        return project(spark.read.options(**options).table(spec.table).limit(0), spec)
    return project(spark.read.options(**reader_options(spec, snapshot_id)).table(spec.table), spec)


def read_table(
    spark: SparkSession,
    spec: job_spec.ReadSpec,
    commit_id: str | None = None,
    commit_properties: Mapping[str, str] | None = None,
    reuse_commit: bool = False,
) -> dict[str, Any]:
    """Read the table (as of the chosen snapshot), write the rows to the sink, report the count.

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
    result["row_count"] = df.count()
    if spec.preview_rows:
        rows = [row.asDict(recursive=True) for row in df.limit(spec.preview_rows).collect()]
        result["preview"] = json.loads(json.dumps(rows, default=str))
    if earlier is not None:
        result["sink"] = {"table": spec.sink_table, "mode": spec.sink_mode, **earlier,
                          "reused_earlier_commit": True}
    elif spec.sink_table:
        if spec.sink_mode in job_spec.CREATE_MODES:
            ensure_namespace(spark, spec.sink_table)
        writer = df.writeTo(spec.sink_table).options(**_sink_write_options(commit_id, commit_properties))
        getattr(writer, _WRITER_METHOD[spec.sink_mode])()
        result["sink"] = _result_of_write(spark, spec.sink_table, spec.sink_mode, commit_id)
    elif spec.sink_path:
        df.write.format(spec.sink_format).mode(spec.sink_path_mode).save(spec.sink_path)
        result["sink"] = {"path": spec.sink_path, "format": spec.sink_format}
    return result


def _sink_write_options(commit_id: str | None, commit_properties: Mapping[str, str] | None) -> dict[str, str]:
    sink = job_spec.WriteSpec(table="sink.t", mode="append", source=job_spec.Source(query="SELECT 1"))
    return write_options_for(sink, commit_id, commit_properties or {})


# --------------------------------------------------------------------------- streams


def stream_table(
    spark: SparkSession,
    spec: job_spec.ReadSpec,
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
    source = spark.readStream.format("iceberg").options(**reader_options(spec)).load(spec.table)
    writer = project(source, spec).writeStream.option("checkpointLocation", str(spec.checkpoint_location))
    writer = writer.trigger(availableNow=True)
    if spec.sink_table:
        ensure_namespace(spark, spec.sink_table)
        exists = table_exists(spark, spec.sink_table)
        sink_before = current_snapshot_id(spark, spec.sink_table) if exists else None
        options = _sink_write_options(commit_id, commit_properties)
        query = writer.format("iceberg").outputMode("append").options(**options).toTable(spec.sink_table)
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
    reported = [int(update.get("sink", {}).get("numOutputRows", -1))
                for update in progress if int(update.get("numInputRows", 0)) > 0]
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
    return list(query.recentProgress)


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


# --------------------------------------------------------------------------- maintenance


class _JavaConsumer:
    """A Python function the JVM can call as a ``java.util.function.Consumer`` (through py4j)."""

    def __init__(self, action: Callable[[str], object]) -> None:
        self.action = action

    def accept(self, value: str) -> None:
        self.action(value)

    class Java:
        implements = ["java.util.function.Consumer"]


def remove_orphan_files(spark: SparkSession, spec: job_spec.OrphanFilesSpec) -> dict[str, Any]:
    """Find (and unless ``dry_run``, delete) files under the table that no snapshot references.

    Files a killed write left behind are invisible to readers; this is how they are cleaned up.
    It uses Iceberg's ``DeleteOrphanFiles`` action rather than the ``remove_orphan_files`` SQL
    procedure, because the procedure refuses any ``older_than`` under 24 hours, while cleaning up
    right after a known-dead write is a legitimate, deliberate use. A dry run swaps the delete
    function for one that only records the path.
    """
    from pyspark.java_gateway import ensure_callback_server_started

    require_table(spark, spec.table)
    jvm = spark.sparkContext._jvm
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, spec.table)
    actions = jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)
    action = actions.deleteOrphanFiles(table)
    if spec.older_than is not None:
        action = action.olderThan(int(spec.older_than))
    if spec.dry_run:
        ensure_callback_server_started(spark.sparkContext._gateway)
        action = action.deleteWith(_JavaConsumer(lambda path: None))
    files = sorted(str(path) for path in action.execute().orphanFileLocations())
    return {"table": spec.table, "dry_run": spec.dry_run, "orphan_file_count": len(files),
            "orphan_files": files[:1000], "snapshot_id": current_snapshot_id(spark, spec.table)}


# --------------------------------------------------------------------------- entry point


def run(spark: SparkSession, request: job_spec.JobRequest) -> dict[str, Any]:
    """Dispatch one parsed request to the write, read or maintenance function."""
    if isinstance(request.spec, job_spec.OrphanFilesSpec):
        return remove_orphan_files(spark, request.spec)
    action = write_table if isinstance(request.spec, job_spec.WriteSpec) else read_table
    return action(spark, request.spec, request.commit_id, request.commit_properties,  # type: ignore[arg-type]
                  reuse_commit=request.reuse_commit)


def describe_error(error: BaseException) -> str:
    """One line that says what went wrong, for the result file and the operator's exception.

    A Py4JJavaError's own text is only "An error occurred while calling o123.append"; the Java
    exception it carries (e.g. Iceberg's ValidationException) says what actually happened.
    """
    java = getattr(error, "java_exception", None)
    if java is None:
        return f"{type(error).__name__}: {error}".strip().splitlines()[0]
    text = _java_summary(java)
    root = java
    while root.getCause() is not None and not root.getCause().equals(root):
        root = root.getCause()
    if not root.equals(java):  # e.g. "Failed to connect" caused by "password authentication failed"
        text += f" (caused by {_java_summary(root)})"
    return text


def _java_summary(throwable: Any) -> str:
    message = throwable.getMessage()
    text = f"{throwable.getClass().getSimpleName()}: {message}" if message else str(throwable.toString())
    return text.strip().splitlines()[0]


def run_job(spark: SparkSession, request: job_spec.JobRequest, environ: Mapping[str, str]) -> int:
    """Run one request on a session the caller owns; report the result; return the exit code.

    Expected failures (invalid request, table in the wrong state) are reported and return 1.
    Anything else is reported too, then re-raised so spark-submit shows the full traceback.
    """
    try:
        apply_secret_conf(spark, environ)
        result = {"status": "success", **run(spark, request)}
    except (job_spec.InvalidSpecError, TableStateError) as error:
        message = describe_error(error)
        print(f"airflow-iceberg error: {message}", file=sys.stderr, flush=True)
        _write_result(request.result_file, {"status": "failed", "error": message})
        return 1
    except Exception as error:  # Spark's AnalysisException, Iceberg's ValidationException ...
        _write_result(request.result_file, {"status": "failed", "error": describe_error(error)})
        raise
    print("airflow-iceberg result: " + job_spec.dump_result(result), flush=True)
    _write_result(request.result_file, result)
    return 0


def _write_result(path: str | None, result: Mapping[str, Any]) -> None:
    """Write the result atomically: the operator must never read half a file."""
    if not path:
        return
    partial = f"{path}.partial"
    with open(partial, "w", encoding="utf-8") as handle:
        handle.write(job_spec.dump_result(result))
    os.replace(partial, path)


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry point: parse, get a session, run, and stop the session if we started it.

    A session that already exists (an embedding process, a test) belongs to its creator and is
    left running.
    """
    request = job_spec.parse_argv(sys.argv[1:] if argv is None else argv)
    from pyspark.sql import SparkSession

    owned = SparkSession.getActiveSession() is None
    spark = SparkSession.builder.appName(f"airflow-iceberg {request.spec.table}").getOrCreate()
    try:
        return run_job(spark, request, os.environ)
    finally:
        if owned:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())

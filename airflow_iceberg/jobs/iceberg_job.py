"""The PySpark application every airflow-iceberg operator submits.

spark-submit runs this file on the driver. It parses its arguments with ``job_spec.parse_argv``
(the same module the operators used to build them), applies the catalog secrets it receives
through the environment, runs one DataFrameWriterV2 or DataFrameReader call, and writes a small
JSON result (snapshot id, operation, counts) for the operator to return as its XCom.

The functions below take a SparkSession, so tests drive them against one shared local session;
``main`` is the only place that creates a session. Nothing here imports Airflow.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

try:  # on the cluster, job_spec.py arrives as a loose file beside this one (--py-files)
    import job_spec  # type: ignore[import-not-found]
except ImportError:  # imported as part of the installed package (tests, local tooling)
    from airflow_iceberg.jobs import job_spec

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

WRITE_SUMMARY_COUNTS = {
    "added_records": "added-records",
    "deleted_records": "deleted-records",
    "total_records": "total-records",
    "added_data_files": "added-data-files",
    "deleted_data_files": "deleted-data-files",
    "total_data_files": "total-data-files",
}


class TableStateError(RuntimeError):
    """The table is not in the state the request needs (missing, already there, unknown snapshot)."""


# --------------------------------------------------------------------------- secrets


def apply_secret_conf(spark: SparkSession, environ: Mapping[str, str]) -> list[str]:
    """Set the catalog secrets passed through ``AIRFLOW_ICEBERG_SECRET_CONF`` on the session.

    The secrets never travel in argv (visible in ``ps`` and task logs). They are set as session
    SQL configuration before any catalog is used: Spark creates catalogs lazily from that
    configuration, and session settings are not shipped to executors. Returns the keys set.
    """
    raw = environ.get(job_spec.SECRET_CONF_ENV)
    if not raw:
        return []
    secrets = json.loads(raw)
    for key, value in secrets.items():
        spark.conf.set(key, value)
    return sorted(secrets)


# --------------------------------------------------------------------------- sources and tables


def load_source(spark: SparkSession, source: job_spec.Source) -> DataFrame:
    """Return the DataFrame a write takes its rows from."""
    if source.query is not None:
        return spark.sql(job_spec.validate_query(source.query))
    if source.table is not None:
        return spark.table(source.table)
    return spark.read.format(str(source.format)).options(**source.options).load(source.path)


def table_exists(spark: SparkSession, table: str) -> bool:
    return bool(spark.catalog.tableExists(table))


def ensure_namespace(spark: SparkSession, table: str) -> None:
    """Create the table's namespace if needed, so a first create works on Hive and JDBC catalogs too."""
    namespace = table.rsplit(".", 1)[0]
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")


def current_snapshot_id(spark: SparkSession, table: str) -> int | None:
    """The id the table's ``main`` branch points at, or None for a table with no snapshot yet."""
    from pyspark.sql import functions as F

    rows = spark.table(f"{table}.refs").where(F.col("name") == "main").select("snapshot_id").collect()
    return int(rows[0].snapshot_id) if rows else None


def snapshot_summary(spark: SparkSession, table: str, snapshot_id: int) -> dict[str, Any]:
    """Describe one snapshot: id, parent, operation, commit time and the summary counts."""
    from pyspark.sql import functions as F

    rows = spark.table(f"{table}.snapshots").where(F.col("snapshot_id") == snapshot_id).collect()
    if not rows:
        raise TableStateError(f"snapshot {snapshot_id} is not in table {table}")
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


def write_options_for(
    spec: job_spec.WriteSpec, commit_id: str | None, commit_properties: Mapping[str, str]
) -> dict[str, str]:
    """The DataFrameWriterV2 options: the user's, merge-schema, and the snapshot-summary tags."""
    options = dict(spec.write_options)
    if spec.merge_schema:
        options["merge-schema"] = "true"
    for key, value in commit_properties.items():
        options[f"snapshot-property.{key}"] = value
    if commit_id:
        options[f"snapshot-property.{job_spec.COMMIT_ID_PROPERTY}"] = commit_id
    return options


def table_properties_for(spec: job_spec.WriteSpec) -> dict[str, str]:
    properties = dict(spec.table_properties)
    if spec.merge_schema:
        # Iceberg only accepts a wider schema from a writer when the table allows it.
        properties.setdefault("write.spark.accept-any-schema", "true")
    return properties


def _check_table_state(spark: SparkSession, spec: job_spec.WriteSpec) -> None:
    exists = table_exists(spark, spec.table)
    if spec.mode == "create" and exists:
        raise TableStateError(
            f"table {spec.table} already exists; use mode 'create_or_replace' or 'replace' to replace it"
        )
    if spec.mode not in ("create", "create_or_replace") and not exists:
        raise TableStateError(
            f"table {spec.table} does not exist; create it first (IcebergCreateTableOperator, mode 'create')"
        )


def _create_with_sql(spark: SparkSession, spec: job_spec.WriteSpec, df: DataFrame) -> None:
    """Create through SQL CTAS: DataFrameWriterV2.partitionedBy cannot express ``truncate(W, col)``.

    CTAS on an Iceberg SparkCatalog is atomic (a staged table), like the DataFrameWriterV2 path.
    """
    view = f"airflow_iceberg_source_{uuid.uuid4().hex}"
    df.createOrReplaceTempView(view)
    verb = {"create": "CREATE TABLE", "replace": "REPLACE TABLE", "create_or_replace": "CREATE OR REPLACE TABLE"}
    sql = f"{verb[spec.mode]} {spec.table} USING iceberg"
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


def write_table(
    spark: SparkSession,
    spec: job_spec.WriteSpec,
    commit_id: str | None = None,
    commit_properties: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Run one DataFrameWriterV2 call and describe the snapshot it committed."""
    from pyspark.sql import functions as F

    _check_table_state(spark, spec)
    if spec.mode in job_spec.CREATE_MODES:
        ensure_namespace(spark, spec.table)
    df = load_source(spark, spec.source)
    writer = df.writeTo(spec.table).options(**write_options_for(spec, commit_id, commit_properties or {}))
    if spec.mode in job_spec.CREATE_MODES:
        if any(job_spec.parse_transform(e)[0] == "truncate" for e in spec.partition_by):
            _create_with_sql(spark, spec, df)
            return _result_of_write(spark, spec, commit_id=None)
        writer = writer.using("iceberg")
        for key, value in table_properties_for(spec).items():
            writer = writer.tableProperty(key, value)
        if spec.partition_by:
            writer = writer.partitionedBy(*[transform_column(e) for e in spec.partition_by])
    if spec.mode == "create":
        writer.create()
    elif spec.mode == "replace":
        writer.replace()
    elif spec.mode == "create_or_replace":
        writer.createOrReplace()
    elif spec.mode == "append":
        writer.append()
    elif spec.mode == "overwrite_partitions":
        writer.overwritePartitions()
    else:
        writer.overwrite(F.expr(str(spec.condition)))
    return _result_of_write(spark, spec, commit_id)


def _result_of_write(spark: SparkSession, spec: job_spec.WriteSpec, commit_id: str | None) -> dict[str, Any]:
    found = find_commit(spark, spec.table, commit_id) if commit_id else None
    if found is None:
        snapshot_id = current_snapshot_id(spark, spec.table)
        found = snapshot_summary(spark, spec.table, snapshot_id) if snapshot_id is not None else {}
    return {"table": spec.table, "mode": spec.mode, **found}


# --------------------------------------------------------------------------- reads


def resolve_snapshot(spark: SparkSession, spec: job_spec.ReadSpec) -> int | None:
    """Find the snapshot a read will see, and fail clearly when the selector points nowhere.

    Checking the table's metadata tables first gives errors that name the table and the bad
    value, instead of a Java stack trace from deep inside the scan.
    """
    from pyspark.sql import functions as F

    table = spec.table
    if spec.snapshot_id is not None:
        known = spark.table(f"{table}.snapshots").where(F.col("snapshot_id") == spec.snapshot_id).count()
        if not known:
            raise TableStateError(f"snapshot_id {spec.snapshot_id} is not a snapshot of table {table}")
        return spec.snapshot_id
    if spec.as_of_timestamp is not None:
        return _snapshot_as_of(spark, table, spec.as_of_timestamp)
    if spec.branch is not None or spec.tag is not None:
        kind, name = ("BRANCH", spec.branch) if spec.branch is not None else ("TAG", spec.tag)
        rows = spark.table(f"{table}.refs").where((F.col("name") == name) & (F.col("type") == kind)).collect()
        if not rows:
            raise TableStateError(f"{kind.lower()} {name!r} does not exist in table {table}")
        return int(rows[0].snapshot_id)
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
        raise TableStateError(f"table {table} has no snapshots to time-travel to")
    first_iso = datetime.fromtimestamp(first / 1000, tz=timezone.utc).isoformat()
    raise TableStateError(
        f"as_of_timestamp {timestamp_ms} ({when}) is before the first snapshot of table {table} "
        f"({first} = {first_iso})"
    )


def reader_options(spec: job_spec.ReadSpec) -> dict[str, str]:
    """The DataFrameReader options: the user's read options plus the one time-travel selector."""
    options = dict(spec.read_options)
    for name, key in (("snapshot_id", "snapshot-id"), ("as_of_timestamp", "as-of-timestamp"),
                      ("branch", "branch"), ("tag", "tag")):
        value = getattr(spec, name)
        if value is not None:
            options[key] = str(value)
    return options


def read_table(
    spark: SparkSession,
    spec: job_spec.ReadSpec,
    commit_id: str | None = None,
    commit_properties: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Read the table (as of the chosen snapshot), write the rows to the sink, report the count."""
    from pyspark.sql import functions as F

    if not table_exists(spark, spec.table):
        raise TableStateError(f"table {spec.table} does not exist")
    snapshot_id = resolve_snapshot(spark, spec)
    df = spark.read.options(**reader_options(spec)).table(spec.table)
    if spec.columns:
        df = df.select(*spec.columns)
    if spec.filter:
        df = df.where(F.expr(spec.filter))
    result: dict[str, Any] = {"table": spec.table, "snapshot_id": snapshot_id, "selector": spec.selector}
    result["row_count"] = df.count()
    if spec.preview_rows:
        rows = [row.asDict(recursive=True) for row in df.limit(spec.preview_rows).collect()]
        result["preview"] = json.loads(json.dumps(rows, default=str))
    if spec.sink_table:
        sink = job_spec.WriteSpec(table=spec.sink_table, mode=spec.sink_mode, source=job_spec.Source(query="SELECT 1"))
        _check_table_state(spark, sink)
        if spec.sink_mode in job_spec.CREATE_MODES:
            ensure_namespace(spark, spec.sink_table)
        writer = df.writeTo(spec.sink_table).options(**write_options_for(sink, commit_id, commit_properties or {}))
        getattr(writer, _WRITER_METHOD[spec.sink_mode])()
        result["sink"] = _result_of_write(spark, sink, commit_id)
    elif spec.sink_path:
        df.write.format(spec.sink_format).mode(spec.sink_path_mode).save(spec.sink_path)
        result["sink"] = {"path": spec.sink_path, "format": spec.sink_format}
    return result


_WRITER_METHOD = {
    "create": "create",
    "replace": "replace",
    "create_or_replace": "createOrReplace",
    "append": "append",
    "overwrite_partitions": "overwritePartitions",
}


# --------------------------------------------------------------------------- entry point


def run(spark: SparkSession, request: job_spec.JobRequest) -> dict[str, Any]:
    """Dispatch one parsed request to the write or read function."""
    action = write_table if isinstance(request.spec, job_spec.WriteSpec) else read_table
    return action(spark, request.spec, request.commit_id, request.commit_properties)  # type: ignore[arg-type]


def _write_result(path: str | None, result: Mapping[str, Any]) -> None:
    """Write the result atomically: the operator must never read half a file."""
    if not path:
        return
    partial = f"{path}.partial"
    with open(partial, "w", encoding="utf-8") as handle:
        handle.write(job_spec.dump_result(result))
    os.replace(partial, path)


def main(argv: Sequence[str] | None = None) -> int:
    request = job_spec.parse_argv(sys.argv[1:] if argv is None else argv)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(f"airflow-iceberg {request.spec.table}").getOrCreate()
    try:
        apply_secret_conf(spark, os.environ)
        result = {"status": "success", **run(spark, request)}
        print("airflow-iceberg result: " + job_spec.dump_result(result), flush=True)
        _write_result(request.result_file, result)
        return 0
    except (job_spec.InvalidSpecError, TableStateError) as error:
        message = f"{type(error).__name__}: {error}"
    except Exception as error:  # Spark's AnalysisException and friends: report them, then fail
        message = f"{type(error).__name__}: {error}".splitlines()[0]
        _write_result(request.result_file, {"status": "failed", "error": message})
        raise
    finally:
        spark.stop()
    print(f"airflow-iceberg error: {message}", file=sys.stderr, flush=True)
    _write_result(request.result_file, {"status": "failed", "error": message})
    return 1


if __name__ == "__main__":
    sys.exit(main())

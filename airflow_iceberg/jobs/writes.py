"""Writes: one DataFrameWriterV2 call (or an atomic CTAS) per job, checked before it starts.

Everything that can be checked (table state, partition columns, the source against the table's
schema, ``validate-from-snapshot-id``) is checked before any data file is written, so a failed
write leaves the table and the catalog as they were.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

try:  # Spark 4 moved the partition transforms here; the old names in functions are deprecated
    from pyspark.sql.functions import partitioning as transforms
except ImportError:  # Spark 3.5
    transforms = F

from airflow_iceberg.jobs import user_sql
from airflow_iceberg.jobs.branches import branch_for_commit, branch_identifier, sql_string
from airflow_iceberg.jobs.commits import (
    earlier_commit,
    new_commit_id,
    result_of_write,
    snapshot_properties_for,
    with_commit_properties,
    write_options_for,
)
from airflow_iceberg.jobs.connect import committing
from airflow_iceberg.jobs.spec.identifiers import quote_identifier, quote_name
from airflow_iceberg.jobs.spec.options import option_value
from airflow_iceberg.jobs.spec.sources import TABLE_SCHEMA, Source
from airflow_iceberg.jobs.spec.sql_text import validate_query
from airflow_iceberg.jobs.spec.writes import CREATE_MODES, WriteSpec, parse_transform
from airflow_iceberg.jobs.table_state import (
    SchemaMismatchError,
    SnapshotNotFoundError,
    TableNotFoundError,
    check_table_state,
    ensure_namespace,
    ref_head,
    require_table,
    snapshot_exists,
    table_exists,
    table_properties,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

#: Table property without which Iceberg refuses a writer whose schema differs from the table's.
ACCEPT_ANY_SCHEMA = "write.spark.accept-any-schema"


def load_source(spark: SparkSession, source: Source, target: str | None = None) -> DataFrame:
    """Return the DataFrame a write takes its rows from; a query is run as a query only.

    ``target`` is the table being written, whose schema ``source_schema="table"`` reads files with.
    """
    if source.query is not None:
        return user_sql.query_frame(spark, validate_query(source.query))
    if source.table is not None:
        require_table(spark, source.table, "source table")
        return spark.table(quote_identifier(source.table))
    reader = spark.read.format(str(source.format)).options(**source.options)
    if source.schema is not None:
        reader = reader.schema(file_schema(spark, source.schema, target))
    return reader.load(source.path)


def file_schema(spark: SparkSession, schema: str, target: str | None) -> Any:
    """The schema files are read with: the DDL as given, or the target table's own schema."""
    if schema.strip().lower() != TABLE_SCHEMA:
        return schema
    if target is None or not table_exists(spark, target):
        raise TableNotFoundError(
            f"source_schema 'table' reads the files with the schema of table {target}, which does not "
            "exist yet: give the columns instead, e.g. source_schema=\"id INT, day DATE\""
        )
    return spark.table(quote_identifier(target)).schema


def transform_column(expression: str) -> Column:
    """Turn ``days(ts)``, ``bucket(16, id)`` and friends into the Column DataFrameWriterV2 takes."""
    transform, column, argument = parse_transform(expression)
    reference = F.col(quote_name(column))  # a column, never a nested field or an expression
    if transform == "identity":
        return reference
    if transform == "bucket":
        return transforms.bucket(int(argument or 0), reference)
    return getattr(transforms, transform)(reference)


def _transform_sql(expression: str) -> str:
    transform, name, argument = parse_transform(expression)
    column = quote_name(name)
    if transform == "identity":
        return column
    return f"{transform}({argument}, {column})" if argument is not None else f"{transform}({column})"


def table_properties_for(spec: WriteSpec) -> dict[str, str]:
    properties = dict(spec.table_properties)
    if spec.merge_schema:
        # Iceberg only accepts a wider schema from a writer when the table allows it.
        properties.setdefault(ACCEPT_ANY_SCHEMA, "true")
    return properties


def check_partition_columns(spec: WriteSpec, columns: Sequence[str]) -> None:
    """Name the bad partition_by entry, instead of Spark's "Couldn't find column" with a schema dump."""
    known = {column.lower() for column in columns}
    for expression in spec.partition_by:
        column = parse_transform(expression)[1]
        if column.lower() not in known:
            raise SchemaMismatchError(
                f"partition_by {expression!r} uses column {column!r}, which is not in the source "
                f"(columns: {', '.join(columns)})"
            )


def check_source_fits_table(spark: SparkSession, spec: WriteSpec, columns: Sequence[str]) -> None:
    """Compare the source's columns with the existing table's before writing.

    Without merge_schema, extra or missing columns are an error that names them (Spark's own
    message does not). With merge_schema, Iceberg needs ``write.spark.accept-any-schema=true``
    on the table; without it Spark would fail with an arity error that hides the reason.
    """
    if spec.merge_schema:
        if table_properties(spark, spec.table).get(ACCEPT_ANY_SCHEMA, "").lower() != "true":
            raise SchemaMismatchError(
                f"merge_schema needs table property {ACCEPT_ANY_SCHEMA}=true on {spec.table}: create the "
                "table with merge_schema=True, or run ALTER TABLE "
                f"{quote_identifier(spec.table)} SET TBLPROPERTIES "
                f"('{ACCEPT_ANY_SCHEMA}'='true')"
            )
        return
    table_columns = spark.table(quote_identifier(spec.table)).columns
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


def outside_condition_message(condition: str) -> str:
    return (
        f"the source has rows outside the partition being overwritten ({condition}); a write of "
        "one partition replaces that partition only: select only its rows"
    )


def rows_within(condition: str) -> Column:
    """True for a row ``condition`` holds for; False, not NULL, where it is unknown."""
    return F.coalesce(user_sql.expression(condition, "overwrite condition"), F.lit(False))


def check_source_within_condition(df: DataFrame, condition: str) -> None:
    """Refuse a source with a row outside ``condition``: an overwrite of one partition must not write others.

    Spark's ``overwrite(condition)`` deletes what matches and appends every source row, wherever
    it falls (Iceberg does not check the added files against the filter). The check reads the
    source once more, up to the first such row, so that the usual mistake fails before any file
    is written; :func:`guarded_within_condition` keeps the write itself to the condition.
    """
    if df.filter(~rows_within(condition)).limit(1).count():
        raise SchemaMismatchError(outside_condition_message(condition))


#: The types a partition key's range is read on; casts between them never fail or give NULL.
_TIME_TYPES = {"date", "timestamp", "timestamp_ntz"}


def as_table_types(df: DataFrame, table_schema: StructType) -> DataFrame:
    """``df`` with each DATE or TIMESTAMP column cast to the time type of its table column.

    The write casts the source to the table's types, a TIMESTAMP_NTZ into a TIMESTAMP column (or
    the reverse) in the session's time zone: checked on its own type, a row can pass for one
    partition and land in the next. Cast here, the check and the guard see the values written.
    Other types are left to the write, whose own (ANSI) assignment rules refuse what cannot fit.
    """
    wanted = {field.name.lower(): field.dataType for field in table_schema.fields}
    columns = []
    for field in df.schema.fields:
        column = F.col("`" + field.name.replace("`", "``") + "`")
        target = wanted.get(field.name.lower())
        if (
            target is not None
            and target != field.dataType
            and {target.typeName(), field.dataType.typeName()} <= _TIME_TYPES
        ):
            column = column.cast(target).alias(field.name)
        columns.append(column)
    return df.select(*columns)


def guarded_within_condition(df: DataFrame, condition: str) -> DataFrame:
    """``df`` as the write reads it, failing on the first row outside ``condition``.

    The check above and the write are two scans of the source: a source read again on every
    action (an Iceberg table another writer commits to, JDBC, a query of ``current_timestamp()``)
    can return other rows the second time. The guard is in the written frame itself, so the rows
    written are the rows checked: a row outside fails the write's Spark job before its commit,
    and the table stays as it was. Spark takes ``raise_error`` for deterministic and would push
    the guard below the source's own joins and filters, onto rows they drop. The
    ``monotonically_increasing_id() < 0`` term, never true, makes the predicate nondeterministic,
    which the optimizer keeps where it is (``rand() < 0`` would not do: Spark folds it to false).
    """
    kept_in_place = rows_within(condition) | (F.monotonically_increasing_id() < F.lit(0))
    refusal = F.raise_error(F.lit(outside_condition_message(condition)))
    guard = F.when(kept_in_place, F.lit(True)).otherwise(refusal)
    return df.filter(guard)


def refused_outside_condition(error: Exception, spec: WriteSpec) -> SchemaMismatchError | None:
    """The guard's failure, from inside the write's Spark job, as the check's own clear error."""
    message = outside_condition_message(str(spec.condition))
    return SchemaMismatchError(message) if spec.source_within_condition and message in str(error) else None


def check_validate_from(spark: SparkSession, spec: WriteSpec) -> None:
    """An unknown validate-from-snapshot-id would fail at commit time, after all the data is written."""
    value = option_value(spec.write_options, "validate-from-snapshot-id")
    if value is not None and not snapshot_exists(spark, spec.table, int(value)):
        raise SnapshotNotFoundError(
            f"validate-from-snapshot-id {value} is not a snapshot of table {spec.table}"
        )


def with_default_validate_from(
    spark: SparkSession, spec: WriteSpec, ref: str = "main"
) -> WriteSpec:
    """Pin ``validate-from-snapshot-id`` to the head of ``ref`` when only ``isolation-level`` is set.

    Without it Iceberg validates an overwrite against the table's whole history, so the files the
    overwritten rows already had count as conflicts and the write always fails. Pinned to the
    head of the ref being written (``main``, or the branch of a branch write) before the source
    is read, it means: fail if a conflicting commit landed there while this job ran. A branch
    that does not exist yet is made from ``main``'s head (:func:`~.branches.ensure_branch`), so
    the pin is ``main``'s head then, as for a branch that will be reset.
    """
    options = spec.write_options
    if (
        spec.mode not in ("overwrite", "overwrite_partitions")
        or option_value(options, "isolation-level") is None
        or option_value(options, "validate-from-snapshot-id") is not None
    ):
        return spec
    current = ref_head(spark, spec.table, ref)
    if current is None and ref != "main":  # a branch made by this write starts at main's head
        current = ref_head(spark, spec.table, "main")
    if current is None:
        return spec
    return dataclasses.replace(spec, write_options={**options, "validate-from-snapshot-id": str(current)})


def write_table(
    spark: SparkSession,
    spec: WriteSpec,
    commit_id: str | None = None,
    commit_properties: Mapping[str, str] | None = None,
    reuse_commit: bool = False,
) -> dict[str, Any]:
    """Run one DataFrameWriterV2 call and describe the snapshot it committed.

    Everything that can be checked is checked before the write, so a failure leaves the table
    (and the catalog) as it was. With ``reuse_commit``, a commit an earlier try already made is
    returned instead (see :func:`earlier_commit`); that search comes before a ``reset_branch``,
    which would take the commit off the branch. The result is found by the commit id (a fresh
    one when none is given); ``committed: false`` means Iceberg made no commit (an empty
    dynamic overwrite).
    """
    ref = spec.branch or "main"
    # The earlier try's commit is looked for first: a reset_branch would take it off the branch.
    earlier = earlier_commit(spark, spec.table, commit_id, ref=ref) if reuse_commit else None
    if earlier is not None:
        reused = {
            "table": spec.table,
            "mode": spec.mode,
            "committed": True,
            **earlier,
            "reused_earlier_commit": True,
        }
        return {**reused, "branch": spec.branch} if spec.branch else reused
    commit_id = commit_id or new_commit_id()
    check_table_state(spark, spec.table, spec.mode)
    if spec.condition is not None:
        user_sql.expression(spec.condition, "overwrite condition")  # parsed before anything is read
    # Before the source is read; a branch that will be reset starts from main's head, so from there.
    spec = with_default_validate_from(spark, spec, ref="main" if spec.reset_branch else ref)
    df = load_source(spark, spec.source, spec.table)
    if spec.mode in CREATE_MODES:
        check_partition_columns(spec, df.columns)
        ensure_namespace(spark, spec.table)  # only now: a failed check must not leave a namespace behind
    else:
        check_source_fits_table(spark, spec, df.columns)
        check_validate_from(spark, spec)
        if spec.source_within_condition:
            df = as_table_types(df, spark.table(quote_identifier(spec.table)).schema)
            check_source_within_condition(df, str(spec.condition))
            df = guarded_within_condition(df, str(spec.condition))
    if spec.created_with_sql:
        properties = snapshot_properties_for(spec.write_options, commit_id, commit_properties)
        with_commit_properties(spark, properties, lambda: _create_with_sql(spark, spec, df))
    else:
        options = write_options_for(spec.write_options, commit_id, commit_properties, spec.merge_schema)
        # After every check; the task's identity lets a reset refuse to drop a neighbour's commit.
        with branch_for_commit(spark, spec.table, spec.branch, spec.reset_branch, commit_properties):
            try:
                _write_frame(df, spec, options)
            except Exception as error:
                if (refused := refused_outside_condition(error, spec)) is not None:
                    raise refused from None
                raise
    result = result_of_write(spark, spec.table, spec.mode, commit_id, ref=ref)
    return {**result, "branch": spec.branch} if spec.branch else result


def _write_frame(df: DataFrame, spec: WriteSpec, options: Mapping[str, str]) -> None:
    write_frame(
        df,
        branch_identifier(spec.table, spec.branch),
        spec.mode,
        options,
        table_properties=table_properties_for(spec),
        partition_by=spec.partition_by,
        condition=spec.condition,
    )


def write_frame(
    df: DataFrame,
    table: str,
    mode: str,
    options: Mapping[str, str],
    table_properties: Mapping[str, str] | None = None,
    partition_by: Sequence[str] = (),
    condition: str | None = None,
) -> None:
    """The one DataFrameWriterV2 call of a write or of a read's sink.

    A create is always ``.using("iceberg")``: on a session catalog (``SparkSessionCatalog``)
    without it Spark would create its default, a plain Parquet table. The call itself runs
    :func:`~airflow_iceberg.jobs.connect.committing`: it is the one that commits.
    """
    writer = df.writeTo(quote_identifier(table)).options(**options)
    if mode in CREATE_MODES:
        writer = writer.using("iceberg")
        for key, value in (table_properties or {}).items():
            writer = writer.tableProperty(key, value)
        if partition_by:
            writer = writer.partitionedBy(*[transform_column(e) for e in partition_by])
    if mode == "overwrite":
        condition_column = user_sql.expression(str(condition), "overwrite condition")
        with committing():
            writer.overwrite(condition_column)
    else:
        with committing():
            getattr(writer, WRITER_METHOD[mode])()


#: The DataFrameWriterV2 method of each mode (``overwrite`` takes a condition, so it is called apart).
WRITER_METHOD = {
    "create": "create",
    "replace": "replace",
    "create_or_replace": "createOrReplace",
    "append": "append",
    "overwrite_partitions": "overwritePartitions",
}


def _create_with_sql(spark: SparkSession, spec: WriteSpec, df: DataFrame) -> None:
    """Create through SQL CTAS: DataFrameWriterV2.partitionedBy cannot express ``truncate(W, col)``.

    CTAS on an Iceberg SparkCatalog is atomic (a staged table), like the DataFrameWriterV2 path.
    It takes no write options, so its snapshot properties come from :func:`with_commit_properties`.
    """
    view = f"airflow_iceberg_source_{uuid.uuid4().hex}"
    df.createOrReplaceTempView(view)
    sql = f"{_CTAS_VERB[spec.mode]} {quote_identifier(spec.table)} USING iceberg"
    if spec.partition_by:
        sql += " PARTITIONED BY (" + ", ".join(_transform_sql(e) for e in spec.partition_by) + ")"
    properties = table_properties_for(spec)
    if properties:
        sql += (
            " TBLPROPERTIES ("
            + ", ".join(f"{sql_string(k)}={sql_string(v)}" for k, v in properties.items())
            + ")"
        )
    try:
        with committing():
            spark.sql(f"{sql} AS SELECT * FROM {view}")
    finally:
        spark.catalog.dropTempView(view)


_CTAS_VERB = {
    "create": "CREATE TABLE",
    "replace": "REPLACE TABLE",
    "create_or_replace": "CREATE OR REPLACE TABLE",
}

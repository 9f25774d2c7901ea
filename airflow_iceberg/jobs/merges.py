"""Row-level changes: ``MERGE INTO`` and ``DELETE FROM``, on ``main`` or on a branch.

Both are one SQL command, so one Iceberg commit, tagged like every write (commit id and Airflow
identity through ``CommitMetadata.withCommitProperties``, or over Spark Connect the session's
snapshot properties, :mod:`.session_commit_tags`): a retry of a try that committed finds
that commit and returns it instead of changing the rows a second time. Copy-on-write and
merge-on-read work alike; the table's ``write.merge.mode`` / ``write.delete.mode`` decide.

A merge by ``keys`` takes a source with one row per key and no NULL key, and refuses any other
before anything is committed (:func:`guard_keys`): Spark's own check only sees table rows that
several source rows match. Its key columns must have the table's types, or types that widen to
them without loss (:func:`check_key_types`): the match compares in the wider type but the insert
stores the table's, so a lossy cast (2.1 and 2.2 into an ``int`` key) would insert one key twice.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F
from pyspark.sql.window import Window

from airflow_iceberg.jobs import user_sql
from airflow_iceberg.jobs.branches import branch_for_commit, branch_identifier
from airflow_iceberg.jobs.commits import (
    earlier_commit,
    new_commit_id,
    snapshot_properties_for,
    with_commit_properties,
)
from airflow_iceberg.jobs.connect import committing
from airflow_iceberg.jobs.session_commit_tags import require_row_level_delete, without_metadata_only_delete
from airflow_iceberg.jobs.spec.identifiers import parse_column, quote_identifier, quote_name
from airflow_iceberg.jobs.spec.row_changes import SOURCE_ALIAS, TARGET_ALIAS, DeleteSpec, MergeSpec
from airflow_iceberg.jobs.table_state import SchemaMismatchError, TableStateError, find_commit, require_table
from airflow_iceberg.jobs.writes import load_source

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType


class MergeSourceError(TableStateError):
    """The merge source has several rows for one key or table row, or a NULL key; nothing was changed."""


#: Starts the error a key column raises in the merge's own Spark job (see :func:`guard_keys`).
KEY_CHECK_FAILED = "airflow-iceberg merge key check failed:"
#: How many offending keys a refused merge names.
OFFENDING_KEYS_SHOWN = 5


def check_expressions(spark: SparkSession, expressions: Iterable[tuple[str, str]]) -> None:
    """Check each ``(what, text)`` is one SQL expression (:func:`user_sql.check_expression`)."""
    for what, text in expressions:
        user_sql.check_expression(spark, text, what)


def _merge_expressions(spec: MergeSpec) -> list[tuple[str, str]]:
    found = [("merge condition 'on'", spec.match_condition)]
    for clause in spec.clauses:
        if clause.condition is not None:
            found.append((f"merge clause ({clause.when}) condition", clause.condition))
        found += [(f"merge clause value of {column!r}", text) for column, text in clause.assignments.items()]
    return found


def source_key_columns(spark: SparkSession, source: DataFrame, keys: Sequence[str]) -> list[str]:
    """The source's own names of the merge ``keys`` (found as Spark resolves names), or a clear error.

    A key is written bare or in backticks (```order id```); the column it names is compared.
    """
    return [_column_named(spark, source.columns, key, "the source") for key in keys]


def _column_named(spark: SparkSession, columns: Sequence[str], key: str, where: str) -> str:
    case_sensitive = str(spark.conf.get("spark.sql.caseSensitive", "false")).lower() == "true"
    name = parse_column(key, "merge key column")
    named = [c for c in columns if c == name or (not case_sensitive and c.lower() == name.lower())]
    if len(named) != 1:
        raise SchemaMismatchError(
            f"merge key {key!r} is not a column of {where} (columns: {', '.join(columns)})"
        )
    return named[0]


def check_key_types(spark: SparkSession, table: str, source: DataFrame, keys: Sequence[str]) -> None:
    """Refuse a key column whose source type does not widen without loss to the table's type.

    ``t.k = s.k`` compares in the wider of the two types, while ``INSERT`` stores the source
    value cast to the table's type: with a source ``double`` key and an ``int`` column, 2.1 and
    2.2 are two keys to the match and to :func:`guard_keys`, and both are inserted as 2; and
    2.1 does not match the table's 2, so it is inserted next to it. When the cast is lossless
    (the same type, ``int`` into ``bigint``, ``float`` into ``double``, a decimal into a wider
    one, ``date`` into ``timestamp``), equal stored values are equal source values, and the
    match and the guard see what the insert stores. Anything else is refused before the merge
    runs, naming both types: cast the key in the source query.
    """
    table_types = {field.name: field.dataType for field in spark.table(quote_identifier(table)).schema.fields}
    source_types = {field.name: field.dataType for field in source.schema.fields}
    for key, column in zip(keys, source_key_columns(spark, source, keys), strict=True):
        target = table_types.get(_column_named(spark, list(table_types), key, f"table {table}"))
        given = source_types[column]
        if target is not None and not widens_losslessly(given, target):
            raise SchemaMismatchError(
                f"merge key {key!r} is {given.simpleString()} in the source but {target.simpleString()} in "
                f"table {table}: the insert would store the source value cast to "
                f"{target.simpleString()}, so distinct source keys could become one stored key, inserted "
                f"twice. Nothing was changed; cast it in the source query, e.g. CAST({quote_name(column)} AS "
                f"{target.simpleString().upper()}) AS {quote_name(column)}"
            )


#: Integral types by width: each widens without loss to the wider ones (and to decimals wide enough).
_INTEGRAL_DIGITS = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 19}


def widens_losslessly(given: DataType, target: DataType) -> bool:
    """Whether every value of ``given`` casts to a distinct value of ``target`` that compares the same."""
    from pyspark.sql.types import DecimalType, NullType

    if given == target or isinstance(given, NullType):  # a NULL stays NULL; guard_keys refuses it
        return True
    have, want = given.simpleString(), target.simpleString()
    if have in _INTEGRAL_DIGITS and want in _INTEGRAL_DIGITS:
        return _INTEGRAL_DIGITS[have] <= _INTEGRAL_DIGITS[want]
    if have in _INTEGRAL_DIGITS and isinstance(target, DecimalType):
        return target.precision - target.scale >= _INTEGRAL_DIGITS[have]
    if isinstance(given, DecimalType) and isinstance(target, DecimalType):
        return (
            target.scale >= given.scale and target.precision - target.scale >= given.precision - given.scale
        )
    if have in ("tinyint", "smallint", "int", "float") and want == "double":
        return True
    return (have, want) == ("date", "timestamp")


def guard_keys(source: DataFrame, keys: Sequence[str]) -> DataFrame:
    """``source`` with each key column failing the merge's Spark job on a NULL key or a key of several rows.

    Spark's own check (``MERGE_CARDINALITY_VIOLATION``) sees only a table row that several
    source rows match: two source rows for a key the table does not hold yet are both
    inserted, and a NULL key matches nothing (``NULL = NULL`` is not true), so its row is
    inserted again on every run. The guard is part of the MERGE's own plan (a count over a
    window by the keys, then ``raise_error`` in each key column, which every source row the
    merge reads goes through): it sees exactly the rows the merge reads, in the merge's own
    Spark job, and costs a shuffle of the source by the keys. A check run before the merge would
    read the source a second time, and a changing file source or a non-deterministic query could
    give it other rows.
    """
    rows = f"airflow_iceberg_key_rows_{uuid.uuid4().hex}"
    counted = source.withColumn(rows, F.count(F.lit(1)).over(Window.partitionBy(*_columns(keys))))
    offending = F.col(rows) > 1
    for key in keys:
        offending = offending | F.col(quote_name(key)).isNull()
    failure = F.raise_error(F.concat(F.lit(f"{KEY_CHECK_FAILED} "), _describe_key(keys, F.col(rows))))
    guarded = [
        F.when(offending, failure).otherwise(F.col(quote_name(column))).alias(column)
        if column in keys
        else F.col(quote_name(column))
        for column in source.columns
    ]
    return counted.select(*guarded)


def _columns(names: Sequence[str]) -> list[Column]:
    return [F.col(quote_name(name)) for name in names]


def _describe_key(keys: Sequence[str], rows: Column) -> Column:
    """``(id=7, day=2024-01-02) 2 rows``, as a Spark expression."""
    parts: list[Column] = [F.lit("(")]
    for index, key in enumerate(keys):
        value = F.coalesce(F.col(quote_name(key)).cast("string"), F.lit("NULL"))
        parts += [F.lit(f"{', ' if index else ''}{key}="), value]
    noun = F.when(rows == 1, F.lit(" row")).otherwise(F.lit(" rows"))
    return F.concat(*parts, F.lit(") "), rows.cast("string"), noun)


def merge_into(
    spark: SparkSession,
    spec: MergeSpec,
    commit_id: str | None = None,
    commit_properties: Mapping[str, str] | None = None,
    reuse_commit: bool = False,
) -> dict[str, Any]:
    """Run ``MERGE INTO`` from the spec's source and describe the snapshot it committed."""
    ref = spec.branch or "main"
    # The earlier try's commit is looked for first: a reset_branch would take it off the branch.
    earlier = earlier_commit(spark, spec.table, commit_id, ref=ref) if reuse_commit else None
    if earlier is not None:
        reused = {"committed": True, **earlier, "reused_earlier_commit": True}
        return {"table": spec.table, "branch": ref, **reused}
    commit_id = commit_id or new_commit_id()
    require_table(spark, spec.table)
    check_expressions(spark, _merge_expressions(spec))
    source = load_source(spark, spec.source, spec.table)
    keys = source_key_columns(spark, source, spec.keys)
    check_key_types(spark, spec.table, source, spec.keys)
    view = f"airflow_iceberg_merge_source_{uuid.uuid4().hex}"
    sql = (
        f"MERGE INTO {branch_identifier(spec.table, spec.branch)} {TARGET_ALIAS} "
        f"USING {view} {SOURCE_ALIAS} ON {spec.match_condition} "
        + " ".join(clause.sql() for clause in spec.clauses)
    )
    (guard_keys(source, keys) if keys else source).createOrReplaceTempView(view)
    try:
        with branch_for_commit(spark, spec.table, spec.branch, spec.reset_branch, commit_properties):
            _commit_sql(spark, sql, commit_id, commit_properties)
    except Exception as error:
        refusal = _source_refusal(spec, source, keys, error)
        if refusal is None:
            raise
        raise refusal from None
    finally:
        spark.catalog.dropTempView(view)
    return {"table": spec.table, "branch": ref, **_committed(spark, spec.table, ref, commit_id)}


def _source_refusal(
    spec: MergeSpec, source: DataFrame, keys: Sequence[str], error: BaseException
) -> MergeSourceError | None:
    """The clear error for a merge that failed on its source, or None when it failed otherwise.

    Only the failure of a running Spark job counts (:func:`execution_failures`): an analysis
    error prints the plan, which holds the key guard's message text as a literal.
    """
    failures = execution_failures(error)
    key_check = next((m for m in failures if m.startswith(KEY_CHECK_FAILED)), None)
    if key_check is not None:
        return MergeSourceError(
            f"the merge source must hold one row per key ({', '.join(keys)}) and no NULL key, but it has "
            f"{_offending_keys(source, keys, key_check)}: keep one row per key (e.g. the latest), and filter "
            "out or coalesce NULL keys. Nothing was changed"
        )
    if any(m.startswith("[MERGE_CARDINALITY_VIOLATION]") for m in failures):
        return MergeSourceError(
            f"the merge source has more than one row for a row of {spec.table} (match: "
            f"{spec.match_condition}): make the source unique on the match, e.g. keep the latest row per "
            "key. Nothing was changed"
        )
    return None


def execution_failures(error: BaseException) -> list[str]:
    """The messages of the Java exceptions behind a failed Spark job, outermost first; none for analysis.

    A task that fails (``raise_error``, Spark's ``MERGE_CARDINALITY_VIOLATION``) aborts the job
    with a ``SparkException`` whose cause is the task's own exception, so its message starts with
    the text the failure raised (Spark 4 puts the error class first: ``[USER_RAISED_EXCEPTION]``,
    taken off here). An ``AnalysisException`` never ran a job and counts for nothing, whatever its
    printed plan holds. An error pyspark converted holds no Java exception (Spark 4 raises the
    task's ``USER_RAISED_EXCEPTION`` as a ``SparkRuntimeException``): its own text is the failure.
    """
    from pyspark.errors import AnalysisException

    if isinstance(error, AnalysisException):
        return []
    java = getattr(error, "java_exception", None)
    if java is None:
        return [str(error).removeprefix("[USER_RAISED_EXCEPTION] ")]
    messages = []
    while java is not None:
        if str(java.getClass().getName()).endswith("AnalysisException"):
            return []
        message = str(java.getMessage() or "")
        messages.append(message.removeprefix("[USER_RAISED_EXCEPTION] "))
        java = java.getCause()
    return messages


def _offending_keys(source: DataFrame, keys: Sequence[str], failure: str) -> str:
    """A few offending keys, NULL keys first, then those of the most rows.

    This reads the source again, only to name them; should it not find any (the source changed
    since), the key the merge's own job failed on is named.
    """
    rows = F.count(F.lit(1)).alias("rows")
    has_null = F.greatest(*[F.col(quote_name(key)).isNull() for key in keys], F.lit(False))
    found = (
        source.groupBy(*_columns(keys))
        .agg(rows)
        .where((F.col("rows") > 1) | has_null)
        .orderBy(has_null.desc(), F.col("rows").desc())
        .select(_describe_key(keys, F.col("rows")).alias("key"))
        .limit(OFFENDING_KEYS_SHOWN + 1)
        .collect()
    )
    if not found:
        seen = re.search(re.escape(KEY_CHECK_FAILED) + r" (\(.*?\) \d+ rows?)", failure)
        return seen.group(1) if seen else "a duplicate or NULL key"
    named = ", ".join(row.key for row in found[:OFFENDING_KEYS_SHOWN])
    return named + (", and more" if len(found) > OFFENDING_KEYS_SHOWN else "")


def delete_from(
    spark: SparkSession,
    spec: DeleteSpec,
    commit_id: str | None = None,
    commit_properties: Mapping[str, str] | None = None,
    reuse_commit: bool = False,
) -> dict[str, Any]:
    """Run ``DELETE FROM ... WHERE`` and describe the snapshot it committed.

    A condition that matches no row still makes a commit, an empty one (Iceberg 1.10: operation
    ``delete`` when file statistics prove no file holds a matching row, ``overwrite`` when the
    rows had to be read). Only a condition Spark folds to false (``1 = 0``) makes none. Over
    Spark Connect a condition that covers whole files still reads them (or, merge-on-read, writes
    deletes for their rows): the metadata-only delete would commit without the commit id
    (:func:`~airflow_iceberg.jobs.session_commit_tags.without_metadata_only_delete`), and a
    condition Spark proves holds for every row (``true``) is refused there before anything runs
    (:func:`~airflow_iceberg.jobs.session_commit_tags.require_row_level_delete`).
    """
    ref = spec.branch or "main"
    # The earlier try's commit is looked for first: a reset_branch would take it off the branch.
    earlier = earlier_commit(spark, spec.table, commit_id, ref=ref) if reuse_commit else None
    if earlier is not None:
        reused = {"committed": True, **earlier, "reused_earlier_commit": True}
        return {"table": spec.table, "branch": ref, **reused}
    commit_id = commit_id or new_commit_id()
    require_table(spark, spec.table)
    check_expressions(spark, [("delete condition", spec.condition)])
    require_row_level_delete(spark, spec.table, spec.condition)
    # In parentheses: Spark would read `WHERE (flag)` as the table alias WHERE with a column list.
    sql = f"DELETE FROM {branch_identifier(spec.table, spec.branch)} WHERE ({spec.condition})"
    with (
        branch_for_commit(spark, spec.table, spec.branch, spec.reset_branch, commit_properties),
        without_metadata_only_delete(spark),
    ):
        _commit_sql(spark, sql, commit_id, commit_properties)
    return {"table": spec.table, "branch": ref, **_committed(spark, spec.table, ref, commit_id)}


def _commit_sql(
    spark: SparkSession, sql: str, commit_id: str | None, commit_properties: Mapping[str, str] | None
) -> None:
    properties = snapshot_properties_for({}, commit_id, commit_properties)
    with_commit_properties(spark, properties, lambda: run_committing_sql(spark, sql))


def run_committing_sql(spark: SparkSession, sql: str) -> None:
    """Run the one SQL statement that makes the job's commit, marked as such (:func:`.connect.committing`).

    Over Spark Connect the statement is the operation a retry settles by its id; inside
    ``CommitMetadata``'s JVM callback (the driver) the mark changes nothing.
    """
    with committing():
        spark.sql(sql)


def _committed(spark: SparkSession, table: str, ref: str, commit_id: str) -> dict[str, Any]:
    """The snapshot this job committed to ``ref``, found by its commit id, or ``committed: false``.

    Spark makes no commit for a delete whose condition it folds to false; reporting the ref's
    current snapshot then would describe someone else's commit.
    """
    found = find_commit(spark, table, commit_id, ref=ref)
    if found is None:
        return {"committed": False, "snapshot_id": None}
    return {"committed": True, **found}

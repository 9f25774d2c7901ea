"""The audit: resolve one snapshot, then measure every rule over exactly it in one aggregate query.

The branch (or tag) is resolved to a snapshot id first, and the scan reads that id, not the
branch: a commit that lands on the branch while the audit runs is not half-audited, and the
report's ``snapshot_id`` is what the audit saw, for publish to pin. Every rule becomes one
aggregate column of a single ``agg`` over the scan (one pass over the data; a unique key is
``count(*) - count(DISTINCT struct(key))``). Before that scan, each column and each condition is
analysed against the snapshot's schema, so an unknown column or a condition that is not boolean
fails naming its rule. Nothing is written: the audit makes no snapshot and moves no ref.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.errors import AnalysisException
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    CharType,
    DataType,
    DateType,
    NumericType,
    StringType,
    TimestampNTZType,
    TimestampType,
    VarcharType,
)

from airflow_iceberg.jobs.reads import read_frame, resolve_snapshot
from airflow_iceberg.jobs.spec.audits import AuditSpec
from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.identifiers import quote_column
from airflow_iceberg.jobs.spec.reads import ReadSpec
from airflow_iceberg.jobs.table_state import SnapshotNotFoundError, require_table
from airflow_iceberg.jobs.user_sql import expression

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


def resolve_audited_snapshot(spark: SparkSession, spec: AuditSpec) -> int:
    """The one snapshot id the audit checks: the branch's or tag's head now, the id given, or main's."""
    selector = ReadSpec(table=spec.table, branch=spec.branch, tag=spec.tag, snapshot_id=spec.snapshot_id)
    snapshot_id = resolve_snapshot(spark, selector)
    if snapshot_id is None:
        raise SnapshotNotFoundError(f"table {spec.table} has no snapshot to audit")
    return snapshot_id


def audit_table(spark: SparkSession, spec: AuditSpec) -> dict[str, Any]:
    """Measure every rule of ``spec`` on one snapshot; the report says which rules passed.

    The result is the audit report, whether or not it passed: the operator fails the task on it.
    """
    require_table(spark, spec.table)
    snapshot_id = resolve_audited_snapshot(spark, spec)
    frame = read_frame(spark, ReadSpec(table=spec.table, snapshot_id=snapshot_id), snapshot_id)
    rules, measures = planned_rules(frame, spec)
    row = frame.agg(F.count(F.lit(1)).alias("row_count"), *measures).collect()[0]
    for index, rule in enumerate(rules):
        rule["measured"] = _plain(row[f"rule_{index}"])
        rule["passed"] = _passed(rule)
    failures = [describe_failure(rule) for rule in rules if not rule["passed"]]
    return {
        "table": spec.table,
        "selector": spec.selector,
        "ref": spec.branch or spec.tag or (None if spec.snapshot_id is not None else "main"),
        "snapshot_id": snapshot_id,
        "row_count": int(row["row_count"]),
        "passed": not failures,
        "rules": rules,
        "failures": failures,
    }


def planned_rules(frame: DataFrame, spec: AuditSpec) -> tuple[list[dict[str, Any]], list[Column]]:
    """Each rule's report entry and the aggregate column that measures it, checked against ``frame``."""
    planned: list[tuple[dict[str, Any], Column]] = []
    count = F.count(F.lit(1))
    if spec.min_rows is not None:
        planned.append(({"rule": "min_rows", "expected": spec.min_rows}, count))
    if spec.max_rows is not None:
        planned.append(({"rule": "max_rows", "expected": spec.max_rows}, count))
    for column in spec.not_null:
        planned.append(
            ({"rule": "not_null", "column": column}, F.count_if(_column(frame, column, "not_null").isNull()))
        )
    for key in spec.unique:
        columns = [_column(frame, column, "unique") for column in key]
        duplicates = count - F.count_distinct(F.struct(*columns))  # a struct of NULLs is one value
        planned.append(({"rule": "unique", "columns": list(key)}, duplicates))
    for column, values in spec.accepted_values.items():
        outside = _outside(frame, column, values)
        planned.append(
            ({"rule": "accepted_values", "column": column, "values": list(values)}, F.count_if(outside))
        )
    for name, condition in spec.row_conditions.items():
        satisfied = _boolean(frame, condition, f"row_conditions[{name!r}]", aggregate=False)
        failing = F.count_if(~F.coalesce(satisfied, F.lit(False)))  # NULL does not satisfy it
        planned.append(({"rule": "row_condition", "name": name, "condition": condition}, failing))
    for name, condition in spec.aggregate_conditions.items():
        holds = _boolean(frame, condition, f"aggregate_conditions[{name!r}]", aggregate=True)
        planned.append(({"rule": "aggregate_condition", "name": name, "condition": condition}, holds))
    rules = [rule for rule, _ in planned]
    return rules, [measure.alias(f"rule_{index}") for index, (_, measure) in enumerate(planned)]


def describe_failure(rule: dict[str, Any]) -> str:
    """One line naming a broken rule and what was measured, for the task's error and log."""
    kind, measured = rule["rule"], rule["measured"]
    if kind == "min_rows":
        return f"min_rows: {measured} rows, fewer than {rule['expected']}"
    if kind == "max_rows":
        return f"max_rows: {measured} rows, more than {rule['expected']}"
    if kind == "not_null":
        return f"not_null {rule['column']}: {measured} rows are NULL"
    if kind == "unique":
        return f"unique ({', '.join(rule['columns'])}): {measured} rows repeat a key"
    if kind == "accepted_values":
        return f"accepted_values {rule['column']}: {measured} rows hold a value outside {rule['values']!r}"
    if kind == "row_condition":
        return f"row_conditions {rule['name']}: {measured} rows do not satisfy {rule['condition']!r}"
    return f"aggregate_conditions {rule['name']}: {rule['condition']!r} is {measured!r}, not true"


def _passed(rule: dict[str, Any]) -> bool:
    kind, measured = rule["rule"], rule["measured"]
    if kind == "min_rows":
        return measured >= rule["expected"]
    if kind == "max_rows":
        return measured <= rule["expected"]
    if kind == "aggregate_condition":
        return measured is True
    return measured == 0


def _column(frame: DataFrame, column: str, what: str) -> Column:
    """The column ``column`` of the audited snapshot, or an error naming the rule field."""
    col = F.col(quote_column(column, what))
    try:
        _ = frame.select(col).schema  # analysis only: reads nothing
    except AnalysisException:
        raise InvalidSpecError(
            f"{what}: {column!r} is not a column of the audited snapshot; its columns are "
            f"{', '.join(frame.columns)}"
        ) from None
    return col


def _outside(frame: DataFrame, column: str, values: tuple[Any, ...]) -> Column:
    """True where ``column`` holds a value outside ``values`` (NULL: neither in nor out).

    Each value is checked against the column's type first, so the comparison never leaves Spark
    to coerce a string against a number: Spark 3.5 then compares as strings, Spark 4.0 (ANSI)
    casts every row's string to a number and fails on the first that is not, or fails optimising
    a boolean against a string. A value that is not of the column's kind is refused, naming it.
    """
    what = f"accepted_values[{column!r}]"
    col = _column(frame, column, "accepted_values")
    kind = frame.select(col).schema.fields[0].dataType
    return ~col.isin(*(_typed_value(frame, kind, value, what) for value in values))


def _typed_value(frame: DataFrame, kind: DataType, value: Any, what: str) -> Column:
    """``value`` as a literal of the column's type ``kind``, or an error naming it."""
    if isinstance(kind, BooleanType):
        fits, expected = isinstance(value, bool), "true or false"
    elif isinstance(kind, (StringType, CharType, VarcharType)):
        fits, expected = isinstance(value, str), "strings"
    elif isinstance(kind, NumericType):
        fits, expected = isinstance(value, (int, float)) and not isinstance(value, bool), "numbers"
    elif isinstance(kind, (DateType, TimestampType, TimestampNTZType)):
        expected = "dates or timestamps as text, e.g. '2024-01-02'"
        fits = isinstance(value, str) and _casts(frame, F.lit(value).cast(kind))
        return F.lit(value).cast(kind) if fits else _refuse(what, value, kind, expected)
    else:
        raise InvalidSpecError(
            f"{what}: the column is a {kind.simpleString()}; accepted values are for strings, numbers, "
            "booleans, dates and timestamps (give a row condition instead)"
        )
    return F.lit(value) if fits else _refuse(what, value, kind, expected)


def _casts(frame: DataFrame, literal: Column) -> bool:
    """Whether a literal cast is a value: NULL without ANSI mode, an error with it (Spark 4.0)."""
    try:
        return frame.sparkSession.range(1).select(literal).collect()[0][0] is not None
    except Exception:  # ANSI mode raises a different class per type and per Spark line
        return False


def _refuse(what: str, value: Any, kind: DataType, expected: str) -> Column:
    raise InvalidSpecError(
        f"{what}: {value!r} is not a value of the column, a {kind.simpleString()}: give {expected}"
    )


def _boolean(frame: DataFrame, condition: str, what: str, *, aggregate: bool) -> Column:
    """The user's condition as a Column (Spark's expression parser, never a statement), analysed to be
    a boolean: over the rows for a row condition, over the whole snapshot for an aggregate one."""
    parsed = expression(condition, what)
    try:
        schema = (frame.agg(parsed) if aggregate else frame.select(parsed)).schema
    except AnalysisException as error:
        hint = " (an aggregate condition is over aggregates, e.g. sum(amount) > 0)" if aggregate else ""
        raise InvalidSpecError(
            f"{what} {condition!r} does not fit the audited snapshot{hint}: {_first_line(error)}"
        ) from None
    kind = schema.fields[0].dataType
    if not isinstance(kind, BooleanType):
        raise InvalidSpecError(f"{what} {condition!r} must be true or false, but it is {kind.simpleString()}")
    if not aggregate:
        try:
            _ = frame.agg(F.count_if(parsed)).schema  # what measures it: fails on an aggregate inside
        except AnalysisException as error:
            raise InvalidSpecError(
                f"{what} {condition!r}: a row condition is about each row and may not aggregate "
                f"(give it as an aggregate condition): {_first_line(error)}"
            ) from None
    return parsed


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _plain(value: Any) -> Any:
    """A measured value as JSON has it (a count as int, a condition as bool or None)."""
    return value if value is None or isinstance(value, bool) else int(value)

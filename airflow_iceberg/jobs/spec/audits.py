"""The audit action: declarative checks on one snapshot of a table, the gate of write-audit-publish.

An audit names the snapshot it checks (a branch's head, a tag's, or a snapshot id; with none,
``main``'s), and its rules: row count bounds, columns without NULLs, unique keys, accepted values,
and SQL conditions, either on every row or on aggregates of the whole snapshot. Everything here
is checked before Spark starts; the job then checks the columns and the SQL against the table.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from airflow_iceberg.jobs.spec.action import ActionSpec, non_negative_int, parse_pair, require_one
from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.identifiers import parse_column, validate_name, validate_table_identifier
from airflow_iceberg.jobs.spec.sql_text import validate_condition, validate_expression

#: The rule fields of an audit, in the order the report lists them.
RULE_FIELDS = (
    "min_rows",
    "max_rows",
    "not_null",
    "unique",
    "accepted_values",
    "row_conditions",
    "aggregate_conditions",
)
#: The types a value of ``accepted_values`` may have (NULL is the ``not_null`` rule's business).
ACCEPTED_VALUE_TYPES = (str, int, float, bool)
#: The longest single argument Linux lets a process start with (``MAX_ARG_STRLEN``, 128 KiB with
#: its NUL): each column's accepted values travel to spark-submit as one argument, and a longer
#: one makes the launch fail with ``Argument list too long``.
MAX_ARGUMENT_BYTES = 128 * 1024 - 1


@dataclass(frozen=True)
class AuditSpec(ActionSpec):
    """Check one snapshot of ``table`` against declarative rules; read only, never a commit.

    ``unique`` holds keys, each a tuple of columns. ``accepted_values`` maps a column to the
    values it may hold. ``row_conditions`` and ``aggregate_conditions`` map a rule name to a
    boolean Spark SQL expression: every row must satisfy a row condition, and an aggregate
    condition (``sum(amount) > 0``, ``count_if(amount <= 0) <= 3``) must be true over the whole
    snapshot.
    """

    action: ClassVar[str] = "audit"
    branch: str | None = None
    tag: str | None = None
    snapshot_id: int | None = None
    min_rows: int | None = None
    max_rows: int | None = None
    not_null: tuple[str, ...] = ()
    unique: tuple[tuple[str, ...], ...] = ()
    accepted_values: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    row_conditions: dict[str, str] = field(default_factory=dict)
    aggregate_conditions: dict[str, str] = field(default_factory=dict)

    @property
    def selector(self) -> str | None:
        """Which of ``branch``, ``tag`` and ``snapshot_id`` is set (None: ``main``); raises on two."""
        return require_one(
            {"branch": self.branch, "tag": self.tag, "snapshot_id": self.snapshot_id},
            "audited snapshot",
            allow_none=True,
        )

    def validated(self) -> AuditSpec:
        validate_table_identifier(self.table)
        self.selector  # noqa: B018 - raises when two selectors are given
        for name in ("branch", "tag"):
            if getattr(self, name) is not None:
                validate_name(getattr(self, name), name)
        non_negative_int(self.snapshot_id, "snapshot_id")
        non_negative_int(self.min_rows, "min_rows")
        non_negative_int(self.max_rows, "max_rows")
        if self.min_rows is not None and self.max_rows is not None and self.min_rows > self.max_rows:
            raise InvalidSpecError(f"min_rows {self.min_rows} is more than max_rows {self.max_rows}")
        spec = AuditSpec(
            table=self.table,
            branch=self.branch,
            tag=self.tag,
            snapshot_id=self.snapshot_id,
            min_rows=self.min_rows,
            max_rows=self.max_rows,
            not_null=_columns(self.not_null, "not_null"),
            unique=_keys(self.unique),
            accepted_values=_accepted_values(self.accepted_values),
            row_conditions=_conditions(self.row_conditions, "row_conditions"),
            aggregate_conditions=_conditions(self.aggregate_conditions, "aggregate_conditions"),
        )
        if all(getattr(spec, name) in (None, (), {}) for name in RULE_FIELDS):
            raise InvalidSpecError(f"an audit needs at least one rule: give {', '.join(RULE_FIELDS)}")
        return spec

    def to_argv(self) -> list[str]:
        argv = super().to_argv()
        for flag, value in (
            ("--branch", self.branch),
            ("--tag", self.tag),
            ("--snapshot-id", self.snapshot_id),
            ("--min-rows", self.min_rows),
            ("--max-rows", self.max_rows),
        ):
            if value is not None:
                argv += [flag, str(value)]
        for column in self.not_null:
            argv += ["--not-null", column]
        for key in self.unique:  # JSON: a quoted column name may hold a comma
            argv += ["--unique", json.dumps(list(key))]
        for column, values in self.accepted_values.items():
            argv += ["--accepted-values", accepted_values_argument(column, values)]
        for name, condition in self.row_conditions.items():
            argv += ["--row-condition", f"{name}={condition}"]
        for name, condition in self.aggregate_conditions.items():
            argv += ["--aggregate-condition", f"{name}={condition}"]
        return argv

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        ActionSpec.add_arguments(parser)
        parser.add_argument("--branch")
        parser.add_argument("--tag")
        for flag in ("--snapshot-id", "--min-rows", "--max-rows"):
            parser.add_argument(flag, type=int)
        parser.add_argument("--not-null", action="append", default=[])
        parser.add_argument("--unique", type=json.loads, action="append", default=[])
        parser.add_argument("--accepted-values", type=json.loads, action="append", default=[])
        parser.add_argument("--row-condition", type=parse_pair, action="append", default=[])
        parser.add_argument("--aggregate-condition", type=parse_pair, action="append", default=[])

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> AuditSpec:
        return cls(
            table=args.table,
            branch=args.branch,
            tag=args.tag,
            snapshot_id=args.snapshot_id,
            min_rows=args.min_rows,
            max_rows=args.max_rows,
            not_null=tuple(args.not_null),
            unique=tuple(tuple(key) for key in args.unique),
            accepted_values={column: tuple(values) for column, values in args.accepted_values},
            row_conditions=dict(args.row_condition),
            aggregate_conditions=dict(args.aggregate_condition),
        )


def _columns(value: object, what: str) -> tuple[str, ...]:
    """A list of column names, each bare or in backticks, none twice."""
    if not isinstance(value, (list, tuple)):
        raise InvalidSpecError(f"{what} must be a list of column names, got {type(value).__name__} {value!r}")
    for column in value:
        if not isinstance(column, str):
            raise InvalidSpecError(
                f"{what}: a column name is a string, got {type(column).__name__} {column!r}"
            )
        parse_column(column, what)
    if len(set(value)) != len(value):
        raise InvalidSpecError(f"{what} names a column twice: {list(value)!r}")
    return tuple(value)


def _keys(value: object) -> tuple[tuple[str, ...], ...]:
    """Unique keys: a list whose items are a column (a one-column key) or a list of columns."""
    if not isinstance(value, (list, tuple)):
        raise InvalidSpecError(
            "unique must be a list of keys, each a column name or a list of column names, "
            f"e.g. [['order_id'], ['customer_id', 'order_date']]; got {type(value).__name__} {value!r}"
        )
    keys = []
    for key in value:
        columns = (key,) if isinstance(key, str) else key
        if not columns:
            raise InvalidSpecError("unique: a key needs at least one column, got an empty one")
        keys.append(_columns(columns, "unique"))
    return tuple(keys)


def _accepted_values(value: object) -> dict[str, tuple[Any, ...]]:
    if not isinstance(value, Mapping):
        raise InvalidSpecError(
            "accepted_values must map a column to the values it may hold, "
            f"got {type(value).__name__} {value!r}"
        )
    accepted = {}
    for column, values in value.items():
        what = f"accepted_values[{column!r}]"
        if not isinstance(column, str):
            raise InvalidSpecError(f"accepted_values: a column name is a string, got {column!r}")
        parse_column(column, "accepted_values")
        if not isinstance(values, (list, tuple)) or not values:
            raise InvalidSpecError(f"{what} must be a non-empty list of values, got {values!r}")
        for item in values:
            if not isinstance(item, ACCEPTED_VALUE_TYPES):
                raise InvalidSpecError(
                    f"{what}: a value is a string, number or boolean (NULLs are the not_null rule's), "
                    f"got {type(item).__name__} {item!r}"
                )
        size = len(accepted_values_argument(column, values).encode())
        if size > MAX_ARGUMENT_BYTES:
            raise InvalidSpecError(
                f"{what} holds {len(values)} values, {size} bytes on spark-submit's command line, where "
                f"one argument holds at most {MAX_ARGUMENT_BYTES}: keep the values in a table and give "
                f"a row condition instead, e.g. {{'known_{column}': "
                f'"{column} IN (SELECT {column} FROM db.accepted_{column})"}}'
            )
        accepted[column] = tuple(values)
    return accepted


def accepted_values_argument(column: str, values: tuple[Any, ...] | list[Any]) -> str:
    """One column's accepted values as its ``--accepted-values`` argument: JSON ``[column, values]``."""
    return json.dumps([column, list(values)])


def _conditions(value: object, what: str) -> dict[str, str]:
    """Named boolean expressions: a plain name (the report's label), one expression each."""
    if not isinstance(value, Mapping):
        raise InvalidSpecError(
            f"{what} must map a rule name to a SQL condition, got {type(value).__name__} {value!r}"
        )
    for name, condition in value.items():
        validate_name(name, f"{what} rule name")
        validate_expression(condition, f"{what}[{name!r}]")
        validate_condition(condition, f"{what}[{name!r}]")
    return dict(value)

"""The write action: one DataFrameWriterV2 call (or SQL CTAS), its modes, partitions and options."""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from airflow_iceberg.jobs.spec.action import ActionSpec, pairs_argv, parse_pair
from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.identifiers import (
    COLUMN_PATTERN,
    CONTROL_RE,
    SQL_NAME_RE,
    parse_column,
    validate_name,
    validate_table_identifier,
)
from airflow_iceberg.jobs.spec.options import (
    check_iceberg_option_values,
    option_value,
    reject_reserved_options,
    validate_options,
)
from airflow_iceberg.jobs.spec.sources import SCHEMA_EXAMPLE, TABLE_SCHEMA, Source
from airflow_iceberg.jobs.spec.sql_text import validate_condition

#: How a write treats the table: the DataFrameWriterV2 verbs, ``overwrite`` taking a condition.
WRITE_MODES = ("create", "replace", "create_or_replace", "append", "overwrite_partitions", "overwrite")
#: The modes that create the table (and so take ``partition_by`` and ``table_properties``).
CREATE_MODES = ("create", "replace", "create_or_replace")
#: Write options with a dedicated WriteSpec field, so the job can also set what they depend on.
RESERVED_WRITE_OPTIONS = {"merge-schema": "merge_schema", "mergeschema": "merge_schema"}
#: Prefix of the write options that add an entry to the committed snapshot's summary.
SNAPSHOT_PROPERTY_PREFIX = "snapshot-property."
_TRANSFORM_RE = re.compile(
    rf"^\s*(?:(?P<unary>years|months|days|hours|identity)\s*\(\s*(?P<ucol>{COLUMN_PATTERN})\s*\)"
    rf"|(?P<binary>bucket|truncate)\s*\(\s*(?P<n>[1-9][0-9]*)\s*,\s*(?P<bcol>{COLUMN_PATTERN})\s*\)"
    rf"|(?P<col>{COLUMN_PATTERN}))\s*\Z"
)


def parse_transform(expression: str) -> tuple[str, str, int | None]:
    """Parse an Iceberg partition transform into ``(transform, column, argument)``.

    Accepted: ``col``, ``identity(col)``, ``years(col)``, ``months(col)``, ``days(col)``,
    ``hours(col)``, ``bucket(N, col)``, ``truncate(W, col)``; ``col`` bare or in backticks
    (```order date```). The column comes back unquoted.
    """
    match = _TRANSFORM_RE.match(expression) if isinstance(expression, str) else None
    if not match or CONTROL_RE.search(expression):
        raise InvalidSpecError(
            f"partition_by entry {expression!r} is not a partition transform; use a column name, "
            "years(col), months(col), days(col), hours(col), bucket(N, col) or truncate(W, col) "
            "(a column name holding spaces, dots, quotes or brackets goes in backticks)"
        )
    if match.group("col"):
        transform, column, argument = "identity", match.group("col"), None
    elif match.group("unary"):
        transform, column, argument = match.group("unary"), match.group("ucol"), None
    else:
        transform, column, argument = match.group("binary"), match.group("bcol"), int(match.group("n"))
    try:
        return transform, parse_column(column, "partition_by column"), argument
    except InvalidSpecError as error:
        raise InvalidSpecError(f"partition_by entry {expression!r}: {error}") from None


@dataclass(frozen=True)
class WriteSpec(ActionSpec):
    """One DataFrameWriterV2 call: which table, which mode, which rows, and how."""

    action: ClassVar[str] = "write"
    mode: str
    source: Source
    partition_by: tuple[str, ...] = ()
    table_properties: dict[str, str] = field(default_factory=dict)
    write_options: dict[str, str] = field(default_factory=dict)
    condition: str | None = None
    merge_schema: bool = False
    #: Write to this branch instead of ``main`` (created from ``main``'s current snapshot when missing).
    branch: str | None = None
    #: Point ``branch`` at ``main``'s current snapshot before writing, dropping what it held.
    reset_branch: bool = False
    #: Every source row must satisfy ``condition`` (an overwrite of one partition, by its key):
    #: a row outside it fails the write before any file is written, instead of landing elsewhere.
    source_within_condition: bool = False

    def validated(self) -> WriteSpec:
        """Return a copy with normalised options, or raise :class:`InvalidSpecError` naming the field."""
        validate_table_identifier(self.table)
        if self.mode not in WRITE_MODES:
            raise InvalidSpecError(f"mode must be one of {', '.join(WRITE_MODES)}, got {self.mode!r}")
        for expression in self.partition_by:
            parse_transform(expression)
        if self.partition_by and self.mode not in CREATE_MODES:
            raise InvalidSpecError(
                f"partition_by applies when a table is created ({', '.join(CREATE_MODES)}), "
                f"not in mode {self.mode!r}"
            )
        if self.table_properties and self.mode not in CREATE_MODES:
            raise InvalidSpecError(
                f"table_properties apply when a table is created ({', '.join(CREATE_MODES)}), "
                f"not in mode {self.mode!r}"
            )
        self._check_condition()
        if self.branch is not None:
            self._check_branch()
        elif self.reset_branch:
            raise InvalidSpecError("reset_branch needs branch: it starts that branch afresh from main")
        if self.mode == "create" and (self.source.schema or "").strip().lower() == TABLE_SCHEMA:
            raise InvalidSpecError(
                "source_schema 'table' needs an existing table, and mode 'create' makes a new one: "
                f"give the columns instead, e.g. source_schema={SCHEMA_EXAMPLE}"
            )
        write_options = validate_options(self.write_options, "write option")
        self._check_write_options(write_options)
        return dataclasses.replace(
            self,
            source=self.source.validated(),
            partition_by=tuple(self.partition_by),
            table_properties=validate_options(self.table_properties, "table property"),
            write_options=write_options,
        )

    def _check_condition(self) -> None:
        if (self.mode == "overwrite") != (self.condition is not None):
            raise InvalidSpecError("condition is required by mode 'overwrite' and only allowed there")
        if self.condition is not None:
            validate_condition(self.condition)
        elif self.source_within_condition:
            raise InvalidSpecError("source_within_condition needs the condition of mode 'overwrite'")

    def _check_branch(self) -> None:
        validate_name(self.branch, "branch")
        if self.mode in CREATE_MODES:
            raise InvalidSpecError(
                f"branch applies to writes into an existing table, not to mode {self.mode!r}: create the "
                "table on main first"
            )
        if self.branch == "main":
            raise InvalidSpecError("branch 'main' is the table itself: leave branch unset to write to main")

    @property
    def created_with_sql(self) -> bool:
        """Whether the job must create the table with SQL CTAS rather than ``DataFrameWriterV2``.

        Only SQL can express ``truncate(W, col)``. And ``partitionedBy`` re-parses each column's
        name unquoted (Spark 3.5), so a partition column that is not a plain name
        (``order-date``, ``Région``) fails there; in SQL the job quotes it.
        """
        parsed = [parse_transform(expression) for expression in self.partition_by]
        return self.mode in CREATE_MODES and any(
            transform == "truncate" or not SQL_NAME_RE.match(column) for transform, column, _ in parsed
        )

    def _check_write_options(self, options: Mapping[str, str]) -> None:
        """Reject write options that would be ignored or that contradict the spec, naming the fix."""
        reject_reserved_options(options, RESERVED_WRITE_OPTIONS, "write option")
        check_iceberg_option_values(options, "write option")
        if option_value(options, "validate-from-snapshot-id") is not None and not option_value(
            options, "isolation-level"
        ):
            raise InvalidSpecError("write option 'validate-from-snapshot-id' needs 'isolation-level' as well")
        if self.created_with_sql:
            ignored = [key for key in options if not key.lower().startswith(SNAPSHOT_PROPERTY_PREFIX)]
            if ignored:
                raise InvalidSpecError(
                    f"write options {', '.join(ignored)} cannot be used with a truncate(W, col) partition "
                    "or a partition column that is not a plain name (letters, digits, '_'): "
                    "such a table is created with SQL CREATE TABLE AS SELECT, which takes no write options. "
                    "Set the matching table property instead (e.g. write.format.default for write-format)"
                )

    def to_argv(self) -> list[str]:
        argv = [*super().to_argv(), "--mode", self.mode, *self.source.to_argv()]
        for expression in self.partition_by:
            argv += ["--partition-by", expression]
        argv += pairs_argv("--table-property", self.table_properties)
        argv += pairs_argv("--write-option", self.write_options)
        if self.condition is not None:
            argv += ["--condition", self.condition]
        if self.merge_schema:
            argv += ["--merge-schema"]
        if self.branch is not None:
            argv += ["--branch", self.branch]
        if self.reset_branch:
            argv += ["--reset-branch"]
        if self.source_within_condition:
            argv += ["--source-within-condition"]
        return argv

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        ActionSpec.add_arguments(parser)
        parser.add_argument("--mode", required=True, choices=WRITE_MODES)
        Source.add_arguments(parser)
        parser.add_argument("--partition-by", action="append", default=[])
        parser.add_argument("--table-property", type=parse_pair, action="append", default=[])
        parser.add_argument("--write-option", type=parse_pair, action="append", default=[])
        parser.add_argument("--condition")
        parser.add_argument("--merge-schema", action="store_true")
        parser.add_argument("--branch")
        parser.add_argument("--reset-branch", action="store_true")
        parser.add_argument("--source-within-condition", action="store_true")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> WriteSpec:
        return cls(
            table=args.table,
            mode=args.mode,
            source=Source.from_args(args),
            partition_by=tuple(args.partition_by),
            table_properties=dict(args.table_property),
            write_options=dict(args.write_option),
            condition=args.condition,
            merge_schema=args.merge_schema,
            branch=args.branch,
            reset_branch=args.reset_branch,
            source_within_condition=args.source_within_condition,
        )

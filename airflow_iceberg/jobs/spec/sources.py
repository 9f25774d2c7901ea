"""Where the rows of a write or a merge come from: a query, a table, or files (with their schema)."""

from __future__ import annotations

import argparse
import dataclasses
import re
from dataclasses import dataclass, field

from airflow_iceberg.jobs.spec.action import pairs_argv, parse_pair, require_one
from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.identifiers import validate_table_identifier
from airflow_iceberg.jobs.spec.options import validate_options
from airflow_iceberg.jobs.spec.sql_text import validate_query

#: File formats a source or a read's sink may be in.
FILE_FORMATS = ("parquet", "csv", "json", "orc", "avro", "text")


@dataclass(frozen=True)
class Source:
    """Where the rows of a write come from: a query, a table, or files.

    ``schema`` applies to files only: the columns to read them with, as Spark DDL
    (``"order_id INT, order_date DATE"``), or :data:`TABLE_SCHEMA` for the written table's own
    schema. Without it Spark infers one, and its JSON and CSV readers never infer a date.
    """

    query: str | None = None
    table: str | None = None
    path: str | None = None
    format: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    schema: str | None = None

    def validated(self) -> Source:
        kind = require_one(
            {"source_query": self.query, "source_table": self.table, "source_path": self.path},
            "source", allow_none=False,
        )
        if kind == "source_query":
            validate_query(self.query or "")
        elif kind == "source_table":
            validate_table_identifier(self.table or "", "source table")
        else:
            if self.format not in FILE_FORMATS:
                raise InvalidSpecError(
                    f"source_format must be one of {', '.join(FILE_FORMATS)}, got {self.format!r}"
                )
        if self.options and kind != "source_path":
            raise InvalidSpecError("source_options apply only to a file source (source_path)")
        if self.schema is not None:
            if kind != "source_path":
                raise InvalidSpecError("source_schema applies only to a file source (source_path)")
            validate_source_schema(self.schema)
        return dataclasses.replace(self, options=validate_options(self.options, "source option"))

    def to_argv(self) -> list[str]:
        """The flags of the one source that is set (a query, a table, or files and how to read them)."""
        if self.query is not None:
            return ["--source-query", self.query]
        if self.table is not None:
            return ["--source-table", self.table]
        schema = ["--source-schema", self.schema] if self.schema is not None else []
        return ["--source-path", str(self.path), "--source-format", str(self.format),
                *pairs_argv("--source-option", self.options), *schema]

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        for flag in ("--source-query", "--source-table", "--source-path", "--source-format"):
            parser.add_argument(flag)
        parser.add_argument("--source-option", type=parse_pair, action="append", default=[])
        parser.add_argument("--source-schema")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Source:
        return cls(query=args.source_query, table=args.source_table, path=args.source_path,
                   format=args.source_format, options=dict(args.source_option), schema=args.source_schema)


#: ``source_schema`` value that reads the files with the schema of the table being written.
TABLE_SCHEMA = "table"

#: The first word of every Spark SQL data type (``DECIMAL(10,2)``, ``ARRAY<INT>``, ``STRUCT<…>``).
SPARK_TYPE_WORDS = frozenset(
    [
        "boolean", "tinyint", "byte", "smallint", "short", "int", "integer", "bigint", "long", "float",
        "real", "double", "date", "timestamp", "timestamp_ntz", "timestamp_ltz", "string", "char",
        "varchar", "binary", "decimal", "dec", "numeric", "array", "map", "struct", "interval", "void",
    ]
)

_SCHEMA_COLUMN_RE = re.compile(r"^\s*(`(?:[^`]|``)+`|[A-Za-z_][A-Za-z0-9_]*)\s*:?\s+([A-Za-z_]+)(.*)$", re.S)
#: The form of a ``source_schema``, shown in every message about one.
SCHEMA_EXAMPLE = '"order_id INT, order_date DATE, amount DECIMAL(10,2)"'


def validate_source_schema(schema: str) -> str:
    """Check ``source_schema`` before Spark starts: ``table``, or ``name TYPE`` pairs, comma-separated.

    Spark's own DDL parser reads it in the job; this catches the mistakes a person makes (a
    missing or misspelt type, a stray ``;``) with a message that shows the right form.
    """
    if schema.strip().lower() == TABLE_SCHEMA:
        return schema
    if any(marker in schema for marker in (";", "--", "/*", "'", '"')):
        raise InvalidSpecError(
            f"source_schema {schema!r} must be column definitions only, e.g. {SCHEMA_EXAMPLE}"
        )
    columns = [part for part in _split_top_level(schema) if part.strip()]
    if not columns:
        raise InvalidSpecError(
            f"source_schema is empty: give the columns, e.g. {SCHEMA_EXAMPLE}, "
            "or 'table' for the table's schema"
        )
    for column in columns:
        match = _SCHEMA_COLUMN_RE.match(column)
        if match is None or match.group(2).lower() not in SPARK_TYPE_WORDS:
            raise InvalidSpecError(
                f"source_schema column {column.strip()!r} is not 'name TYPE' with a Spark SQL type "
                f"(INT, BIGINT, STRING, DATE, TIMESTAMP, DECIMAL(p,s), ...), e.g. {SCHEMA_EXAMPLE}"
            )
    return schema


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside ``(...)``, ``<...>`` and backticks: ``a DECIMAL(10,2), b MAP<INT,INT>``."""
    parts, depth, quoted, current = [], 0, False, []
    for char in text:
        if char == "`":
            quoted = not quoted
        elif not quoted and char in "(<":
            depth += 1
        elif not quoted and char in ")>":
            depth -= 1
        elif not quoted and depth == 0 and char == ",":
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    return [*parts, "".join(current)]

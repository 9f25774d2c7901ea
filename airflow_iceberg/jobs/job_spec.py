"""The contract between the operators (Airflow side) and the PySpark job (cluster side).

The operators build a :class:`WriteSpec` or :class:`ReadSpec`, turn it into spark-submit application
arguments with ``to_argv()``, and the job parses them back with :func:`parse_argv`. Keeping both
directions in one module means the argv format cannot drift between the two sides.

The operators import it while Airflow parses DAGs, and it ships to the Spark driver in the job
archive, so it imports only the standard library: no Airflow, no pyspark.

Every identifier, transform and option key is validated here, before Spark starts, so that a
typo or an injection attempt fails fast with a message that names the field. Table and column
names are parsed here too (:func:`split_identifier`), by the operators and by the job alike, and
the job quotes every part it puts into SQL (:func:`quote_identifier`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    from airflow_iceberg.jobs.action_specs import ActionSpec


class InvalidSpecError(ValueError):
    """A job specification is invalid; the message names the offending field.

    Defined here rather than in ``airflow_iceberg.exceptions`` because this module runs on the
    cluster without the rest of the package; ``airflow_iceberg.exceptions`` re-exports it.
    """

WRITE_MODES = ("create", "replace", "create_or_replace", "append", "overwrite_partitions", "overwrite")
CREATE_MODES = ("create", "replace", "create_or_replace")
FILE_FORMATS = ("parquet", "csv", "json", "orc", "avro", "text")
SINK_MODES = ("create", "replace", "create_or_replace", "append", "overwrite_partitions")
PATH_SINK_MODES = ("error", "overwrite", "append", "ignore")
#: File formats Iceberg itself writes (the ``write-format`` write option).
ICEBERG_WRITE_FORMATS = ("parquet", "avro", "orc")
ISOLATION_LEVELS = ("serializable", "snapshot")
#: Read options that choose *which* data is read. They are ReadSpec fields, never ``read_options``,
#: so that the "at most one selector" rule cannot be bypassed (Spark option keys are case-insensitive).
SELECTOR_READ_OPTIONS = {
    "snapshot-id": "snapshot_id",
    "as-of-timestamp": "as_of_timestamp",
    "branch": "branch",
    "tag": "tag",
    "start-snapshot-id": "start_snapshot_id",
    "end-snapshot-id": "end_snapshot_id",
    "stream-from-timestamp": "stream_from_timestamp",
    "versionasof": "snapshot_id",
    "timestampasof": "as_of_timestamp",
    "start-timestamp": "start_snapshot_id",
    "end-timestamp": "end_snapshot_id",
}
#: Write options with a dedicated WriteSpec field, so the job can also set what they depend on.
RESERVED_WRITE_OPTIONS = {"merge-schema": "merge_schema", "mergeschema": "merge_schema"}
#: Iceberg option values Iceberg parses as numbers or booleans: checked here so a typo fails before
#: Spark starts, instead of as a NumberFormatException (or, for booleans, silently as ``false``).
_INTEGER_OPTIONS = frozenset({
    "split-size", "lookback", "file-open-cost", "batch-size", "streaming-max-files-per-micro-batch",
    "streaming-max-rows-per-micro-batch", "target-file-size-bytes", "validate-from-snapshot-id",
})
_BOOLEAN_OPTIONS = frozenset({
    "vectorization-enabled", "streaming-skip-delete-snapshots", "streaming-skip-overwrite-snapshots",
    "locality", "check-nullability", "fanout-enabled", "check-ordering",
})
_CHOICE_OPTIONS = {"write-format": ICEBERG_WRITE_FORMATS, "isolation-level": ISOLATION_LEVELS}
#: Prefix of the write options that add an entry to the committed snapshot's summary.
SNAPSHOT_PROPERTY_PREFIX = "snapshot-property."

#: Snapshot-summary key that tags each commit with the id of the operator run that made it.
COMMIT_ID_PROPERTY = "airflow-iceberg.commit-id"

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
#: A plain SQL name: catalog, branch and tag names must be one (a catalog name is a Spark conf key).
SQL_NAME_RE = re.compile(rf"^{_NAME}\Z")
#: A Spark option or catalog property key.
PROPERTY_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*\Z")
#: Control characters (C0, DEL, C1): never part of a name, quoted or not.
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: Characters a name part may only hold inside backticks (whitespace is checked apart).
_QUOTE_ONLY_CHARS = frozenset(".`'\";(),")
#: A name written in a partition transform or a sort order: a backtick-quoted part or a bare one.
_COLUMN = r"`(?:[^`]|``)+`|[^\s.`'\";(),]+"
_TRANSFORM_RE = re.compile(
    rf"^\s*(?:(?P<unary>years|months|days|hours|identity)\s*\(\s*(?P<ucol>{_COLUMN})\s*\)"
    rf"|(?P<binary>bucket|truncate)\s*\(\s*(?P<n>[1-9][0-9]*)\s*,\s*(?P<bcol>{_COLUMN})\s*\)"
    rf"|(?P<col>{_COLUMN}))\s*\Z"
)
_QUERY_START_RE = re.compile(r"^\s*\(*\s*(SELECT|WITH|VALUES|FROM|TABLE)\b", re.IGNORECASE)
#: Statements Spark's grammar accepts after a ``WITH`` or ``FROM`` clause, so after a query's start.
_STATEMENT_RE = re.compile(
    r"\b(?:INSERT\s+(?:INTO|OVERWRITE)|DELETE\s+FROM|MERGE\s+INTO|UPDATE\s+\S+.*?\bSET"
    r"|(?:UN)?CACHE\s+(?:LAZY\s+)?TABLE)\b",
    re.IGNORECASE | re.DOTALL,
)
_COMMENT_RE = re.compile(r"--[^\n]*|/\*.*?\*/", re.DOTALL)


def validate_name(value: str, what: str) -> str:
    """Return ``value`` if it is a plain SQL name (letters, digits, underscores), else raise.

    Plain names need no quoting, so nothing a user types can escape into SQL.
    """
    if not isinstance(value, str) or not SQL_NAME_RE.match(value):
        raise InvalidSpecError(
            f"{what} {value!r} is not a valid name: use letters, digits and underscores, "
            "starting with a letter or underscore"
        )
    return value


def split_identifier(text: str, what: str = "table") -> tuple[str, ...]:
    """Split a dotted identifier into its parts, the way Spark reads a multipart identifier.

    A part is written bare (``sales-eu``, ``Orders``, ``commandes_été``) or in backticks, where a
    doubled backtick stands for one (```my.ns``` is one part holding a dot). A bare part may not
    hold whitespace, dots, backticks, quotes, ``;``, ``(``, ``)``, ``,``, ``--`` or ``/*``: such
    a name must be written in backticks, so a typo or an injection attempt fails here instead of
    being taken as a name. Control characters and empty parts are refused either way. The parts
    come back unquoted; :func:`quote_identifier` quotes every one of them for SQL.
    """
    if not isinstance(text, str) or not text:
        raise InvalidSpecError(f"{what} identifier must be a non-empty string, got {text!r}")
    if _CONTROL_RE.search(text):
        raise InvalidSpecError(
            f"{what} identifier {text!r} has an invalid part: it holds a control character"
        )
    parts: list[str] = []
    position = 0
    while True:
        if text.startswith("`", position):
            part, position = _quoted_part(text, position, what)
        else:
            end = text.find(".", position)
            end = len(text) if end < 0 else end
            part, position = text[position:end], end
            _check_bare_part(text, part, what)
        if not part:
            raise InvalidSpecError(f"{what} identifier {text!r} has an invalid part: an empty part")
        parts.append(part)
        if position == len(text):
            return tuple(parts)
        if text[position] != ".":
            raise InvalidSpecError(
                f"{what} identifier {text!r} has an invalid part: a '.' must follow the backtick-quoted "
                f"part {part!r}"
            )
        position += 1
        if position == len(text):
            raise InvalidSpecError(f"{what} identifier {text!r} has an invalid part: an empty part")


def _quoted_part(text: str, start: int, what: str) -> tuple[str, int]:
    """The part in backticks at ``start`` (a doubled backtick is one) and the position after it."""
    pieces, position = [], start + 1
    while True:
        end = text.find("`", position)
        if end < 0:
            raise InvalidSpecError(
                f"{what} identifier {text!r} has an invalid part: a backtick is not closed"
            )
        pieces.append(text[position:end])
        if not text.startswith("``", end):
            return "".join(pieces), end + 1
        pieces.append("`")
        position = end + 2


def _check_bare_part(text: str, part: str, what: str) -> None:
    odd = sorted({c for c in part if c in _QUOTE_ONLY_CHARS or c.isspace()})
    odd += [marker for marker in ("--", "/*") if marker in part]
    if odd:
        shown = ", ".join(repr(c) if not c.isspace() else "whitespace" for c in dict.fromkeys(odd))
        raise InvalidSpecError(
            f"{what} identifier {text!r} has an invalid part {part!r}: {shown} may only appear in a "
            "part written in backticks, e.g. db.`my part` (a backtick inside is doubled)"
        )


def quote_name(name: str) -> str:
    """One name in backticks, an inner backtick doubled: Spark's rule, so nothing in it is SQL."""
    return "`" + name.replace("`", "``") + "`"


def quote_identifier(identifier: str | Sequence[str]) -> str:
    """Every part of ``identifier`` (a dotted text, or its parts) quoted: ```cat`.`sales-eu`.`Orders```.

    Quoting a quoted identifier gives it back unchanged, so the job can quote wherever a name
    reaches SQL or a Spark API that parses identifiers (``spark.table``, ``writeTo``, ...).
    """
    parts = split_identifier(identifier) if isinstance(identifier, str) else tuple(identifier)
    return ".".join(quote_name(part) for part in parts)


def validate_table_identifier(identifier: str, what: str = "table") -> str:
    """Check a ``[catalog.]namespace[.namespace...].table`` identifier and return it unchanged.

    See :func:`split_identifier` for what a part may hold. The job never splices the text as
    written into SQL: it quotes every part (:func:`quote_identifier`).
    """
    parts = split_identifier(identifier, what)
    if len(parts) < 2:
        raise InvalidSpecError(
            f"{what} identifier {identifier!r} needs at least a namespace and a table name, "
            "for example 'db.orders' or 'my_catalog.db.orders'"
        )
    return identifier


def parse_column(text: str, what: str = "column") -> str:
    """The column name ``text`` stands for: one part, bare or in backticks (see :func:`split_identifier`).

    Nested fields are not addressed: ``a.b`` is refused (write ```a.b``` for a column whose name
    holds a dot).
    """
    parts = split_identifier(text, what)
    if len(parts) != 1:
        raise InvalidSpecError(
            f"{what} identifier {text!r} has an invalid part: a column name is one part; write a name "
            f"holding a dot in backticks, e.g. {quote_name(text)}"
        )
    return parts[0]


def quote_column(text: str, what: str = "column") -> str:
    """The column ``text`` names, quoted for SQL and for ``F.col``: ``order-date`` -> ```order-date```."""
    return quote_name(parse_column(text, what))


def parse_transform(expression: str) -> tuple[str, str, int | None]:
    """Parse an Iceberg partition transform into ``(transform, column, argument)``.

    Accepted: ``col``, ``identity(col)``, ``years(col)``, ``months(col)``, ``days(col)``,
    ``hours(col)``, ``bucket(N, col)``, ``truncate(W, col)``; ``col`` bare or in backticks
    (```order date```). The column comes back unquoted.
    """
    match = _TRANSFORM_RE.match(expression) if isinstance(expression, str) else None
    if not match or _CONTROL_RE.search(expression):
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


def validate_options(options: Mapping[str, object] | None, what: str) -> dict[str, str]:
    """Return the options as a ``str -> str`` dict with validated keys.

    Values are passed to Spark as data (``.option(k, v)``), never spliced into SQL, so only keys
    need checking. Booleans become ``true``/``false`` the way Spark expects them.
    """
    result: dict[str, str] = {}
    for key, value in (options or {}).items():
        if not isinstance(key, str) or not PROPERTY_KEY_RE.match(key):
            raise InvalidSpecError(f"{what} key {key!r} is not valid: use letters, digits, '.', '-' and '_'")
        if value is None:
            raise InvalidSpecError(f"{what} {key!r} has no value")
        result[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return result


def check_iceberg_option_values(options: Mapping[str, str], what: str) -> None:
    """Check the values of the Iceberg read/write options whose type is known.

    Iceberg reads numbers with ``Long.parseLong`` (a typo becomes a Java stack trace mid-job) and
    booleans with ``Boolean.parseBoolean`` (a typo silently becomes ``false``), so both are
    checked here, with a message that names the option.
    """
    for key, value in options.items():
        name = key.lower()
        if name in _INTEGER_OPTIONS and not re.fullmatch(r"[0-9]+", value):
            raise InvalidSpecError(f"{what} {key!r} must be a non-negative integer, got {value!r}")
        if name in _BOOLEAN_OPTIONS and value.lower() not in ("true", "false"):
            raise InvalidSpecError(f"{what} {key!r} must be 'true' or 'false', got {value!r}")
        if name in _CHOICE_OPTIONS and value.lower() not in _CHOICE_OPTIONS[name]:
            choices = ", ".join(_CHOICE_OPTIONS[name])
            raise InvalidSpecError(f"{what} {key!r} must be one of {choices}, got {value!r}")


def option_value(options: Mapping[str, str], key: str) -> str | None:
    """Look an option up the way Spark does: option keys are case-insensitive."""
    for name, value in options.items():
        if name.lower() == key:
            return value
    return None


def _reject_reserved_options(options: Mapping[str, str], reserved: Mapping[str, str], what: str) -> None:
    for key in options:
        if key.lower() in reserved:
            field_name = reserved[key.lower()]
            raise InvalidSpecError(f"{what} {key!r} is not allowed here: use the {field_name!r} field")


def validate_query(query: str, what: str = "source query") -> str:
    """Refuse, before Spark starts, text that is plainly not one read-only query.

    A cheap first check, not the only one: the job has Spark's own parser refuse anything that is
    not a query (``airflow_iceberg.jobs.user_sql``) before it runs. Here: the text must start like
    a query, hold one statement, and hold none of the data-changing statements Spark's grammar
    accepts after a ``WITH`` or ``FROM`` clause (``WITH x AS (...) DELETE FROM t``).
    """
    if not isinstance(query, str) or not _QUERY_START_RE.match(_strip_leading_comments(query)):
        raise InvalidSpecError(f"{what} must be a query starting with SELECT, WITH, VALUES, FROM or TABLE")
    if _has_statement_separator(query):
        raise InvalidSpecError(f"{what} must be a single statement: remove the ';'")
    _refuse_statements(query, what)
    return query


def _refuse_statements(sql: str, what: str) -> None:
    found = _STATEMENT_RE.search(_COMMENT_RE.sub(" ", _outside_literals(sql)))
    if found:
        words = found.group(0).upper().split()
        statement = "UPDATE ... SET" if words[0] == "UPDATE" else " ".join(words)
        raise InvalidSpecError(
            f"{what} must only read, but it holds {statement!r}, a statement that changes data "
            "(Spark runs one even after WITH ... or FROM ...)"
        )


def validate_condition(condition: str, what: str = "overwrite condition") -> str:
    """Check an overwrite condition: one boolean SQL expression, no statement separators or comments."""
    if not isinstance(condition, str) or not condition.strip():
        raise InvalidSpecError(
            "overwrite mode needs a non-empty condition, for example \"day = '2024-01-01'\""
        )
    if _has_statement_separator(condition) or _has_comment(condition):
        raise InvalidSpecError(
            f"{what} {condition!r} must be a single expression without ';' or SQL comments"
        )
    _refuse_statements(condition, what)
    return condition


def _strip_leading_comments(sql: str) -> str:
    text = sql.lstrip()
    while text.startswith(("--", "/*")):
        if text.startswith("--"):
            newline = text.find("\n")
            text = "" if newline < 0 else text[newline + 1 :].lstrip()
        else:
            end = text.find("*/")
            text = "" if end < 0 else text[end + 2 :].lstrip()
    return text


def _outside_literals(sql: str) -> str:
    """Return ``sql`` with the contents of quoted literals and quoted identifiers blanked out."""
    return re.sub(r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.)*\"|`[^`]*`", "''", sql)


def _has_statement_separator(sql: str) -> bool:
    return ";" in _outside_literals(sql)


def _has_comment(sql: str) -> bool:
    bare = _outside_literals(sql)
    return "--" in bare or "/*" in bare


def _require_one(values: Mapping[str, object], what: str, *, allow_none: bool) -> str | None:
    chosen = [name for name, value in values.items() if value not in (None, "")]
    if len(chosen) > 1:
        raise InvalidSpecError(f"{what}: give exactly one of {', '.join(values)}; got {', '.join(chosen)}")
    if not chosen and not allow_none:
        raise InvalidSpecError(f"{what}: give one of {', '.join(values)}")
    return chosen[0] if chosen else None


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
        kind = _require_one(
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
_SCHEMA_EXAMPLE = '"order_id INT, order_date DATE, amount DECIMAL(10,2)"'


def validate_source_schema(schema: str) -> str:
    """Check ``source_schema`` before Spark starts: ``table``, or ``name TYPE`` pairs, comma-separated.

    Spark's own DDL parser reads it in the job; this catches the mistakes a person makes (a
    missing or misspelt type, a stray ``;``) with a message that shows the right form.
    """
    if schema.strip().lower() == TABLE_SCHEMA:
        return schema
    if any(marker in schema for marker in (";", "--", "/*", "'", '"')):
        raise InvalidSpecError(
            f"source_schema {schema!r} must be column definitions only, e.g. {_SCHEMA_EXAMPLE}"
        )
    columns = [part for part in _split_top_level(schema) if part.strip()]
    if not columns:
        raise InvalidSpecError(
            f"source_schema is empty: give the columns, e.g. {_SCHEMA_EXAMPLE}, "
            "or 'table' for the table's schema"
        )
    for column in columns:
        match = _SCHEMA_COLUMN_RE.match(column)
        if match is None or match.group(2).lower() not in SPARK_TYPE_WORDS:
            raise InvalidSpecError(
                f"source_schema column {column.strip()!r} is not 'name TYPE' with a Spark SQL type "
                f"(INT, BIGINT, STRING, DATE, TIMESTAMP, DECIMAL(p,s), ...), e.g. {_SCHEMA_EXAMPLE}"
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


@dataclass(frozen=True)
class WriteSpec:
    """One DataFrameWriterV2 call: which table, which mode, which rows, and how."""

    table: str
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
        if (self.mode == "overwrite") != (self.condition is not None):
            raise InvalidSpecError("condition is required by mode 'overwrite' and only allowed there")
        if self.condition is not None:
            validate_condition(self.condition)
        if self.branch is not None:
            self._check_branch()
        elif self.reset_branch:
            raise InvalidSpecError("reset_branch needs branch: it starts that branch afresh from main")
        if self.mode == "create" and (self.source.schema or "").strip().lower() == TABLE_SCHEMA:
            raise InvalidSpecError(
                "source_schema 'table' needs an existing table, and mode 'create' makes a new one: "
                f"give the columns instead, e.g. source_schema={_SCHEMA_EXAMPLE}"
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
        _reject_reserved_options(options, RESERVED_WRITE_OPTIONS, "write option")
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
        argv = ["write", "--table", self.table, "--mode", self.mode]
        argv += _source_argv(self.source)
        for expression in self.partition_by:
            argv += ["--partition-by", expression]
        argv += _pairs_argv("--table-property", self.table_properties)
        argv += _pairs_argv("--write-option", self.write_options)
        if self.condition is not None:
            argv += ["--condition", self.condition]
        if self.merge_schema:
            argv += ["--merge-schema"]
        if self.branch is not None:
            argv += ["--branch", self.branch]
        if self.reset_branch:
            argv += ["--reset-branch"]
        return argv


@dataclass(frozen=True)
class ReadSpec:
    """One read of an Iceberg table plus where its rows go.

    What is read is chosen by at most one selector: a time-travel selector (``snapshot_id``,
    ``as_of_timestamp``, ``branch``, ``tag``), an incremental range (``start_snapshot_id``,
    optionally ``end_snapshot_id``: the rows appended after the start, up to and including the
    end), or ``stream_from_timestamp`` (a bounded Structured Streaming read that resumes from
    ``checkpoint_location`` on every run). With none, the current snapshot is read.
    """

    table: str
    snapshot_id: int | None = None
    as_of_timestamp: int | None = None
    branch: str | None = None
    tag: str | None = None
    read_options: dict[str, str] = field(default_factory=dict)
    columns: tuple[str, ...] = ()
    filter: str | None = None
    sink_table: str | None = None
    sink_mode: str = "create_or_replace"
    sink_path: str | None = None
    sink_format: str = "parquet"
    sink_path_mode: str = "error"
    preview_rows: int = 0
    start_snapshot_id: int | None = None
    end_snapshot_id: int | None = None
    stream_from_timestamp: int | None = None
    checkpoint_location: str | None = None

    @property
    def selector(self) -> str | None:
        """Which selector is set, if any; raises when more than one is."""
        return _require_one(
            {"snapshot_id": self.snapshot_id, "as_of_timestamp": self.as_of_timestamp,
             "branch": self.branch, "tag": self.tag, "start_snapshot_id": self.start_snapshot_id,
             "stream_from_timestamp": self.stream_from_timestamp},
            "time travel", allow_none=True,
        )

    @property
    def is_stream(self) -> bool:
        return self.stream_from_timestamp is not None

    def validated(self) -> ReadSpec:
        """Return a copy with normalised options, or raise :class:`InvalidSpecError` naming the field."""
        validate_table_identifier(self.table)
        self._check_selectors()
        for column in self.columns:
            parse_column(column, "column")
        if self.filter is not None:
            validate_condition(self.filter, "filter")
        self._check_sink()
        if self.is_stream:
            self._check_stream()
        elif self.checkpoint_location is not None:
            raise InvalidSpecError("checkpoint_location applies only to a stream (stream_from_timestamp)")
        read_options = validate_options(self.read_options, "read option")
        _reject_reserved_options(read_options, SELECTOR_READ_OPTIONS, "read option")
        check_iceberg_option_values(read_options, "read option")
        return dataclasses.replace(self, columns=tuple(self.columns), read_options=read_options)

    def _check_selectors(self) -> None:
        self.selector  # noqa: B018 - raises when two selectors are given
        for name in ("snapshot_id", "as_of_timestamp", "start_snapshot_id", "end_snapshot_id",
                     "stream_from_timestamp"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise InvalidSpecError(f"{name} must be a non-negative integer, got {value!r}")
        for name in ("branch", "tag"):
            if getattr(self, name) is not None:
                validate_name(getattr(self, name), name)
        if self.end_snapshot_id is not None and self.start_snapshot_id is None:
            raise InvalidSpecError("end_snapshot_id needs start_snapshot_id: an incremental read is a range")

    def _check_sink(self) -> None:
        _require_one({"sink_table": self.sink_table, "sink_path": self.sink_path}, "sink", allow_none=True)
        if self.sink_table is not None:
            validate_table_identifier(self.sink_table, "sink table")
        if self.sink_mode not in SINK_MODES:
            raise InvalidSpecError(
                f"sink_mode must be one of {', '.join(SINK_MODES)}, got {self.sink_mode!r}"
            )
        if self.sink_format not in FILE_FORMATS:
            raise InvalidSpecError(
                f"sink_format must be one of {', '.join(FILE_FORMATS)}, got {self.sink_format!r}"
            )
        if self.sink_path_mode not in PATH_SINK_MODES:
            raise InvalidSpecError(
                f"sink_path_mode must be one of {', '.join(PATH_SINK_MODES)}, got {self.sink_path_mode!r}"
            )
        rows = self.preview_rows
        if isinstance(rows, bool) or not isinstance(rows, int) or not 0 <= rows <= 1000:
            raise InvalidSpecError(f"preview_rows must be an integer from 0 to 1000, got {rows!r}")

    def _check_stream(self) -> None:
        """A stream only appends, and only its checkpoint says where the previous run stopped."""
        if not self.checkpoint_location or not isinstance(self.checkpoint_location, str):
            raise InvalidSpecError("a stream (stream_from_timestamp) needs a checkpoint_location")
        if not (self.sink_table or self.sink_path):
            raise InvalidSpecError("a stream (stream_from_timestamp) needs a sink: sink_table or sink_path")
        if self.sink_table and self.sink_mode != "append":
            raise InvalidSpecError(
                f"a stream appends to its sink table: set sink_mode='append', not {self.sink_mode!r}"
            )
        if self.sink_path and self.sink_path_mode != "append":
            raise InvalidSpecError(
                "a stream appends to its sink files: set sink_path_mode='append', "
                f"not {self.sink_path_mode!r}"
            )
        if self.preview_rows:
            raise InvalidSpecError("preview_rows is not available for a stream (stream_from_timestamp)")

    def to_argv(self) -> list[str]:
        argv = ["read", "--table", self.table]
        for flag, value in (("--snapshot-id", self.snapshot_id), ("--as-of-timestamp", self.as_of_timestamp),
                            ("--branch", self.branch), ("--tag", self.tag),
                            ("--start-snapshot-id", self.start_snapshot_id),
                            ("--end-snapshot-id", self.end_snapshot_id),
                            ("--stream-from-timestamp", self.stream_from_timestamp),
                            ("--checkpoint-location", self.checkpoint_location), ("--filter", self.filter)):
            if value is not None:
                argv += [flag, str(value)]
        argv += _pairs_argv("--read-option", self.read_options)
        for column in self.columns:
            argv += ["--column", column]  # one flag each: a quoted name may hold a comma
        if self.sink_table:
            argv += ["--sink-table", self.sink_table, "--sink-mode", self.sink_mode]
        if self.sink_path:
            argv += ["--sink-path", self.sink_path, "--sink-format", self.sink_format,
                     "--sink-path-mode", self.sink_path_mode]
        if self.preview_rows:
            argv += ["--preview-rows", str(self.preview_rows)]
        return argv


@dataclass(frozen=True)
class OrphanFilesSpec:
    """Iceberg's ``remove_orphan_files`` procedure: files under the table no snapshot references.

    A write that was killed before it committed leaves its data files behind; they are never
    read, but they take space until this removes them. By default (``dry_run``) it only lists
    them. ``older_than`` must be at least 24 hours ago (Iceberg's safety floor: a younger file may
    belong to a write still running) unless ``allow_recent_files`` says the user knows better.
    """

    table: str
    older_than: int | None = None  # epoch ms; Iceberg's default is three days ago
    dry_run: bool = True
    allow_recent_files: bool = False

    def validated(self) -> OrphanFilesSpec:
        from airflow_iceberg.jobs.action_specs import check_orphan_floor

        validate_table_identifier(self.table)
        if self.older_than is not None and (isinstance(self.older_than, bool) or self.older_than < 0):
            raise InvalidSpecError(f"older_than must be epoch milliseconds, got {self.older_than!r}")
        check_orphan_floor(self.older_than, self.allow_recent_files)
        return self

    def to_argv(self) -> list[str]:
        argv = ["remove-orphan-files", "--table", self.table]
        if self.older_than is not None:
            argv += ["--older-than", str(self.older_than)]
        argv += [] if self.dry_run else ["--delete"]
        return argv + (["--allow-recent-files"] if self.allow_recent_files else [])


#: What a job does. :mod:`.action_specs` holds the merge, delete, branch, tag and upkeep specs.
JobSpec = Union[WriteSpec, ReadSpec, OrphanFilesSpec, "ActionSpec"]


@dataclass(frozen=True)
class JobRequest:
    """A whole job invocation: the action's spec plus where to report and how to tag commits."""

    spec: JobSpec
    result_file: str | None = None
    commit_id: str | None = None
    commit_properties: dict[str, str] = field(default_factory=dict)
    #: When the table already has a snapshot tagged with ``commit_id``, return it instead of
    #: writing again. With a commit id derived from the Airflow task instance, a retry of a try
    #: that committed and then died commits nothing new.
    reuse_commit: bool = False
    #: A JSON file of secret Spark settings (catalog credentials), readable only by the submitting
    #: user. Only its path travels in argv; the values never do.
    secret_conf_file: str | None = None

    def to_argv(self) -> list[str]:
        argv: list[str] = []
        if self.result_file:
            argv += ["--result-file", self.result_file]
        if self.secret_conf_file:
            argv += ["--secret-conf-file", self.secret_conf_file]
        if self.commit_id:
            argv += ["--commit-id", self.commit_id]
        if self.reuse_commit:
            argv += ["--reuse-commit"]
        argv += _pairs_argv("--commit-property", self.commit_properties)
        return argv + self.spec.to_argv()


def _source_argv(source: Source) -> list[str]:
    if source.query is not None:
        return ["--source-query", source.query]
    if source.table is not None:
        return ["--source-table", source.table]
    schema = ["--source-schema", source.schema] if source.schema is not None else []
    return ["--source-path", str(source.path), "--source-format", str(source.format),
            *_pairs_argv("--source-option", source.options), *schema]


def _pairs_argv(flag: str, pairs: Mapping[str, str]) -> list[str]:
    argv: list[str] = []
    for key, value in pairs.items():
        argv += [flag, f"{key}={value}"]
    return argv


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="iceberg_job", description="Iceberg DataFrameWriterV2 / reader job")
    parser.add_argument("--result-file")
    parser.add_argument("--secret-conf-file")
    parser.add_argument("--commit-id")
    parser.add_argument("--reuse-commit", action="store_true")
    parser.add_argument("--commit-property", type=_pair, action="append", default=[])
    actions = parser.add_subparsers(dest="action", required=True)

    write = actions.add_parser("write")
    write.add_argument("--table", required=True)
    write.add_argument("--mode", required=True, choices=WRITE_MODES)
    write.add_argument("--source-query")
    write.add_argument("--source-table")
    write.add_argument("--source-path")
    write.add_argument("--source-format")
    write.add_argument("--source-option", type=_pair, action="append", default=[])
    write.add_argument("--source-schema")
    write.add_argument("--partition-by", action="append", default=[])
    write.add_argument("--table-property", type=_pair, action="append", default=[])
    write.add_argument("--write-option", type=_pair, action="append", default=[])
    write.add_argument("--condition")
    write.add_argument("--merge-schema", action="store_true")
    write.add_argument("--branch")
    write.add_argument("--reset-branch", action="store_true")

    read = actions.add_parser("read")
    read.add_argument("--table", required=True)
    read.add_argument("--snapshot-id", type=int)
    read.add_argument("--as-of-timestamp", type=int)
    read.add_argument("--branch")
    read.add_argument("--tag")
    read.add_argument("--start-snapshot-id", type=int)
    read.add_argument("--end-snapshot-id", type=int)
    read.add_argument("--stream-from-timestamp", type=int)
    read.add_argument("--checkpoint-location")
    read.add_argument("--read-option", type=_pair, action="append", default=[])
    read.add_argument("--column", action="append", default=[])
    read.add_argument("--filter")
    read.add_argument("--sink-table")
    read.add_argument("--sink-mode", default="create_or_replace")
    read.add_argument("--sink-path")
    read.add_argument("--sink-format", default="parquet")
    read.add_argument("--sink-path-mode", default="error")
    read.add_argument("--preview-rows", type=int, default=0)

    orphans = actions.add_parser("remove-orphan-files")
    orphans.add_argument("--table", required=True)
    orphans.add_argument("--older-than", type=int)
    orphans.add_argument("--delete", action="store_true")
    orphans.add_argument("--allow-recent-files", action="store_true")

    from airflow_iceberg.jobs.action_specs import ACTION_SPECS  # imports this module: not at the top

    for name, spec_class in ACTION_SPECS.items():
        spec_class.add_arguments(actions.add_parser(name))
    return parser


def parse_argv(argv: Sequence[str]) -> JobRequest:
    """Parse the job's application arguments back into a validated :class:`JobRequest`."""
    args = _build_parser().parse_args(list(argv))
    spec: JobSpec
    from airflow_iceberg.jobs.action_specs import ACTION_SPECS

    if args.action in ACTION_SPECS:
        spec = ACTION_SPECS[args.action].from_args(args)
    elif args.action == "remove-orphan-files":
        spec = OrphanFilesSpec(table=args.table, older_than=args.older_than, dry_run=not args.delete,
                               allow_recent_files=args.allow_recent_files)
    elif args.action == "write":
        spec = WriteSpec(
            table=args.table,
            mode=args.mode,
            source=Source(query=args.source_query, table=args.source_table, path=args.source_path,
                          format=args.source_format, options=dict(args.source_option),
                          schema=args.source_schema),
            partition_by=tuple(args.partition_by),
            table_properties=dict(args.table_property),
            write_options=dict(args.write_option),
            condition=args.condition,
            merge_schema=args.merge_schema,
            branch=args.branch,
            reset_branch=args.reset_branch,
        )
    else:
        spec = ReadSpec(
            table=args.table,
            snapshot_id=args.snapshot_id,
            as_of_timestamp=args.as_of_timestamp,
            branch=args.branch,
            tag=args.tag,
            read_options=dict(args.read_option),
            columns=tuple(args.column),
            filter=args.filter,
            sink_table=args.sink_table,
            sink_mode=args.sink_mode,
            sink_path=args.sink_path,
            sink_format=args.sink_format,
            sink_path_mode=args.sink_path_mode,
            preview_rows=args.preview_rows,
            start_snapshot_id=args.start_snapshot_id,
            end_snapshot_id=args.end_snapshot_id,
            stream_from_timestamp=args.stream_from_timestamp,
            checkpoint_location=args.checkpoint_location,
        )
    if args.reuse_commit and not args.commit_id:
        raise InvalidSpecError("--reuse-commit needs --commit-id, which identifies the earlier commit")
    return JobRequest(spec=spec.validated(), result_file=args.result_file, commit_id=args.commit_id,
                      commit_properties=dict(args.commit_property), reuse_commit=args.reuse_commit,
                      secret_conf_file=args.secret_conf_file)


def dump_result(result: Mapping[str, object]) -> str:
    """Serialise a job result the same way on both sides (sorted keys, plain JSON)."""
    return json.dumps(result, sort_keys=True, default=str)

"""User text that reaches ``spark.sql``: source queries, overwrite conditions, expressions.

A cheap text check before Spark starts, not the only one: the job also has Spark's own parser
read each text as a query or as one expression (:mod:`airflow_iceberg.jobs.user_sql`) before it
builds any SQL. Here the text must hold one statement or one expression, with no statement
separator and no comment outside literals, and no data-changing statement.
"""

from __future__ import annotations

import re

from airflow_iceberg.jobs.spec.errors import InvalidSpecError

_QUERY_START_RE = re.compile(r"^\s*\(*\s*(SELECT|WITH|VALUES|FROM|TABLE)\b", re.IGNORECASE)

#: Statements Spark's grammar accepts after a ``WITH`` or ``FROM`` clause, so after a query's start.
_STATEMENT_RE = re.compile(
    r"\b(?:INSERT\s+(?:INTO|OVERWRITE)|DELETE\s+FROM|MERGE\s+INTO|UPDATE\s+\S+.*?\bSET"
    r"|(?:UN)?CACHE\s+(?:LAZY\s+)?TABLE)\b",
    re.IGNORECASE | re.DOTALL,
)

_COMMENT_RE = re.compile(r"--[^\n]*|/\*.*?\*/", re.DOTALL)


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


def validate_expression(text: object, what: str) -> str:
    """Accept one SQL expression: non-empty, no ``;`` and no comments outside literals."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidSpecError(f"{what} must be a non-empty SQL expression")
    if _has_statement_separator(text) or _has_comment(text):
        raise InvalidSpecError(f"{what} {text!r} must be a single expression without ';' or SQL comments")
    return text


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

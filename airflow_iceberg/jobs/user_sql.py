"""User SQL reaches Spark only as a query or as an expression, never as a statement.

A source query, an overwrite condition and a read filter come from DAG authors, templates,
``params`` or ``dag_run.conf``. ``spark.sql()`` runs a command at once, and Spark's grammar
accepts data-changing statements that start like a query: ``WITH x AS (...) DELETE FROM t``,
``WITH s AS (...) MERGE INTO t ...``, ``FROM src INSERT OVERWRITE TABLE other SELECT *``. The
text check of :func:`~airflow_iceberg.jobs.spec.sql_text.validate_query` refuses the obvious forms
before Spark starts, but a text check cannot be the only defence. Here Spark's own parser decides:

* a query is refused when Spark parses it as a command (the class is named in the error), and
  what runs is ``SELECT * FROM (<query>) AS src``, which Spark's grammar accepts only when
  ``<query>`` is a query: a statement inside parentheses is a syntax error, never executed;
* a condition or filter becomes a Column through Spark's expression parser, whose grammar holds
  no statements (a subquery in it is a query).

Parsing executes nothing, so every refusal happens before anything is read or written.

Over Spark Connect there is no parser on the client: the server parses. A query runs only in
its wrapped form (so a statement is a syntax error there, never executed, though the error
cannot name the statement's class), and an expression is parsed in parentheses, where a
trailing alias or an added clause is a syntax error too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from airflow_iceberg.jobs import connect
from airflow_iceberg.jobs.spec.errors import InvalidSpecError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: Parsed-plan classes that change data or session state (and their common parents).
_STATEMENT_CLASSES = (
    "org.apache.spark.sql.catalyst.plans.logical.Command",
    "org.apache.spark.sql.catalyst.plans.logical.ParsedStatement",
    "org.apache.spark.sql.catalyst.plans.logical.InsertIntoDir",
)
_WITH_CLASS = "org.apache.spark.sql.catalyst.plans.logical.UnresolvedWith"


def query_frame(spark: SparkSession, query: str, what: str = "source query") -> DataFrame:
    """The DataFrame of a user's query, refusing anything Spark would run as a statement."""
    wrapped = f"SELECT * FROM (\n{query}\n) AS airflow_iceberg_source"
    if connect.is_connect(spark):
        return _connect_query(spark, wrapped, what)
    plan = _parse(spark, query, what)
    statement = _statement_class(spark, plan)
    if statement is not None:
        raise InvalidSpecError(
            f"{what} must be a query, but Spark reads it as {statement}, a statement that would "
            "change data; it was not run"
        )
    _parse(spark, wrapped, what)  # a statement inside the parentheses fails here, unexecuted
    return spark.sql(wrapped)


def check_expression(spark: SparkSession, text: str, what: str) -> None:
    """Parse ``text`` with the session's expression parser: one expression, nothing after it.

    This also refuses text that would add a clause to a statement it is spliced into
    (``t.id = s.id WHEN MATCHED THEN DELETE``), and a trailing word the parser would take as an
    alias (``id = 1 OR`` is ``(id = 1) AS OR`` to it).
    """
    if connect.is_connect(spark):
        _connect_check_expression(spark, text, what)
        return
    try:
        parsed = spark._jsparkSession.sessionState().sqlParser().parseExpression(text)
    except Exception as error:  # py4j's Py4JJavaError around Spark's ParseException
        raise InvalidSpecError(f"{what} {text!r} is not one SQL expression: {_first_line(error)}") from None
    if "Alias" in parsed.getClass().getSimpleName():
        raise InvalidSpecError(
            f"{what} {text!r} is not one SQL expression: it ends in a word Spark reads as an alias"
        )


def expression(condition: str, what: str) -> Column:
    """A Column from a user's boolean expression, parsed now (so a bad one fails before any write).

    Spark 3.5's ``F.expr`` parses at once; Spark 4's builds the Column lazily and parses it only
    when a plan uses it, so the session's own expression parser reads the text first.
    """
    spark = SparkSession.getActiveSession()
    if spark is not None:
        check_expression(spark, condition, what)
    try:
        return F.expr(condition)
    except Exception as error:  # py4j's Py4JJavaError around Spark's ParseException
        raise InvalidSpecError(
            f"{what} {condition!r} is not one SQL expression: {_first_line(error)}"
        ) from None


def _connect_query(spark: SparkSession, wrapped: str, what: str) -> DataFrame:
    """Over Spark Connect, ``spark.sql`` has the server parse (and run, were it a command) the text
    at once: only the wrapped form is ever sent, which Spark's grammar accepts only around a query."""
    from pyspark.errors import ParseException

    try:
        return spark.sql(wrapped)
    except ParseException as error:
        raise InvalidSpecError(f"{what} is not a single Spark SQL query: {_first_line(error)}") from None


def _connect_check_expression(spark: SparkSession, text: str, what: str) -> None:
    """Have the server parse ``(text)`` as an expression: a syntax error there means not one expression.

    In parentheses, a trailing alias (``id = 1 OR``) or a clause after the expression is a
    syntax error; the text alone must parse too (``a) OR (b`` parses only in parentheses). Its
    columns are not resolved (``spark.range(0)`` has only ``id``), so an analysis error says
    nothing about the text and is ignored; only a ParseException counts.
    """
    from pyspark.errors import AnalysisException, ParseException

    try:
        _ = spark.range(0).select(F.expr(text), F.expr(f"({text})")).schema
    except ParseException as error:
        raise InvalidSpecError(f"{what} {text!r} is not one SQL expression: {_first_line(error)}") from None
    except AnalysisException:
        pass  # it parsed; its columns belong to another table


def _parse(spark: SparkSession, text: str, what: str) -> Any:
    parser = spark._jsparkSession.sessionState().sqlParser()
    try:
        return parser.parsePlan(text)
    except Exception as error:  # py4j's Py4JJavaError around Spark's ParseException
        raise InvalidSpecError(f"{what} is not a single Spark SQL query: {_first_line(error)}") from None


def _first_line(error: BaseException) -> str:
    """The first line of the Java exception's message (Spark's error class and position)."""
    java = getattr(error, "java_exception", None)
    message = java.getMessage() if java is not None else str(error)
    return (message or type(error).__name__).strip().splitlines()[0]


def _statement_class(spark: SparkSession, plan: Any) -> str | None:
    """The class name of the statement ``plan`` is (looking through a leading WITH), or None for a query."""
    jvm = spark.sparkContext._jvm
    node = plan
    if node.getClass().getName() == _WITH_CLASS:
        node = node.child()
    for name in _STATEMENT_CLASSES:
        if jvm.java.lang.Class.forName(name).isInstance(node):
            return str(node.getClass().getSimpleName())
    return None

"""No user text changes a table: source queries, conditions and filters run as queries or expressions only.

Every statement below is one Spark's grammar accepts and ``spark.sql()`` would run at once. Each
is sent through the job twice: through the write (the text check of ``validate_query`` and then
Spark's parser), and straight to :func:`~airflow_iceberg.jobs.user_sql.query_frame`, which shows
that Spark's parser alone refuses it. pyiceberg then finds both tables exactly as they were.
"""

from __future__ import annotations

import uuid

import pytest

from airflow_iceberg.jobs import user_sql
from airflow_iceberg.jobs.reads import read_table
from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.reads import ReadSpec
from airflow_iceberg.jobs.spec.sources import Source
from airflow_iceberg.jobs.spec.sql_text import validate_query
from airflow_iceberg.jobs.spec.writes import WriteSpec
from airflow_iceberg.jobs.writes import write_table
from tests.jobs.helpers import CATALOG, NAMESPACE, values_query, write_spec

ROWS = values_query([(1, "a"), (2, "b"), (3, "c")], "id, name")

#: Statements that start like a query. {t}: the table written, {o}: another table, {d}: a directory.
STATEMENTS = {
    "cte_delete": "WITH x AS (SELECT 1) DELETE FROM {t} WHERE id > 1",
    "cte_merge": (
        "WITH s AS (SELECT 1 AS id) MERGE INTO {t} AS t USING s ON t.id = s.id WHEN MATCHED THEN DELETE"
    ),
    "from_insert_overwrite": "FROM {t} INSERT OVERWRITE TABLE {o} SELECT *",
    "from_insert_into": "FROM {t} INSERT INTO {o} SELECT *",
    "cte_insert_into": "WITH x AS (SELECT 9 AS id, 'z' AS name) INSERT INTO {t} SELECT * FROM x",
    "cte_update": "WITH x AS (SELECT 1) UPDATE {t} SET name = 'z'",
    "cte_insert_directory": (
        "WITH x AS (SELECT 1) INSERT OVERWRITE DIRECTORY '{d}' USING parquet SELECT * FROM x"
    ),
    # A nested comment hides DELETE FROM from a text check; Spark's lexer reads it as a comment.
    "cte_delete_nested_comment": "WITH x AS (SELECT 1) DELETE /* a /* nested */ comment */ FROM {t}",
    "parenthesised_cte_delete": "(WITH x AS (SELECT 1) DELETE FROM {t})",
    "delete": "DELETE FROM {t}",
    "cache_table": "CACHE TABLE airflow_iceberg_cached AS SELECT * FROM {t}",
    "set": "SET spark.sql.shuffle.partitions=7",
    "create_view_with_cte": "CREATE VIEW airflow_iceberg_view AS WITH x AS (SELECT 1) SELECT * FROM x",
}


@pytest.fixture(scope="module")
def tables(spark, lake, tmp_path_factory):
    """Two tables with rows, and a directory that must not appear, shared: no test may change them.

    Returns the target table, a formatter for STATEMENTS, and the check that nothing changed.
    """
    target, other = (f"{CATALOG}.{NAMESPACE}.{name}_{uuid.uuid4().hex[:10]}" for name in ("target", "other"))
    write_table(spark, write_spec(target, "create", ROWS))
    write_table(spark, write_spec(other, "create", ROWS))
    directory = tmp_path_factory.mktemp("statements") / "must_not_exist"
    before = (lake.state(target), lake.state(other), lake.ids(target), lake.ids(other))

    def unchanged() -> None:
        assert (lake.state(target), lake.state(other), lake.ids(target), lake.ids(other)) == before
        assert not directory.exists()
        assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
        assert not spark.catalog.tableExists("airflow_iceberg_cached")
        assert not spark.catalog.tableExists("airflow_iceberg_view")

    def text(name: str) -> str:
        return STATEMENTS[name].format(t=target, o=other, d=directory)

    return target, text, unchanged


@pytest.mark.parametrize("name", STATEMENTS)
def test_a_statement_as_source_query_fails_and_changes_nothing(spark, tables, name):
    target, text, unchanged = tables
    # Not validated: the job's own checks must hold even if the Airflow side's were bypassed.
    spec = WriteSpec(target, "append", Source(query=text(name)))
    with pytest.raises(InvalidSpecError):
        write_table(spark, spec)
    unchanged()


@pytest.mark.parametrize("name", STATEMENTS)
def test_sparks_parser_alone_refuses_every_statement(spark, tables, name):
    _, text, unchanged = tables
    with pytest.raises(InvalidSpecError, match="source query"):
        user_sql.query_frame(spark, text(name))
    unchanged()


def test_a_statement_that_slips_past_the_text_check_is_named_by_sparks_parser(spark, tables):
    _, text, unchanged = tables
    query = text("cte_delete_nested_comment")
    assert validate_query(query) == query  # the cheap check is not complete ...
    with pytest.raises(InvalidSpecError, match=r"Spark reads it as DeleteFromTable, a statement that would"):
        user_sql.query_frame(spark, query)  # ... Spark's parser is
    unchanged()


@pytest.mark.parametrize(
    "query",
    [
        "SELECT id, name FROM {t}",
        "WITH x AS (SELECT * FROM {t}) SELECT * FROM x -- a trailing comment",
        "FROM {t} SELECT id, name",
        "TABLE {t}",
        "(SELECT id, name FROM {t}) UNION ALL (SELECT 4, 'update')",
        "SELECT /*+ REPARTITION(1) */ id, name FROM {t} ORDER BY id",
    ],
)
def test_queries_still_work(spark, lake, tables, query):
    target, _, _ = tables
    frame = user_sql.query_frame(spark, query.format(t=target))
    assert sorted(row.id for row in frame.collect())[:3] == [1, 2, 3]


CONDITIONS = {
    "subquery_delete": "id IN (WITH x AS (SELECT 1) DELETE FROM {t})",
    "exists_insert": "EXISTS (FROM {t} INSERT INTO {o} SELECT *)",
    "closing_parenthesis": "id > 0) OR (DELETE FROM {t}",
}


@pytest.mark.parametrize("name", CONDITIONS)
def test_a_statement_in_an_overwrite_condition_fails_and_changes_nothing(spark, tables, name):
    target, _, unchanged = tables
    condition = CONDITIONS[name].format(t=target, o=target)
    spec = WriteSpec(target, "overwrite", Source(query=ROWS), condition=condition)  # not validated
    with pytest.raises(InvalidSpecError, match="overwrite condition"):
        write_table(spark, spec)
    unchanged()


@pytest.mark.parametrize("name", CONDITIONS)
def test_a_statement_in_a_read_filter_fails_and_changes_nothing(spark, tables, name, new_table):
    target, _, unchanged = tables
    condition = CONDITIONS[name].format(t=target, o=target)
    sink = new_table("sink")
    with pytest.raises(InvalidSpecError, match="filter"):
        read_table(spark, ReadSpec(target, filter=condition, sink_table=sink))  # not validated
    unchanged()
    assert not spark.catalog.tableExists(sink)

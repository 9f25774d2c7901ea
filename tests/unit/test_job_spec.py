"""The argv contract between operators and the job: validation and exact round trips."""

from __future__ import annotations

import pytest

from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.identifiers import (
    parse_column,
    quote_identifier,
    quote_name,
    split_identifier,
    validate_table_identifier,
)
from airflow_iceberg.jobs.spec.reads import ReadSpec
from airflow_iceberg.jobs.spec.request import JobRequest, parse_argv
from airflow_iceberg.jobs.spec.sources import Source
from airflow_iceberg.jobs.spec.writes import WriteSpec, parse_transform


@pytest.mark.parametrize(
    "identifier",
    [
        "db.t; DROP TABLE x",
        "db.`t",
        "db.`t`x",
        "db.``",
        "db.`t\n`",
        "db.`t`\x00",
        "db.t\u0085",
        "db.t\t",
        "db.'t'",
        'db."t"',
        "db..t",
        ".db.t",
        "db.t.",
        "t",
        "db.t--",
        "db.t /*",
        "db. t",
        "db.t\n",
        "cat.db.t)",
        "",
    ],
)
def test_injection_and_malformed_identifiers_are_rejected(identifier):
    with pytest.raises(InvalidSpecError, match="identifier"):
        validate_table_identifier(identifier)


@pytest.mark.parametrize("identifier", ["db.t", "cat.db.t", "cat.ns1.ns2.t", "_private.t_2"])
def test_plain_identifiers_are_accepted(identifier):
    assert validate_table_identifier(identifier) == identifier


@pytest.mark.parametrize(
    ("identifier", "parts", "quoted"),
    [
        ("sales-eu.orders", ("sales-eu", "orders"), "`sales-eu`.`orders`"),
        ("cat.`sales-eu`.Orders", ("cat", "sales-eu", "Orders"), "`cat`.`sales-eu`.`Orders`"),
        ("cat.raw.events.v2_2024", ("cat", "raw", "events", "v2_2024"), "`cat`.`raw`.`events`.`v2_2024`"),
        ("ventes.commandes_été", ("ventes", "commandes_été"), "`ventes`.`commandes_été`"),
        ("cat.`my.ns`.t", ("cat", "my.ns", "t"), "`cat`.`my.ns`.`t`"),
        ("db.`a``b`", ("db", "a`b"), "`db`.`a``b`"),
        ("db.`order date`", ("db", "order date"), "`db`.`order date`"),
        ("`db`.`t`", ("db", "t"), "`db`.`t`"),
    ],
)
def test_real_world_names_are_split_into_parts_and_every_part_is_quoted(identifier, parts, quoted):
    assert validate_table_identifier(identifier) == identifier  # kept as written, for messages and XCom
    assert split_identifier(identifier) == parts
    assert quote_identifier(identifier) == quoted
    assert quote_identifier(quoted) == quoted  # quoting twice changes nothing
    assert split_identifier(quoted) == parts


#: Each is the *name* of a part: written in backticks it is accepted, and quoting keeps it one name.
HOSTILE_NAMES = [
    "t`; DROP TABLE x; --",
    "t; DROP TABLE x",
    "t' OR '1'='1",
    't" --',
    "t -- comment",
    "t /* x */",
    "t`.`other",
    "``",
    "a b",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_hostile_name_in_backticks_stays_one_quoted_name(name):
    written = f"cat.db.{quote_name(name)}"
    assert split_identifier(written) == ("cat", "db", name)
    quoted = quote_identifier(written)
    # Outside the quoted parts only the dots remain: no statement, comment or string can start.
    assert _outside_backticks(quoted) == ".."
    assert split_identifier(quoted) == ("cat", "db", name)


def _outside_backticks(quoted: str) -> str:
    """What Spark's lexer sees outside backtick-quoted identifiers (``` `` ``` stays inside)."""
    import re

    return re.sub(r"`(?:[^`]|``)*`", "", quoted)


@pytest.mark.parametrize("name", HOSTILE_NAMES[:7])
def test_a_hostile_name_written_bare_is_refused(name):
    with pytest.raises(InvalidSpecError, match="invalid part"):
        validate_table_identifier(f"db.{name}")


@pytest.mark.parametrize(
    ("identifier", "message"),
    [
        ("db.t\n", "control character"),
        ("db.`a\rb`", "control character"),
        ("db.`t", "backtick is not closed"),
        ("db..t", "empty part"),
        ("db.``", "empty part"),
        ("db.t.", "empty part"),
        ("db.`t`x", "a '.' must follow"),
        ("db.my table", "whitespace may only appear in a part written in backticks"),
    ],
)
def test_bad_identifiers_get_a_message_that_says_what_is_wrong(identifier, message):
    with pytest.raises(InvalidSpecError, match=message):
        validate_table_identifier(identifier)


@pytest.mark.parametrize(
    ("text", "column"),
    [("Région", "Région"), ("order-date", "order-date"), ("`order date`", "order date"), ("`a.b`", "a.b")],
)
def test_column_names_are_one_part_bare_or_in_backticks(text, column):
    assert parse_column(text) == column


@pytest.mark.parametrize("text", ["a.b", "a b", "", "`a", "x\ty", "a;b"])
def test_column_names_that_are_not_one_clean_part_are_refused(text):
    with pytest.raises(InvalidSpecError, match="column"):
        parse_column(text)


@pytest.mark.parametrize(
    ("expression", "parsed"),
    [
        ("day", ("identity", "day", None)),
        ("days(ts)", ("days", "ts", None)),
        ("years( ts )", ("years", "ts", None)),
        ("months(ts)", ("months", "ts", None)),
        ("hours(ts)", ("hours", "ts", None)),
        ("bucket(16, id)", ("bucket", "id", 16)),
        ("truncate(4,name)", ("truncate", "name", 4)),
        ("days(`order-date`)", ("days", "order-date", None)),
        ("days(order-date)", ("days", "order-date", None)),
        ("bucket(8, Région)", ("bucket", "Région", 8)),
        ("`order date`", ("identity", "order date", None)),
        ("truncate(2, `a,b``c`)", ("truncate", "a,b`c", 2)),
    ],
)
def test_partition_transforms(expression, parsed):
    assert parse_transform(expression) == parsed


@pytest.mark.parametrize(
    "expression",
    [
        "days(ts) ; drop",
        "bucket(0, id)",
        "bucket(id)",
        "weeks(ts)",
        "a.b",
        "f(x)",
        "days(`ts)",
        "days(ts--)",
        "days(`ts`) --",
        "days(`t\ns`)",
        "days(a b)",
    ],
)
def test_bad_partition_transforms(expression):
    with pytest.raises(InvalidSpecError, match="partition_by"):
        parse_transform(expression)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (WriteSpec("db.t", "append", Source()), "give one of source_query"),
        (WriteSpec("db.t", "append", Source(query="SELECT 1", table="db.s")), "exactly one of"),
        (WriteSpec("db.t", "append", Source(query="DROP TABLE db.t")), "must be a query"),
        (WriteSpec("db.t", "append", Source(query="SELECT 1; DROP TABLE db.t")), "single statement"),
        (WriteSpec("db.t", "append", Source(path="/x", format="xlsx")), "source_format"),
        (WriteSpec("db.t", "append", Source(query="SELECT 1", options={"header": "true"})), "file source"),
        (WriteSpec("db.t", "upsert", Source(query="SELECT 1")), "mode must be one of"),
        (
            WriteSpec("db.t", "append", Source(query="SELECT 1"), partition_by=("day",)),
            "partition_by applies",
        ),
        (WriteSpec("db.t", "overwrite", Source(query="SELECT 1")), "condition is required"),
        (
            WriteSpec("db.t", "overwrite", Source(query="SELECT 1"), condition="1=1; DROP TABLE x"),
            "without ';'",
        ),
        (WriteSpec("db.t", "overwrite", Source(query="SELECT 1"), condition="day = 1 -- x"), "SQL comments"),
        (
            WriteSpec("db.t", "append", Source(query="SELECT 1"), write_options={"bad key": "v"}),
            "write option key",
        ),
        (ReadSpec("db.t", snapshot_id=1, as_of_timestamp=2), "exactly one of snapshot_id"),
        (ReadSpec("db.t", branch="b", tag="t"), "exactly one of"),
        (ReadSpec("db.t", branch="x; drop"), "branch"),
        (ReadSpec("db.t", sink_table="db.a", sink_path="/p"), "exactly one of sink_table"),
        (ReadSpec("db.t", preview_rows=100000), "preview_rows"),
        (ReadSpec("db.t", columns=("a", "b c")), "column"),
    ],
)
def test_invalid_specs_name_the_problem(spec, message):
    with pytest.raises(InvalidSpecError, match=message):
        spec.validated()


def test_quoted_semicolons_are_data_not_separators():
    spec = WriteSpec(
        "db.t", "overwrite", Source(query="SELECT 'a;b' AS s"), condition="s = 'x;y'"
    ).validated()
    assert spec.condition == "s = 'x;y'"


def test_write_request_round_trips_through_argv():
    request = JobRequest(
        spec=WriteSpec(
            "cat.db.t",
            "create_or_replace",
            Source(query="SELECT 1 AS id"),
            partition_by=("bucket(4, id)", "days(ts)"),
            table_properties={"format-version": "2"},
            write_options={"write-format": "avro"},
            merge_schema=True,
        ).validated(),
        result_file="/tmp/r.json",
        commit_id="abc",
        commit_properties={"airflow.dag-id": "d"},
    )
    argv = request.to_argv()
    assert argv == [
        "--result-file",
        "/tmp/r.json",
        "--commit-id",
        "abc",
        "--commit-property",
        "airflow.dag-id=d",
        "write",
        "--table",
        "cat.db.t",
        "--mode",
        "create_or_replace",
        "--source-query",
        "SELECT 1 AS id",
        "--partition-by",
        "bucket(4, id)",
        "--partition-by",
        "days(ts)",
        "--table-property",
        "format-version=2",
        "--write-option",
        "write-format=avro",
        "--merge-schema",
    ]
    assert parse_argv(argv) == request


def test_read_request_round_trips_through_argv():
    request = JobRequest(
        spec=ReadSpec(
            "cat.db.t",
            as_of_timestamp=1704067200000,
            columns=("a", "b"),
            filter="a > 1",
            sink_path="/out",
            sink_format="json",
            preview_rows=5,
            read_options={"split-size": "1024"},
        ).validated()
    )
    assert parse_argv(request.to_argv()) == request


def test_option_values_with_equals_signs_survive():
    request = JobRequest(
        spec=WriteSpec(
            "db.t", "append", Source(path="/in", format="csv", options={"sep": "=", "nullValue": "a=b"})
        ).validated()
    )
    assert parse_argv(request.to_argv()).spec.source.options == {"sep": "=", "nullValue": "a=b"}


@pytest.mark.parametrize(
    ("query", "statement"),
    [
        ("WITH x AS (SELECT 1) DELETE FROM acc.emr_db.sample WHERE id > 3", "DELETE FROM"),
        ("WITH s AS (SELECT 1 AS id) MERGE INTO db.t USING s ON db.t.id = s.id WHEN MATCHED THEN DELETE",
         "MERGE INTO"),
        ("FROM db.src INSERT OVERWRITE TABLE db.other SELECT *", "INSERT OVERWRITE"),
        ("from db.src\n  insert   into db.other select *", "INSERT INTO"),
        ("WITH x AS (SELECT 1) UPDATE db.t SET a = 1", r"UPDATE \.\.\. SET"),
        ("WITH x AS (SELECT 1) DELETE/**/FROM `db`.`t`", "DELETE FROM"),
        ("WITH x AS (SELECT 1) DELETE -- comment\n FROM db.t", "DELETE FROM"),
        ("WITH x AS (SELECT 1) INSERT OVERWRITE DIRECTORY '/tmp/x' SELECT * FROM x", "INSERT OVERWRITE"),
        ("(WITH x AS (SELECT 1) CACHE TABLE c AS SELECT * FROM x)", "CACHE TABLE"),
    ],
)
def test_data_changing_statements_after_a_query_start_are_refused_before_spark(query, statement):
    with pytest.raises(InvalidSpecError, match=f"holds '{statement}', a statement that changes data"):
        WriteSpec("db.t", "append", Source(query=query)).validated()


@pytest.mark.parametrize(
    "query",
    [
        "SELECT id, updated_at, 'DELETE FROM x' AS note FROM db.t",
        "SELECT `update`, `set` FROM db.t",
        "SELECT * FROM db.t WHERE status = 'INSERT INTO' -- delete from later\n",
        "WITH deletes AS (SELECT * FROM db.merge_into) SELECT * FROM deletes",
    ],
)
def test_queries_that_only_mention_those_words_are_accepted(query):
    assert WriteSpec("db.t", "append", Source(query=query)).validated().source.query == query


@pytest.mark.parametrize(
    "spec",
    [
        WriteSpec(
            "db.t",
            "overwrite",
            Source(query="SELECT 1"),
            condition="id IN (FROM db.t INSERT INTO db.o SELECT *)",
        ),
        ReadSpec("db.t", filter="EXISTS (WITH x AS (SELECT 1) DELETE FROM db.t)"),
    ],
    ids=["condition", "filter"],
)
def test_statements_in_conditions_and_filters_are_refused_before_spark(spec):
    with pytest.raises(InvalidSpecError, match="a statement that changes data"):
        spec.validated()


@pytest.mark.parametrize(
    "schema",
    ["table", "order_id INT, order_date DATE, amount DECIMAL(10,2)", "`order date` date, tags ARRAY<STRING>",
     "m MAP<STRING, INT>, s STRUCT<a: INT, b: STRING>"],
)
def test_source_schema_round_trips_through_argv_for_writes_and_merges(schema):
    from airflow_iceberg.jobs.spec.row_changes import MergeSpec

    source = Source(path="/in", format="json", schema=schema)
    for spec in (WriteSpec("db.t", "append", source), MergeSpec("db.t", source=source, keys=("order_id",))):
        request = JobRequest(spec=spec.validated())
        assert parse_argv(request.to_argv()).spec.source.schema == schema


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ("order_id, order_date DATE", r"column 'order_id' is not 'name TYPE'"),
        ("order_date DAT", r"column 'order_date DAT' is not 'name TYPE'"),
        ("id INT; DROP TABLE t", "must be column definitions only"),
        (" , ", "source_schema is empty"),
    ],
)
def test_a_bad_source_schema_is_refused_before_spark_with_the_right_form(schema, message):
    with pytest.raises(InvalidSpecError, match=message) as error:
        WriteSpec("db.t", "append", Source(path="/in", format="json", schema=schema)).validated()
    assert "order_id INT, order_date DATE" in str(error.value) or "empty" in message


def test_source_schema_is_for_files_and_table_is_not_for_a_new_table():
    with pytest.raises(InvalidSpecError, match="source_schema applies only to a file source"):
        WriteSpec("db.t", "append", Source(query="SELECT 1 AS id", schema="id INT")).validated()
    with pytest.raises(InvalidSpecError, match="mode 'create' makes a new one"):
        WriteSpec("db.t", "create", Source(path="/in", format="json", schema="table")).validated()

"""Merge schema, schema mismatches, and the three kinds of source: query, table, files."""

from __future__ import annotations

import json

import pytest

from airflow_iceberg.jobs.spec.sources import Source
from airflow_iceberg.jobs.table_state import SchemaMismatchError, TableNotFoundError
from airflow_iceberg.jobs.writes import write_table
from tests.jobs.helpers import values_query, write_spec

ROWS = values_query([(1, "a"), (2, "b")], "id, name")


def test_merge_schema_adds_the_new_source_column(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS, merge_schema=True))
    assert lake.load(table).properties["write.spark.accept-any-schema"] == "true"

    write_table(
        spark, write_spec(table, "append", "SELECT 3 AS id, 'c' AS name, 9.5D AS score", merge_schema=True)
    )

    assert lake.schema_names(table) == ["id", "name", "score"]
    assert [(r["id"], r["score"]) for r in lake.rows(table)] == [(1, None), (2, None), (3, 9.5)]


def test_merge_schema_also_accepts_a_source_without_an_optional_column(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS, merge_schema=True))
    write_table(spark, write_spec(table, "append", "SELECT 3 AS id", merge_schema=True))
    assert lake.rows(table)[-1] == {"id": 3, "name": None}


def test_a_bad_cast_fails_under_spark4s_ansi_mode_and_commits_nothing(spark, lake, table):
    """Spark 4 turns ANSI mode on by default: a cast that 3.5 turns into NULL fails the write."""
    write_table(spark, write_spec(table, "create", ROWS))
    before = lake.state(table)
    bad_cast = "SELECT CAST('three' AS INT) AS id, 'c' AS name"

    if spark.conf.get("spark.sql.ansi.enabled") == "true":  # Spark 4's default
        with pytest.raises(Exception, match="CAST_INVALID_INPUT"):
            write_table(spark, write_spec(table, "append", bad_cast))
        assert lake.state(table) == before
    else:  # Spark 3.5's default
        write_table(spark, write_spec(table, "append", bad_cast))
        assert lake.rows(table, sort_by="name")[-1] == {"id": None, "name": "c"}


def test_an_extra_column_without_merge_schema_is_a_clear_error(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS))
    before = lake.state(table)

    with pytest.raises(
        SchemaMismatchError,
        match=f"source columns score are not in table {table} "
        r"\(columns: id, name\); set merge_schema=True",
    ):
        write_table(spark, write_spec(table, "append", "SELECT 3 AS id, 'c' AS name, 9.5D AS score"))

    assert lake.state(table) == before
    assert lake.schema_names(table) == ["id", "name"]


def test_a_missing_column_without_merge_schema_is_a_clear_error(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS))
    before = lake.state(table)
    with pytest.raises(SchemaMismatchError, match=f"the source has no column name of table {table}"):
        write_table(spark, write_spec(table, "overwrite_partitions", "SELECT 3 AS id"))
    assert lake.state(table) == before


def test_merge_schema_on_a_table_that_does_not_accept_it_names_the_property(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS))
    before = lake.state(table)
    with pytest.raises(
        SchemaMismatchError, match=r"merge_schema needs table property write\.spark\.accept-any-schema=true"
    ):
        write_table(
            spark, write_spec(table, "append", "SELECT 3 AS id, 'c' AS name, 1 AS extra", merge_schema=True)
        )
    assert lake.state(table) == before


def test_column_names_match_case_insensitively_like_spark(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS))
    write_table(spark, write_spec(table, "append", "SELECT 3 AS ID, 'c' AS Name"))
    assert lake.ids(table) == [1, 2, 3]


# --------------------------------------------------------------------------- sources


def test_source_table_is_copied(spark, lake, new_table):
    source, target = new_table("src"), new_table("dst")
    write_table(spark, write_spec(source, "create", ROWS))
    write_table(spark, write_spec(target, "create", source=Source(table=source)))
    assert lake.rows(target) == lake.rows(source) == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]


def test_missing_source_table_fails_before_creating_the_target(spark, lake, new_table):
    source, target = new_table("nosrc"), new_table("dst")
    with pytest.raises(TableNotFoundError, match=f"source table {source} does not exist"):
        write_table(spark, write_spec(target, "create", source=Source(table=source)))
    assert not lake.exists(target)


EXPECTED_FILE_ROWS = [{"id": 1, "name": "a"}, {"id": 2, "name": "b,c"}]


def _write_source_files(directory, file_format):
    """Write EXPECTED_FILE_ROWS in ``file_format`` without Spark (pyarrow or plain text)."""
    import pyarrow as pa

    directory.mkdir()
    table = pa.Table.from_pylist(
        EXPECTED_FILE_ROWS, schema=pa.schema([("id", pa.int64()), ("name", pa.string())])
    )
    if file_format == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, directory / "part-0.parquet")
    elif file_format == "orc":
        import pyarrow.orc as orc

        orc.write_table(table, directory / "part-0.orc")
    elif file_format == "json":
        (directory / "part-0.json").write_text("".join(json.dumps(row) + "\n" for row in EXPECTED_FILE_ROWS))
    else:
        (directory / "part-0.csv").write_text('id,name\n1,a\n2,"b,c"\n')


@pytest.mark.parametrize(
    ("file_format", "options"),
    [("parquet", {}), ("orc", {}), ("json", {}), ("csv", {"header": "true", "inferSchema": "true"})],
)
def test_file_sources(spark, lake, table, tmp_path, file_format, options):
    _write_source_files(tmp_path / "in", file_format)
    source = Source(path=str(tmp_path / "in"), format=file_format, options=options)

    write_table(spark, write_spec(table, "create", source=source))

    assert lake.rows(table) == EXPECTED_FILE_ROWS


def test_csv_reader_options_are_applied(spark, lake, table, tmp_path):
    """Without header=true the header line is data and the columns get Spark's default names."""
    _write_source_files(tmp_path / "in", "csv")
    write_table(spark, write_spec(table, "create", source=Source(path=str(tmp_path / "in"), format="csv")))
    assert lake.schema_names(table) == ["_c0", "_c1"]
    assert lake.rows(table, sort_by="_c0") == [
        {"_c0": "1", "_c1": "a"},
        {"_c0": "2", "_c1": "b,c"},
        {"_c0": "id", "_c1": "name"},
    ]


# ---------------------------------------------------------------------- source_schema (files)

LATE_ORDERS = [
    {"order_id": 7, "order_date": "2024-01-02", "amount": 12.5},
    {"order_id": 8, "order_date": "2024-01-02", "amount": 3},
]
ORDERS_TABLE_QUERY = (
    "SELECT 1 AS order_id, DATE'2024-01-01' AS order_date, CAST(9.99 AS DECIMAL(10,2)) AS amount"
)


def _late_orders_json(directory):
    directory.mkdir()
    (directory / "part-0.json").write_text("".join(json.dumps(row) + "\n" for row in LATE_ORDERS))
    return str(directory)


def _orders_table(spark, table):
    write_table(spark, write_spec(table, "create", ORDERS_TABLE_QUERY))


def test_json_dates_do_not_fit_a_date_column_without_a_schema(spark, lake, table, tmp_path):
    """Why source_schema exists: Spark's JSON reader yields the date as a STRING."""
    _orders_table(spark, table)
    before = lake.state(table)
    source = Source(path=_late_orders_json(tmp_path / "late"), format="json")
    with pytest.raises(Exception, match=r"CANNOT_SAFELY_CAST|Cannot safely cast|cannot be cast"):
        write_table(spark, write_spec(table, "append", source=source))
    assert lake.state(table) == before


def test_source_schema_table_reads_files_with_the_tables_own_schema(spark, lake, table, tmp_path):
    from datetime import date
    from decimal import Decimal

    _orders_table(spark, table)
    source = Source(path=_late_orders_json(tmp_path / "late"), format="json", schema="table")
    write_table(spark, write_spec(table, "append", source=source))
    assert lake.rows(table, sort_by="order_id")[1:] == [
        {"order_id": 7, "order_date": date(2024, 1, 2), "amount": Decimal("12.50")},
        {"order_id": 8, "order_date": date(2024, 1, 2), "amount": Decimal("3.00")},
    ]


def test_source_schema_ddl_creates_the_table_with_those_types(spark, lake, table, tmp_path):
    from datetime import date

    schema = "order_id INT, order_date DATE, amount DECIMAL(10,2)"
    source = Source(path=_late_orders_json(tmp_path / "late"), format="json", schema=schema)
    write_table(spark, write_spec(table, "create", source=source, partition_by=("days(order_date)",)))
    fields = {f.name: str(f.field_type) for f in lake.load(table).schema().fields}
    assert fields == {"order_id": "int", "order_date": "date", "amount": "decimal(10, 2)"}
    assert [r["order_date"] for r in lake.rows(table, sort_by="order_id")] == [date(2024, 1, 2)] * 2


def test_source_schema_table_for_a_table_that_does_not_exist_fails_before_writing(
    spark, lake, new_table, tmp_path
):
    target = new_table("noschema")
    source = Source(path=_late_orders_json(tmp_path / "late"), format="json", schema="table")
    with pytest.raises(TableNotFoundError, match="source_schema 'table' reads the files with the schema"):
        write_table(spark, write_spec(target, "create_or_replace", source=source))
    assert not lake.exists(target)

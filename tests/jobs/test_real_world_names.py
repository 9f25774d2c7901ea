"""Table and column names as real catalogs have them: dashes, upper case, nested namespaces, any letters.

Every write, read, merge and upkeep call below takes the names exactly as a user writes them
(bare, or in backticks); pyiceberg then finds the tables under the very names on disk, so the
names reached the catalog unchanged, case and all.
"""

from __future__ import annotations

import datetime
import uuid

import pytest

from airflow_iceberg.jobs.branches import tag_snapshot
from airflow_iceberg.jobs.merges import delete_from, merge_into
from airflow_iceberg.jobs.reads import read_table
from airflow_iceberg.jobs.spec.branches import TagSpec
from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.identifiers import quote_name, split_identifier
from airflow_iceberg.jobs.spec.row_changes import DeleteSpec, MergeSpec
from airflow_iceberg.jobs.spec.sources import Source
from airflow_iceberg.jobs.spec.upkeep import ExpireSnapshotsSpec, RewriteDataFilesSpec
from airflow_iceberg.jobs.upkeep import expire_snapshots, rewrite_data_files
from airflow_iceberg.jobs.writes import write_table
from tests.jobs.helpers import CATALOG, read_spec, write_spec

ORDERS = "SELECT * FROM VALUES (1, 'ann'), (2, 'bob') AS v(id, `Client-Name`)"
#: A name that would end the statement, open a string and comment the rest out, were it spliced bare.
HOSTILE = "odd`name; DROP TABLE x --'/*"


def _suffix() -> str:
    return uuid.uuid4().hex[:8]


def test_dashed_namespace_and_upper_case_table_through_create_append_overwrite_read_and_merge(
    spark, lake, warehouse
):
    table = f"{CATALOG}.`sales-eu`.Orders_{_suffix()}"
    write_table(spark, write_spec(table, "create", ORDERS))
    write_table(spark, write_spec(table, "append", "SELECT 3 AS id, 'cid' AS `Client-Name`"))
    bob = "SELECT 2 AS id, 'BOB' AS `Client-Name`"
    write_table(spark, write_spec(table, "overwrite", bob, condition="id = 2"))
    merge_into(
        spark,
        MergeSpec(
            table,
            source=Source(query="SELECT * FROM VALUES (3, 'CID'), (4, 'dee') AS v(id, `Client-Name`)"),
            keys=("id",),
            clauses=(
                {"when": "matched", "then": "update", "set": {"`Client-Name`": "s.`Client-Name`"}},
                {"when": "not_matched", "then": "insert"},
            ),
        ).validated(),
    )
    read = read_table(spark, read_spec(table, columns=("Client-Name",), filter="id > 1", preview_rows=10))

    name = split_identifier(table)[-1]
    assert (warehouse / "sales-eu" / name / "metadata").is_dir()  # case kept, nothing escaped on disk
    assert lake.rows(table) == [
        {"id": 1, "Client-Name": "ann"},
        {"id": 2, "Client-Name": "BOB"},
        {"id": 3, "Client-Name": "CID"},
        {"id": 4, "Client-Name": "dee"},
    ]
    assert read["row_count"] == 3
    assert sorted(row["Client-Name"] for row in read["preview"]) == ["BOB", "CID", "dee"]


def test_nested_namespace_and_non_ascii_names(spark, lake, warehouse):
    nested = f"{CATALOG}.raw.events.v2_2024_{_suffix()}"
    french = f"{CATALOG}.ventes.commandes_été_{_suffix()}"
    write_table(spark, write_spec(nested, "create", "SELECT 1 AS id, 'é' AS `Libellé`"))
    write_table(spark, write_spec(french, "create", "SELECT 1 AS id"))
    read_table(spark, read_spec(nested, sink_table=french, sink_mode="create_or_replace"))

    assert (warehouse / "raw" / "events" / split_identifier(nested)[-1] / "metadata").is_dir()
    assert (warehouse / "ventes" / split_identifier(french)[-1] / "metadata").is_dir()
    assert lake.rows(french) == [{"id": 1, "Libellé": "é"}]
    assert spark.sql("SHOW NAMESPACES IN lake.raw").collect()[0][0] == "raw.events"


@pytest.mark.parametrize(
    "partition_by",
    [
        ("days(`order-date`)", "Région"),
        ("`order-date`", "truncate(2, Région)"),
    ],
)
def test_partition_columns_with_dashes_and_accents(spark, lake, new_table, partition_by):
    """Such a table is created with SQL CTAS, where the job quotes them (WriteSpec.created_with_sql)."""
    table = new_table("parts")
    rows = (
        "SELECT * FROM VALUES (1, DATE'2024-01-02', 'Île-de-France'), (2, DATE'2024-01-03', 'Bretagne') "
        "AS v(id, `order-date`, `Région`)"
    )
    write_table(spark, write_spec(table, "create", rows, partition_by=partition_by))

    fields = lake.partition_fields(table)
    assert [column for column, _ in fields] == ["order-date", "Région"]
    first = {"id": 1, "order-date": datetime.date(2024, 1, 2), "Région": "Île-de-France"}
    assert lake.rows(table)[0] == first


def test_a_name_holding_sql_stays_one_name_through_sql_procedures_and_branches(
    spark, lake, warehouse, new_table
):
    """Backticks, quotes, ``;``, ``--`` and ``/*`` in a name: the job quotes it, Spark takes it as a name."""
    table = f"{CATALOG}.db.{quote_name(HOSTILE)}"
    bystander = new_table("bystander")
    write_table(spark, write_spec(bystander, "create", "SELECT 1 AS id"))
    row = "SELECT {} AS id, DATE'2024-01-0{}' AS `order-date`"
    # truncate(W, col) makes the job create the table with SQL CTAS: the name is in SQL text.
    write_table(spark, write_spec(table, "create", row.format(1, 2), partition_by=("truncate(4, id)",)))
    # A branch write: ALTER TABLE ... CREATE BRANCH, then writeTo(<table>.branch_audit).
    write_table(spark, write_spec(table, "append", row.format(2, 3), branch="audit"))
    write_table(spark, write_spec(table, "append", row.format(3, 4)))
    tag_snapshot(spark, TagSpec(table, tag="eod").validated())
    delete_from(spark, DeleteSpec(table, condition="id = 3").validated())
    compacted = rewrite_data_files(  # CALL with table => '<quoted name, escaped>' and a quoted sort order
        spark,
        RewriteDataFilesSpec(
            table, strategy="sort", sort_order="`order-date` DESC", options={"rewrite-all": "true"}
        ).validated(),
    )
    expired = expire_snapshots(spark, ExpireSnapshotsSpec(table, retain_last=1).validated())

    assert (warehouse / "db" / HOSTILE / "metadata").is_dir()
    assert lake.ids(table) == [1]
    assert compacted["procedure"] == "rewrite_data_files"
    assert expired["table"] == table
    assert lake.ids(bystander) == [1]  # nothing else was touched
    refs = {name for name in lake.load(table).metadata.refs}
    assert refs == {"main", "audit", "eod"}


def test_names_the_parser_refuses_never_reach_spark(spark, lake, new_table):
    table = new_table("refused")
    for bad in (f"{table}; DROP TABLE x", f"{table}\n", "lake.db.`unclosed", "lake..t"):
        with pytest.raises(InvalidSpecError, match="identifier"):
            write_spec(bad, "create", "SELECT 1 AS id")
    with pytest.raises(InvalidSpecError, match="partition_by"):
        write_spec(table, "create", "SELECT 1 AS id", partition_by=("days(order date)",))
    assert not lake.exists(table)


def test_a_stream_reads_and_writes_tables_with_real_world_names(spark, lake, tmp_path):
    """``readStream...load`` and ``writeStream.toTable`` parse the quoted identifiers like the batch path."""
    source = f"{CATALOG}.`sales-eu`.Événements_{_suffix()}"
    sink = f"{CATALOG}.raw.events.`copy of {_suffix()}`"
    write_table(spark, write_spec(source, "create", "SELECT 1 AS id, 'a' AS `Région-Nom`"))
    write_table(spark, write_spec(source, "append", "SELECT 2 AS id, 'b' AS `Région-Nom`"))
    spec = read_spec(
        source,
        stream_from_timestamp=0,
        checkpoint_location=str(tmp_path / "ck"),
        columns=("`Région-Nom`",),
        sink_table=sink,
        sink_mode="append",
    )
    result = read_table(spark, spec)
    assert result["row_count"] == 2
    assert sorted(row["Région-Nom"] for row in lake.rows(sink)) == ["a", "b"]

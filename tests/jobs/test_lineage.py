"""The job's lineage description: each table's location, schema, format and snapshot, for OpenLineage."""

from __future__ import annotations

import json

from airflow_iceberg.jobs import iceberg_job, table_state
from airflow_iceberg.jobs.lineage import describe_table, describe_tables, query_tables, tables_of
from airflow_iceberg.jobs.spec.request import JobRequest
from airflow_iceberg.jobs.spec.sources import Source
from airflow_iceberg.jobs.spec.writes import WriteSpec
from tests.jobs.helpers import values_query


def test_the_result_describes_the_target_and_source_tables(spark, lake, new_table, tmp_path):
    source, target = new_table("src"), new_table("dst")
    create = WriteSpec(source, "create", Source(query=values_query([(1, "a")], "id, name")))
    copy = WriteSpec(target, "create", Source(table=source))
    assert tables_of(copy) == [target, source]
    for spec, name in ((create, "a.json"), (copy, "b.json")):
        request = JobRequest(spec=spec.validated(), result_file=str(tmp_path / name))
        assert iceberg_job.main(request.to_argv()) == 0

    described_run = json.loads((tmp_path / "b.json").read_text())["lineage"]
    lineage = described_run["tables"]
    assert set(lineage) == {target, source} and described_run["query_tables"] == []
    for table in (target, source):
        described = lineage[table]
        assert described["location"].rstrip("/").endswith("/".join(table.split(".")[1:]))
        # openlineage-spark's type names (Spark's typeName), not simpleString's "int"
        assert described["schema"] == [{"name": "id", "type": "integer"}, {"name": "name", "type": "string"}]
        assert described["format"] == "parquet"
        assert described["snapshot_id"] == lake.current_snapshot_id(table)
    application = described_run["application"]
    assert application == {"id": spark.sparkContext.applicationId, "name": spark.sparkContext.appName}


def test_nested_types_and_the_write_format_are_described_as_openlineage_spark_does(
    spark, lake, new_table, monkeypatch
):
    table = new_table("nested")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT COMMENT 'the key', amount DECIMAL(10,2), "
        "address STRUCT<city: STRING, tags: ARRAY<STRING>>, counts MAP<STRING, INT>, at TIMESTAMP) "
        "USING iceberg TBLPROPERTIES ('write.format.default'='orc')"
    )
    expected = [
        {"name": "id", "type": "long", "description": "the key"},
        {"name": "amount", "type": "decimal(10,2)"},
        {
            "name": "address",
            "type": "struct",
            "fields": [
                {"name": "city", "type": "string"},
                {"name": "tags", "type": "array", "fields": [{"name": "_element", "type": "string"}]},
            ],
        },
        {
            "name": "counts",
            "type": "map",
            "fields": [{"name": "key", "type": "string"}, {"name": "value", "type": "integer"}],
        },
        {"name": "at", "type": "timestamp"},
    ]
    from_driver = describe_table(spark, table)
    monkeypatch.setattr(table_state, "has_driver_jvm", lambda session: False)  # as over Spark Connect
    from_describe = describe_table(spark, table)
    assert from_driver == from_describe
    assert from_driver["schema"] == expected
    assert from_driver["format"] == "orc" == lake.load(table).properties["write.format.default"]


def test_the_worker_describes_a_table_through_pyiceberg_exactly_as_the_driver_does(spark, lake, new_table):
    """Publish, tag and rollback may run in the worker (pyiceberg): their OpenLineage datasets must match."""
    from airflow_iceberg.catalog.pyiceberg_lineage import describe_table as describe_with_pyiceberg

    table = new_table("typed")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT NOT NULL COMMENT 'the key', qty INT, ok BOOLEAN, ratio FLOAT, "
        "score DOUBLE, amount DECIMAL(38,9), day DATE, at TIMESTAMP, local_at TIMESTAMP_NTZ, raw BINARY, "
        "address STRUCT<city: STRING COMMENT 'where', tags: ARRAY<STRING>>, counts MAP<STRING, INT>) "
        "USING iceberg TBLPROPERTIES ('write.format.default'='avro')"
    )
    spark.sql(
        f"INSERT INTO {table} VALUES (1, 2, true, 1.5, 2.5, 3.25, DATE'2024-01-02', "
        "TIMESTAMP'2024-01-02 03:04:05', TIMESTAMP_NTZ'2024-01-02 03:04:05', X'00', "
        "named_struct('city', 'Lyon', 'tags', array('a')), map('a', 1))"
    )
    assert describe_with_pyiceberg(lake.load(table).metadata) == describe_table(spark, table)


def test_a_table_that_does_not_exist_is_left_out(spark, new_table):
    assert describe_tables(spark, [new_table("missing")]) == {}


def test_a_source_querys_tables_are_read_from_its_analysed_plan(spark, lake, new_table, tmp_path):
    orders, customers, refunds, target = (new_table(n) for n in ("orders", "customers", "refunds", "out"))
    for table in (orders, customers, refunds):
        spark.sql(f"CREATE TABLE {table} (id BIGINT) USING iceberg")
    spark.sql(f"CREATE OR REPLACE TEMP VIEW recent AS SELECT id FROM {orders}")
    query = (
        f"WITH c AS (SELECT id FROM {customers}) SELECT r.id FROM recent r JOIN c ON r.id = c.id "
        f"WHERE r.id NOT IN (SELECT id FROM {refunds}) UNION ALL SELECT id FROM {orders}"
    )
    # a view, a CTE and a subquery are resolved to their tables, each named once
    assert sorted(read["table"] for read in query_tables(spark, query)) == sorted(
        [orders, customers, refunds]
    )
    assert query_tables(spark, "SELECT 1 AS id") == []
    spark.sql(f"INSERT INTO {orders} VALUES (1)")
    first = lake.current_snapshot_id(orders)
    spark.sql(f"INSERT INTO {orders} VALUES (2)")
    # a time-travel read is at the snapshot it resolved to; a plain read at the current state
    assert query_tables(
        spark, f"SELECT id FROM {orders} VERSION AS OF {first} UNION ALL SELECT id FROM {orders}"
    ) == [
        {"table": orders, "snapshot_id": first},
        {"table": orders, "snapshot_id": None},
    ]

    spec = WriteSpec(target, "create", Source(query=f"SELECT id FROM {orders}"))
    request = JobRequest(spec=spec.validated(), result_file=str(tmp_path / "q.json"))
    assert iceberg_job.main(request.to_argv()) == 0
    described_run = json.loads((tmp_path / "q.json").read_text())["lineage"]
    assert described_run["query_tables"] == [{"table": orders, "snapshot_id": None}]
    assert described_run["tables"][orders]["location"] == lake.load(orders).location()

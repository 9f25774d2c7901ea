"""A read's sink on Spark's session catalog (Iceberg's ``SparkSessionCatalog``) is an Iceberg table.

Without ``.using("iceberg")``, Spark gives a DataFrameWriterV2 create on the session catalog its
default provider, and ``SparkSessionCatalog`` hands a Parquet table to Spark's own catalog. The
sink goes through the writes' own writer, so it is created as Iceberg, which pyiceberg confirms.
"""

from __future__ import annotations

import uuid

import pytest

from airflow_iceberg.jobs.reads import read_table
from airflow_iceberg.jobs.writes import write_table
from tests.jobs.helpers import SESSION_CATALOG, read_spec, values_query, write_spec

ROWS = values_query([(1, "a"), (2, "b")], "id, name")


@pytest.mark.parametrize("mode", ["create", "create_or_replace"])
def test_a_sink_created_on_the_session_catalog_is_an_iceberg_table(spark, session_lake, table, mode):
    write_table(spark, write_spec(table, "create", ROWS))
    sink = f"{SESSION_CATALOG}.db.sink_{uuid.uuid4().hex[:10]}"

    result = read_table(spark, read_spec(table, sink_table=sink, sink_mode=mode))

    provider = {row.col_name: row.data_type for row in spark.sql(f"DESCRIBE TABLE EXTENDED {sink}").collect()}
    assert provider["Provider"].lower() == "iceberg"
    assert session_lake.ids(sink) == [1, 2]  # Iceberg metadata on disk, read by pyiceberg
    assert result["sink"]["snapshot_id"] == session_lake.current_snapshot_id(sink)
    assert result["row_count"] == 2

"""Refs, snapshots and lineage read from the driver's table metadata say what the metadata tables say.

The job answers these questions from the Iceberg table already loaded in the driver (no Spark
job); a session without a JVM in the process (Spark Connect) asks the ``refs`` and ``snapshots``
metadata tables. Both sources must give the same answers, checked here side by side and
against pyiceberg.
"""

from __future__ import annotations

import pytest

from airflow_iceberg.jobs import lineage, table_state
from airflow_iceberg.jobs.table_state import (
    SnapshotNotFoundError,
    current_snapshot_id,
    ref_snapshot_id,
    snapshot_exists,
    snapshot_summary,
)
from airflow_iceberg.jobs.writes import write_table
from tests.jobs.helpers import values_query, write_spec


@pytest.fixture
def branched_table(spark, table):
    """Two appends on main, a branch ``audit`` at the first, a tag ``v1`` at the second."""
    write_table(spark, write_spec(table, "create", values_query([(1, "a")], "id, name")))
    first = write_table(spark, write_spec(table, "append", values_query([(2, "b")], "id, name")))
    second = write_table(spark, write_spec(table, "append", values_query([(3, "c")], "id, name")))
    spark.sql(f"ALTER TABLE {table} CREATE BRANCH audit AS OF VERSION {first['snapshot_id']}")
    spark.sql(f"ALTER TABLE {table} CREATE TAG v1 AS OF VERSION {second['snapshot_id']}")
    return table, first, second


def answers(spark, table, first, second):
    questions = {
        "main": current_snapshot_id(spark, table),
        "audit": ref_snapshot_id(spark, table, "audit", "BRANCH"),
        "v1": ref_snapshot_id(spark, table, "v1", "TAG"),
        "audit as a tag": ref_snapshot_id(spark, table, "audit", "TAG"),
        "v1 as a branch": ref_snapshot_id(spark, table, "v1", "BRANCH"),
        "missing": ref_snapshot_id(spark, table, "nope", "BRANCH"),
        "first exists": snapshot_exists(spark, table, first["snapshot_id"]),
        "unknown exists": snapshot_exists(spark, table, 12345),
        "first": snapshot_summary(spark, table, first["snapshot_id"]),
        "second": snapshot_summary(spark, table, second["snapshot_id"]),
        "lineage": lineage.describe_table(spark, table),
    }
    with pytest.raises(SnapshotNotFoundError, match="snapshot 12345 is not in table"):
        snapshot_summary(spark, table, 12345)
    return questions


def test_the_driver_metadata_and_the_metadata_tables_agree(spark, lake, branched_table, monkeypatch):
    table, first, second = branched_table
    from_driver = answers(spark, table, first, second)
    monkeypatch.setattr(table_state, "has_driver_jvm", lambda session: False)  # as in a Connect session
    assert table_state.driver_table(spark, table) is None
    from_metadata_tables = answers(spark, table, first, second)

    assert from_driver == from_metadata_tables
    assert from_driver["main"] == second["snapshot_id"] == lake.current_snapshot_id(table)
    assert from_driver["audit"] == first["snapshot_id"] == from_driver["first"]["snapshot_id"]
    assert from_driver["v1"] == second["snapshot_id"]
    assert from_driver["audit as a tag"] is None and from_driver["v1 as a branch"] is None
    assert from_driver["missing"] is None
    assert from_driver["first exists"] is True and from_driver["unknown exists"] is False
    assert from_driver["second"]["parent_snapshot_id"] == first["snapshot_id"]
    assert from_driver["second"]["added_records"] == 1
    in_pyiceberg = lake.summary(table, second["snapshot_id"])  # with the operation among the entries
    assert from_driver["second"]["summary"] == {k: v for k, v in in_pyiceberg.items() if k != "operation"}
    assert from_driver["lineage"]["snapshot_id"] == second["snapshot_id"]
    assert from_driver["lineage"]["location"] == lake.load(table).location()


def test_a_table_without_snapshots_has_no_refs(spark, table):
    spark.sql(f"CREATE TABLE {table} (id INT) USING iceberg")
    assert current_snapshot_id(spark, table) is None
    assert lineage.describe_table(spark, table)["snapshot_id"] is None

"""What the operators need for lineage: each table's storage location, schema and snapshot.

OpenLineage names an Iceberg dataset by where its files live (as openlineage-spark does), and
describes it with its schema and the snapshot read or written. Only the driver can ask the
catalog cheaply, so the job adds this to its result under ``lineage``; the operator turns it into
OpenLineage facets and never shows it in XCom. It is best effort: a table that cannot be
described is left out, and the job's own result is unaffected.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from airflow_iceberg.jobs.spec.action import ActionSpec
from airflow_iceberg.jobs.spec.identifiers import quote_identifier
from airflow_iceberg.jobs.table_state import current_snapshot_id, driver_table, table_exists

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def tables_of(spec: ActionSpec) -> list[str]:
    """Every Iceberg table a request reads or writes: its table, source table and sink table."""
    source = getattr(spec, "source", None)
    names = [spec.table, getattr(source, "table", None), getattr(spec, "sink_table", None)]
    return list(dict.fromkeys(name for name in names if name))


def describe_tables(spark: SparkSession, tables: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``{table: {location, schema, snapshot_id}}`` for each table that exists and can be described."""
    described = {}
    for table in tables:
        try:
            if table_exists(spark, table):
                described[table] = describe_table(spark, table)
        except Exception as error:  # lineage must never fail the job
            print(f"airflow-iceberg: no lineage for {table}: {type(error).__name__}: {error}", flush=True)
    return described


def describe_table(spark: SparkSession, table: str) -> dict[str, Any]:
    """Location and current snapshot from the table's metadata in the driver; schema from its analysis.

    ``DESCRIBE TABLE EXTENDED`` tells the same location (Iceberg's ``SparkTable`` reports the
    table's ``location()``) but costs a command's execution, 1 to 2 s in a fresh JVM: it is
    only used where the driver holds no table (a Spark Connect session). Either way, a table
    that is not an Iceberg table fails here and gets no lineage, as before.
    """
    schema = [
        {"name": f.name, "type": f.dataType.simpleString()}
        for f in spark.table(quote_identifier(table)).schema.fields
    ]
    loaded = driver_table(spark, table)
    if loaded is None:
        rows = spark.sql(f"DESCRIBE TABLE EXTENDED {quote_identifier(table)}").collect()
        location = next((row.data_type for row in rows if row.col_name == "Location"), None)
        return {"location": location, "schema": schema, "snapshot_id": current_snapshot_id(spark, table)}
    head = loaded.currentSnapshot()
    return {
        "location": str(loaded.location()),
        "schema": schema,
        "snapshot_id": int(head.snapshotId()) if head is not None else None,
    }

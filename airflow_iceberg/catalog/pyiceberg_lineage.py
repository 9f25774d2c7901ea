"""A step's ``lineage`` when it ran in the worker through pyiceberg: its table, described as the job does.

The Spark job adds to its result each table's location, schema, write format and snapshot
(:func:`airflow_iceberg.jobs.lineage.describe_lineage`), which the operator turns into the
OpenLineage datasets of the task. A publish, tag or rollback that ran through pyiceberg
describes its table from the metadata it committed or read, in the same words: the schema as
Iceberg's Spark runtime presents the table to Spark (``TypeToSparkType``: an Iceberg ``long`` is
Spark's ``long``, ``timestamptz`` is ``timestamp``, ``timestamp`` is ``timestamp_ntz``, ``uuid``
is ``string``, ``fixed`` is ``binary``), run through the same
:func:`~airflow_iceberg.jobs.lineage.openlineage_fields`. No Spark application ran, so none is
named. Best effort, like all lineage: a table that cannot be described is left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_iceberg.jobs.lineage import DEFAULT_FILE_FORMAT, WRITE_FORMAT_PROPERTY, openlineage_fields

if TYPE_CHECKING:
    from pyiceberg.table.metadata import TableMetadata

#: Iceberg's primitive types (their pyiceberg names) and the Spark type Iceberg's runtime reads them as.
SPARK_TYPE_NAMES = {
    "boolean": "boolean",
    "int": "integer",
    "long": "long",
    "float": "float",
    "double": "double",
    "date": "date",
    "timestamp": "timestamp_ntz",
    "timestamptz": "timestamp",
    "string": "string",
    "uuid": "string",
    "binary": "binary",
    "unknown": "void",
}


def describe_lineage(table: str, metadata: TableMetadata | None) -> dict[str, Any]:
    """The result's ``lineage`` for ``table`` as ``metadata`` holds it (no Spark application)."""
    tables: dict[str, Any] = {}
    if metadata is not None:
        try:
            tables[table] = describe_table(metadata)
        except Exception as error:  # lineage must never fail the step
            print(f"airflow-iceberg: no lineage for {table}: {type(error).__name__}: {error}", flush=True)
    return {"tables": tables, "query_tables": [], "application": {}}


def describe_table(metadata: TableMetadata) -> dict[str, Any]:
    """``{location, schema, format, snapshot_id}``, as :func:`airflow_iceberg.jobs.lineage.describe_table`."""
    return {
        "location": metadata.location,
        "schema": openlineage_fields(spark_struct(metadata.schema())),
        "format": str(metadata.properties.get(WRITE_FORMAT_PROPERTY, DEFAULT_FILE_FORMAT)).lower(),
        "snapshot_id": metadata.current_snapshot_id,
    }


def spark_struct(struct: Any) -> dict[str, Any]:
    """An Iceberg struct (or schema) as Spark's JSON form of the struct Iceberg's runtime gives Spark."""
    return {
        "type": "struct",
        "fields": [
            {
                "name": field.name,
                "type": spark_type(field.field_type),
                "nullable": not field.required,
                "metadata": {"comment": field.doc} if field.doc else {},
            }
            for field in struct.fields
        ],
    }


def spark_type(iceberg_type: Any) -> Any:
    """One Iceberg type as Spark's JSON names it; raises for a type Spark cannot read (``time``, nanos)."""
    from pyiceberg.types import DecimalType, FixedType, ListType, MapType, StructType

    if isinstance(iceberg_type, StructType):
        return spark_struct(iceberg_type)
    if isinstance(iceberg_type, ListType):
        return {
            "type": "array",
            "elementType": spark_type(iceberg_type.element_type),
            "containsNull": not iceberg_type.element_required,
        }
    if isinstance(iceberg_type, MapType):
        return {
            "type": "map",
            "keyType": spark_type(iceberg_type.key_type),
            "valueType": spark_type(iceberg_type.value_type),
            "valueContainsNull": not iceberg_type.value_required,
        }
    if isinstance(iceberg_type, DecimalType):
        return f"decimal({iceberg_type.precision},{iceberg_type.scale})"
    if isinstance(iceberg_type, FixedType):
        return "binary"
    name = str(iceberg_type)
    if name not in SPARK_TYPE_NAMES:
        raise ValueError(f"Spark does not read Iceberg's {name} type")
    return SPARK_TYPE_NAMES[name]

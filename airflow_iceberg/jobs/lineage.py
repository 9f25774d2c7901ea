"""What the operators need for lineage: each table's storage location, schema, format and snapshot.

OpenLineage names an Iceberg dataset by where its files live (as openlineage-spark does), and
describes it with its schema (in openlineage-spark's types, :func:`openlineage_fields`), its
write format and the snapshot read or written. Only the driver can ask the
catalog cheaply, so the job adds this to its result under ``lineage``; the operator turns it into
OpenLineage facets and never shows it in XCom. It is best effort: a table that cannot be
described is left out, and the job's own result is unaffected.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_iceberg.jobs.spec.action import ActionSpec
from airflow_iceberg.jobs.spec.identifiers import quote_identifier, quote_name
from airflow_iceberg.jobs.table_state import current_snapshot_id, driver_table, has_driver_jvm, table_exists

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: The table property that names the format new data files are written in, and Iceberg's default.
WRITE_FORMAT_PROPERTY, DEFAULT_FILE_FORMAT = "write.format.default", "parquet"


def describe_lineage(spark: SparkSession, spec: ActionSpec) -> dict[str, Any]:
    """The result's ``lineage``: ``tables`` (each described), ``query_tables`` and ``application``.

    ``query_tables`` is :func:`query_tables`: ``{"table", "snapshot_id"}`` per table the query read.

    ``query_tables`` are the tables a source query read (:func:`query_tables`), described with
    the request's own tables; ``application`` is :func:`describe_application`.
    """
    queried = query_tables(spark, getattr(getattr(spec, "source", None), "query", None))
    names = [read["table"] for read in queried]
    return {
        "tables": describe_tables(spark, dict.fromkeys([*tables_of(spec), *names])),
        "query_tables": queried,
        "application": describe_application(spark),
    }


def query_tables(spark: SparkSession, query: str | None) -> list[dict[str, Any]]:
    """The catalog tables a source query reads, from Spark's analysed plan, and at which snapshot.

    ``{"table": "catalog.namespace.table", "snapshot_id": ...}``, each (table, snapshot) once;
    ``snapshot_id`` is the one a time-travel read (``VERSION AS OF``, ``TIMESTAMP AS OF``)
    resolved to, None for the table's current state. Analysis resolves every table, view and CTE
    without running the query. Only in spark-submit mode: a Spark Connect client holds no JVM
    plan, so there the list is empty. Best effort, like all lineage.
    """
    if not query or not has_driver_jvm(spark):
        return []
    try:
        plan = spark.sql(query)._jdf.queryExecution().analyzed()
        reads = dict.fromkeys(_v2_relation_tables(plan))
        return [{"table": table, "snapshot_id": snapshot_id} for table, snapshot_id in reads]
    except Exception as error:  # lineage must never fail the job
        print(f"airflow-iceberg: no lineage for the source query's tables: {type(error).__name__}: {error}")
        return []


def _v2_relation_tables(plan: Any) -> Iterable[tuple[str, int | None]]:
    """``catalog.namespace.table`` of each ``DataSourceV2Relation`` (a catalog table) in a JVM plan."""
    stack = [plan]
    while stack:
        node = stack.pop()
        if node.getClass().getSimpleName() == "DataSourceV2Relation" and node.identifier().isDefined():
            identifier = node.identifier().get()
            parts = [node.catalog().get().name(), *identifier.namespace(), identifier.name()]
            name = ".".join(part if _PLAIN_NAME.match(part) else quote_name(part) for part in parts)
            table = node.table()  # Iceberg's SparkTable knows the snapshot a time-travel read resolved to
            snapshot_id = table.snapshotId() if table.getClass().getSimpleName() == "SparkTable" else None
            if snapshot_id is not None and not _is_time_travel(node):
                snapshot_id = None
            yield name, int(snapshot_id) if snapshot_id is not None else None
        children = node.children()
        stack.extend(children.apply(index) for index in range(children.size() - 1, -1, -1))
        # a subquery (IN, EXISTS, scalar) is an expression, not a child: its plan is read too
        subqueries = node.subqueries()
        stack.extend(subqueries.apply(index) for index in range(subqueries.size()))


def _is_time_travel(relation: Any) -> bool:
    """Whether a ``DataSourceV2Relation`` with a snapshot id reads the table as of a time-travel clause.

    Iceberg's runtime for Spark 4.1 pins every loaded ``SparkTable`` to a snapshot, a plain read
    too, and Spark 4.1 records the ``VERSION``/``TIMESTAMP AS OF`` on the relation itself
    (``timeTravelSpec``). Earlier lines have no such field, and their ``SparkTable`` carries a
    snapshot id only when loaded for time travel.
    """
    try:
        return bool(relation.timeTravelSpec().isDefined())
    except Exception:  # Spark before 4.1: no timeTravelSpec on the relation
        return True


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


def openlineage_fields(struct: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``schema`` facet's fields of a Spark schema (its ``jsonValue()``), as openlineage-spark has them.

    openlineage-spark (``PlanUtils.schemaFacet``) names a type by Spark's ``typeName``
    (``long``, ``integer``, ``string``, ``decimal(10,2)``, ``timestamp``), gives a ``struct`` its
    fields, an ``array`` one field ``_element`` and a ``map`` the fields ``key`` and ``value``,
    and a column's comment as its description. Spark's JSON form spells atomic types by that
    same ``typeName``, and it is the same over Spark Connect, where no JVM type is at hand.
    """
    return [
        _field(str(field["name"]), field["type"], (field.get("metadata") or {}).get("comment"))
        for field in struct.get("fields", [])
    ]


def _field(name: str, data_type: Any, comment: str | None = None) -> dict[str, Any]:
    described: dict[str, Any] = {"name": name}
    if isinstance(data_type, str):
        described["type"] = data_type
    elif data_type.get("type") == "struct":
        described.update(type="struct", fields=openlineage_fields(data_type))
    elif data_type.get("type") == "array":
        described.update(type="array", fields=[_field("_element", data_type["elementType"])])
    elif data_type.get("type") == "map":
        key, value = _field("key", data_type["keyType"]), _field("value", data_type["valueType"])
        described.update(type="map", fields=[key, value])
    else:  # a user-defined type: Spark names it by its SQL type
        described["type"] = str(data_type.get("sqlType", data_type.get("type", "udt")))
    if comment:
        described["description"] = str(comment)
    return described


def describe_application(spark: SparkSession) -> dict[str, str]:
    """The Spark application's id and name (``spark.app.id``, ``spark.app.name``), those Spark knows.

    Read from the session's conf, which a Spark Connect server answers too.
    """
    described = {}
    for key, conf in (("id", "spark.app.id"), ("name", "spark.app.name")):
        try:
            value = spark.conf.get(conf, None)
        except Exception:  # lineage must never fail the job
            value = None
        if value:
            described[key] = str(value)
    return described


def describe_table(spark: SparkSession, table: str) -> dict[str, Any]:
    """Location and current snapshot from the table's metadata in the driver; schema from its analysis.

    ``DESCRIBE TABLE EXTENDED`` tells the same location (Iceberg's ``SparkTable`` reports the
    table's ``location()``) but costs a command's execution, 1 to 2 s in a fresh JVM: it is
    only used where the driver holds no table (a Spark Connect session). Either way, a table
    that is not an Iceberg table fails here and gets no lineage, as before.
    """
    schema = openlineage_fields(spark.table(quote_identifier(table)).schema.jsonValue())
    loaded = driver_table(spark, table)
    if loaded is None:
        rows = spark.sql(f"DESCRIBE TABLE EXTENDED {quote_identifier(table)}").collect()
        details = {row.col_name: row.data_type for row in rows}
        # Iceberg's SparkTable reports its write format as the property format=iceberg/<format>
        found = re.search(r"(?:^|[\[,])format=iceberg/(\w+)", details.get("Table Properties") or "")
        return {
            "location": details.get("Location"),
            "schema": schema,
            "format": found.group(1).lower() if found else DEFAULT_FILE_FORMAT,
            "snapshot_id": current_snapshot_id(spark, table),
        }
    head = loaded.currentSnapshot()
    return {
        "location": str(loaded.location()),
        "schema": schema,
        "format": str(loaded.properties().getOrDefault(WRITE_FORMAT_PROPERTY, DEFAULT_FILE_FORMAT)).lower(),
        "snapshot_id": int(head.snapshotId()) if head is not None else None,
    }

"""Operators that write to an Iceberg table with DataFrameWriterV2.

Each maps to one writer call: ``create`` / ``replace`` / ``createOrReplace``, ``append``,
``overwritePartitions`` and ``overwrite(condition)``. Rows come from a Spark SQL query, another
table (in any configured catalog), or files. The XCom is the committed snapshot: its id,
operation and summary counts (``added_records``, ``total_records`` ...).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from airflow_iceberg.exceptions import InvalidSpecError
from airflow_iceberg.jobs.spec.action import ActionSpec
from airflow_iceberg.jobs.spec.partition_keys import partition_condition
from airflow_iceberg.jobs.spec.sources import Source
from airflow_iceberg.jobs.spec.writes import CREATE_MODES, WriteSpec
from airflow_iceberg.operators.base import IcebergSparkSubmitOperator
from airflow_iceberg.operators.rendered import as_branch, as_dict, as_list

_WRITE_TEMPLATE_FIELDS = (
    "source_query",
    "source_table",
    "source_path",
    "source_options",
    "source_schema",
    "write_options",
    "branch",
)


def source_of(operator: Any) -> Source:
    """The rendered ``source_*`` arguments of a write or merge operator, as the job's :class:`Source`."""
    return Source(
        query=operator.source_query,
        table=operator.source_table,
        path=operator.source_path,
        format=operator.source_format,
        options=as_dict(operator.source_options, "source_options"),
        schema=operator.source_schema or None,
    )


def qualify_with_source(operator: IcebergSparkSubmitOperator, spec: Any, catalog_names: Sequence[str]) -> Any:
    """``spec`` with its table and its source table (if any) qualified by their catalogs."""
    source = spec.source
    if source.table:
        source = dataclasses.replace(source, table=operator.qualify(source.table, catalog_names))
    return dataclasses.replace(spec, table=operator.qualify(spec.table, catalog_names), source=source)


class IcebergWriteOperator(IcebergSparkSubmitOperator):
    """Base class of the write operators: where the rows come from and how they are written.

    Give exactly one source.

    :param source_query: A Spark SQL query (``SELECT``/``WITH``/``VALUES``) producing the rows. (templated)
    :param source_table: A table to copy rows from, in any configured catalog. (templated)
    :param source_path: Files to read the rows from; needs ``source_format``. (templated)
    :param source_format: ``parquet``, ``csv``, ``json``, ``orc``, ``avro`` or ``text``.
    :param source_options: DataFrameReader options for a file source, e.g. ``{"header": "true"}``. (templated)
    :param source_schema: The columns to read a file source with, as Spark DDL
        (``"order_id INT, order_date DATE"``), or ``"table"`` for the table's own schema. Without it
        Spark infers the schema, and JSON and CSV never yield a ``DATE``. (templated)
    :param write_options: Iceberg write options, e.g. ``{"write-format": "avro",
        "isolation-level": "serializable"}``. (templated)
    :param merge_schema: Add columns that are in the source but not in the table
        (``merge-schema`` write option; the table needs ``write.spark.accept-any-schema=true``,
        which the create operator sets when ``merge_schema`` is true). Default False.
    :param branch: Write to this branch instead of ``main`` (write-audit-publish): it is created
        from ``main``'s current snapshot when missing, and ``main`` does not change. Not for the
        create operator. (templated)
    :param reset_branch: Start ``branch`` afresh from ``main``'s current snapshot before writing,
        dropping what an earlier run (a failed audit) left on it, so the branch is ``main`` plus
        this write. Set it on the first task of a run that writes the branch. Default False.
    """

    mode: ClassVar[str]
    writes_table = True
    template_fields: Sequence[str] = (*IcebergSparkSubmitOperator.template_fields, *_WRITE_TEMPLATE_FIELDS)

    def __init__(
        self,
        *,
        source_query: str | None = None,
        source_table: str | None = None,
        source_path: str | None = None,
        source_format: str | None = None,
        source_options: Mapping[str, Any] | None = None,
        source_schema: str | None = None,
        write_options: Mapping[str, Any] | None = None,
        merge_schema: bool = False,
        branch: str | None = None,
        reset_branch: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.source_query = source_query
        self.source_table = source_table
        self.source_path = source_path
        self.source_format = source_format
        self.source_options = source_options
        self.source_schema = source_schema
        self.write_options = write_options
        self.merge_schema = merge_schema
        self.branch = branch
        self.reset_branch = reset_branch

    def build_spec(self) -> WriteSpec:
        return WriteSpec(
            table=self.table,
            mode=self.mode,
            source=source_of(self),
            write_options=as_dict(self.write_options, "write_options"),
            merge_schema=self.merge_schema,
            branch=as_branch(self.branch),
            reset_branch=self.reset_branch,
        )

    def qualify_spec(self, spec: ActionSpec, catalog_names: Sequence[str]) -> WriteSpec:
        assert isinstance(spec, WriteSpec)
        return qualify_with_source(self, spec, catalog_names)

    def log_result(self, result: Mapping[str, Any]) -> None:
        if result.get("committed") is False:
            self.log.info("Committed nothing to %s: there was nothing to write", result.get("table"))
            return
        self.log.info(
            "Committed snapshot %s to %s (%s): %s records added, %s records in table",
            result.get("snapshot_id"),
            result.get("table"),
            result.get("operation"),
            result.get("added_records"),
            result.get("total_records"),
        )


class IcebergCreateTableOperator(IcebergWriteOperator):
    """Create an Iceberg table from query results: ``create()``, ``replace()`` or ``createOrReplace()``.

    :param mode: ``create`` (fails if the table exists), ``replace`` (fails if it does not) or
        ``create_or_replace``. Default ``create``.
    :param partition_by: Partition transforms: ``col``, ``years(col)``, ``months(col)``,
        ``days(col)``, ``hours(col)``, ``bucket(N, col)``, ``truncate(W, col)``; a column name
        bare (``order-date``) or in backticks (``days(`order date`)``). (templated)
    :param table_properties: Iceberg table properties, e.g. ``{"format-version": "2"}``. (templated)
    """

    template_fields: Sequence[str] = (
        *IcebergWriteOperator.template_fields,
        "partition_by",
        "table_properties",
    )

    def __init__(
        self,
        *,
        mode: str = "create",
        partition_by: Sequence[str] | str = (),
        table_properties: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.mode = mode  # type: ignore[misc]  # instance value for this class only
        self.partition_by = partition_by
        self.table_properties = table_properties

    def build_spec(self) -> WriteSpec:
        if self.mode not in CREATE_MODES:
            raise InvalidSpecError(f"mode must be one of {', '.join(CREATE_MODES)}, got {self.mode!r}")
        return dataclasses.replace(
            super().build_spec(),
            partition_by=tuple(as_list(self.partition_by, "partition_by")),
            table_properties=as_dict(self.table_properties, "table_properties"),
        )


class IcebergAppendOperator(IcebergWriteOperator):
    """Append rows to an existing Iceberg table (DataFrameWriterV2 ``append()``)."""

    mode = "append"


class IcebergOverwritePartitionsOperator(IcebergWriteOperator):
    """Replace every partition the new rows touch, keep the others (``overwritePartitions()``)."""

    mode = "overwrite_partitions"


class IcebergOverwriteOperator(IcebergWriteOperator):
    """Delete the rows matching ``condition`` and write the new rows, atomically (``overwrite(expr)``).

    Give ``condition``, or ``partition_key`` and ``partition_column`` to replace exactly one time
    partition: the condition is then that partition's range, and a source row outside it fails
    the write before any file is written (Spark would append it wherever it falls).

    :param condition: A Spark SQL boolean expression, e.g. ``"day = DATE'2024-01-02'"``. (templated)
    :param partition_key: Replace this time partition: an Airflow partition key, ``2024-01-02T05``
        (an hour), ``2024-01-02`` (a day), ``2024-01`` or ``2024``, usually ``"{{ partition_key }}"``
        in a partition-scoped DAG. (templated)
    :param partition_column: The DATE or TIMESTAMP column the table is partitioned by
        (``event_ts`` for ``hours(event_ts)``). (templated)
    """

    mode = "overwrite"
    template_fields: Sequence[str] = (
        *IcebergWriteOperator.template_fields,
        "condition",
        "partition_key",
        "partition_column",
    )

    def __init__(
        self,
        *,
        condition: str | None = None,
        partition_key: str | None = None,
        partition_column: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.condition = condition
        self.partition_key = partition_key
        self.partition_column = partition_column

    def build_spec(self) -> WriteSpec:
        if (self.partition_key is None) == (not self.condition):
            raise InvalidSpecError("give condition or partition_key (with partition_column), not both")
        return dataclasses.replace(
            super().build_spec(),
            condition=partition_condition(self.partition_key, self.partition_column, self.condition or None),
            source_within_condition=self.partition_key is not None,
        )

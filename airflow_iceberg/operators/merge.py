"""Row-level changes: ``MERGE INTO`` (upserts, CDC, slowly changing dimensions) and ``DELETE FROM``.

Each is one SQL command, so one Iceberg commit, tagged with the task's commit id and Airflow
identity like the writes: a retry of a try that committed returns that commit. Both can target
a branch (write-audit-publish), and start it afresh from ``main`` (``reset_branch``). The XCom
is the committed snapshot with its counts (``record_count_change``, ``added_records``,
``deleted_records``: see docs/operators.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_iceberg.jobs.spec.action import ActionSpec
from airflow_iceberg.jobs.spec.row_changes import DeleteSpec, MergeClause, MergeSpec
from airflow_iceberg.operators.base import IcebergSparkSubmitOperator
from airflow_iceberg.operators.rendered import as_branch, as_list
from airflow_iceberg.operators.write import qualify_with_source, source_of


class IcebergMergeOperator(IcebergSparkSubmitOperator):
    """``MERGE INTO`` an Iceberg table from a query, a table or files.

    In conditions and expressions, ``t`` is the table and ``s`` the source. Without ``clauses``
    the merge is an upsert: ``WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *``.
    A source with two rows for one table row fails (``MergeSourceError``) and changes nothing; with
    ``keys``, so does a source with two rows for one key, or a NULL key.

    :param source_query: A Spark SQL query producing the source rows. (templated)
    :param source_table: A table to merge from, in any configured catalog. (templated)
    :param source_path: Files to merge from; needs ``source_format``. (templated)
    :param source_format: ``parquet``, ``csv``, ``json``, ``orc``, ``avro`` or ``text``.
    :param source_options: DataFrameReader options for a file source. (templated)
    :param source_schema: The columns to read a file source with (Spark DDL), or ``"table"``. (templated)
    :param keys: Match on these key columns (``t.k = s.k AND ...``), bare or in backticks. (templated)
    :param on: Or match on this condition, e.g. ``"t.id = s.id AND t.day = s.day"``. (templated)
    :param clauses: ``WHEN`` clauses in order, each a dict: ``when`` (``matched``, ``not_matched``,
        ``not_matched_by_source``), ``then`` (``update``, ``delete``, ``insert``), optional
        ``condition``, and ``set`` (update: ``{column: expression}``; omitted = ``UPDATE SET *``) or
        ``values`` (insert: ``{column: expression}``; omitted = ``INSERT *``). (templated)
    :param branch: Merge into this branch instead of ``main``; created from ``main``'s current
        snapshot when missing. (templated)
    :param reset_branch: Start ``branch`` afresh from ``main``'s current snapshot before merging,
        dropping what an earlier run (a failed audit) left on it, so the branch is ``main`` plus
        this merge. Set it on the first task of a run that writes the branch. Default False.
    """

    writes_table = True
    reads_written_table = True

    template_fields: Sequence[str] = (
        *IcebergSparkSubmitOperator.template_fields,
        "source_query",
        "source_table",
        "source_path",
        "source_options",
        "source_schema",
        "keys",
        "on",
        "clauses",
        "branch",
    )

    def __init__(
        self,
        *,
        source_query: str | None = None,
        source_table: str | None = None,
        source_path: str | None = None,
        source_format: str | None = None,
        source_options: Mapping[str, Any] | None = None,
        source_schema: str | None = None,
        keys: Sequence[str] | None = None,
        on: str | None = None,
        clauses: Sequence[Mapping[str, Any]] | None = None,
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
        self.keys = keys
        self.on = on
        self.clauses = clauses
        self.branch = branch
        self.reset_branch = reset_branch

    def build_spec(self) -> MergeSpec:
        return MergeSpec(
            table=self.table,
            source=source_of(self),
            keys=tuple(as_list(self.keys, "keys")),
            on=self.on or None,
            clauses=tuple(MergeClause.from_mapping(c) for c in as_list(self.clauses, "clauses")),
            branch=as_branch(self.branch),
            reset_branch=self.reset_branch,
        )

    def qualify_spec(self, spec: ActionSpec, catalog_names: Sequence[str]) -> MergeSpec:
        assert isinstance(spec, MergeSpec)
        return qualify_with_source(self, spec, catalog_names)

    def log_result(self, result: Mapping[str, Any]) -> None:
        _log_row_change(self, result)


class IcebergDeleteOperator(IcebergSparkSubmitOperator):
    """``DELETE FROM`` an Iceberg table ``WHERE`` a condition (GDPR deletes, retention by age).

    A condition that matches no row still commits, an empty snapshot (``record_count_change`` 0);
    only a condition Spark folds to false (``1 = 0``) commits nothing (``committed: false``).

    :param condition: A Spark SQL boolean expression, e.g. ``"customer_id = 42"``. (templated)
    :param branch: Delete on this branch instead of ``main``; created from ``main``'s current
        snapshot when missing. (templated)
    :param reset_branch: Start ``branch`` afresh from ``main``'s current snapshot before deleting
        (see :class:`IcebergMergeOperator`). Default False.
    """

    writes_table = True
    reads_written_table = True

    template_fields: Sequence[str] = (*IcebergSparkSubmitOperator.template_fields, "condition", "branch")

    def __init__(
        self, *, condition: str, branch: str | None = None, reset_branch: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.condition = condition
        self.branch = branch
        self.reset_branch = reset_branch

    def build_spec(self) -> DeleteSpec:
        return DeleteSpec(
            table=self.table,
            condition=self.condition,
            branch=as_branch(self.branch),
            reset_branch=self.reset_branch,
        )

    def log_result(self, result: Mapping[str, Any]) -> None:
        _log_row_change(self, result)


def _log_row_change(operator: IcebergSparkSubmitOperator, result: Mapping[str, Any]) -> None:
    if result.get("committed") is False:
        operator.log.info("Committed nothing to %s: Spark found nothing to change", result.get("table"))
        return
    operator.log.info(
        "Committed snapshot %s to %s (branch %s): row count changed by %s (%s records added, %s deleted)",
        result.get("snapshot_id"),
        result.get("table"),
        result.get("branch"),
        result.get("record_count_change"),
        result.get("added_records"),
        result.get("deleted_records"),
    )

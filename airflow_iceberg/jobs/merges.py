"""Row-level changes: ``MERGE INTO`` and ``DELETE FROM``, on ``main`` or on a branch.

Both are one SQL command, so one Iceberg commit, tagged like every write (commit id and Airflow
identity through ``CommitMetadata.withCommitProperties``): a retry of a try that committed finds
that commit and returns it instead of changing the rows a second time. Copy-on-write and
merge-on-read work alike; the table's ``write.merge.mode`` / ``write.delete.mode`` decide.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_iceberg.jobs import action_specs, user_sql
from airflow_iceberg.jobs.branches import branch_for_commit, branch_identifier
from airflow_iceberg.jobs.commits import earlier_commit, snapshot_properties_for, with_commit_properties
from airflow_iceberg.jobs.table_state import (
    TableStateError,
    find_commit,
    ref_snapshot_id,
    require_table,
    snapshot_summary,
)
from airflow_iceberg.jobs.writes import load_source

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class MergeSourceError(TableStateError):
    """The merge source matched one target row with several source rows; nothing was changed."""


def check_expressions(spark: SparkSession, expressions: Iterable[tuple[str, str]]) -> None:
    """Check each ``(what, text)`` is one SQL expression (:func:`user_sql.check_expression`)."""
    for what, text in expressions:
        user_sql.check_expression(spark, text, what)


def _merge_expressions(spec: action_specs.MergeSpec) -> list[tuple[str, str]]:
    found = [("merge condition 'on'", spec.match_condition)]
    for clause in spec.clauses:
        if clause.condition is not None:
            found.append((f"merge clause ({clause.when}) condition", clause.condition))
        found += [(f"merge clause value of {column!r}", text) for column, text in clause.assignments.items()]
    return found


def merge_into(
    spark: SparkSession,
    spec: action_specs.MergeSpec,
    commit_id: str | None = None,
    commit_properties: Mapping[str, str] | None = None,
    reuse_commit: bool = False,
) -> dict[str, Any]:
    """Run ``MERGE INTO`` from the spec's source and describe the snapshot it committed."""
    ref = spec.branch or "main"
    earlier = earlier_commit(spark, spec.table, commit_id, ref=ref) if reuse_commit else None
    if earlier is not None:
        return {"table": spec.table, "branch": ref, **earlier, "reused_earlier_commit": True}
    require_table(spark, spec.table)
    check_expressions(spark, _merge_expressions(spec))
    source = load_source(spark, spec.source, spec.table)
    view = f"airflow_iceberg_merge_source_{uuid.uuid4().hex}"
    before = _head(spark, spec.table, ref)
    sql = (
        f"MERGE INTO {branch_identifier(spec.table, spec.branch)} {action_specs.TARGET_ALIAS} "
        f"USING {view} {action_specs.SOURCE_ALIAS} ON {spec.match_condition} "
        + " ".join(clause.sql() for clause in spec.clauses)
    )
    source.createOrReplaceTempView(view)
    try:
        with branch_for_commit(spark, spec.table, spec.branch):
            _commit_sql(spark, sql, commit_id, commit_properties)
    except Exception as error:
        if "MERGE_CARDINALITY_VIOLATION" not in str(error):
            raise
        raise MergeSourceError(
            f"the merge source has more than one row for a row of {spec.table} (match: "
            f"{spec.match_condition}): make the source unique on the match, e.g. keep the latest row per "
            "key. Nothing was changed"
        ) from None
    finally:
        spark.catalog.dropTempView(view)
    return {"table": spec.table, "branch": ref, **_committed(spark, spec.table, ref, commit_id, before)}


def delete_from(
    spark: SparkSession,
    spec: action_specs.DeleteSpec,
    commit_id: str | None = None,
    commit_properties: Mapping[str, str] | None = None,
    reuse_commit: bool = False,
) -> dict[str, Any]:
    """Run ``DELETE FROM ... WHERE`` and describe the snapshot it committed (if any row matched)."""
    ref = spec.branch or "main"
    earlier = earlier_commit(spark, spec.table, commit_id, ref=ref) if reuse_commit else None
    if earlier is not None:
        return {"table": spec.table, "branch": ref, **earlier, "reused_earlier_commit": True}
    require_table(spark, spec.table)
    check_expressions(spark, [("delete condition", spec.condition)])
    before = _head(spark, spec.table, ref)
    sql = f"DELETE FROM {branch_identifier(spec.table, spec.branch)} WHERE {spec.condition}"
    with branch_for_commit(spark, spec.table, spec.branch):
        _commit_sql(spark, sql, commit_id, commit_properties)
    return {"table": spec.table, "branch": ref, **_committed(spark, spec.table, ref, commit_id, before)}


def _head(spark: SparkSession, table: str, ref: str) -> int | None:
    """Where ``ref`` points now; for a branch still to be made, where it will start (``main``)."""
    head = ref_snapshot_id(spark, table, ref, "BRANCH")
    return head if head is not None else ref_snapshot_id(spark, table, "main", "BRANCH")


def _commit_sql(
    spark: SparkSession, sql: str, commit_id: str | None, commit_properties: Mapping[str, str] | None
) -> None:
    properties = snapshot_properties_for({}, commit_id, commit_properties)
    with_commit_properties(spark, properties, lambda: spark.sql(sql))


def _committed(
    spark: SparkSession, table: str, ref: str, commit_id: str | None, before: int | None
) -> dict[str, Any]:
    """The snapshot this job committed to ``ref``, or ``committed: false`` when it committed nothing.

    A delete that matches no row makes no commit; reporting the ref's current snapshot then would
    describe someone else's commit.
    """
    if commit_id:
        found = find_commit(spark, table, commit_id, ref=ref)
    else:
        after = ref_snapshot_id(spark, table, ref, "BRANCH")
        found = snapshot_summary(spark, table, after) if after is not None and after != before else None
    if found is None:
        return {"committed": False, "snapshot_id": None}
    return {"committed": True, **found}

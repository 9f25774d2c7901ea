"""Table upkeep through Iceberg's Spark procedures: expire, compact, rewrite manifests and deletes.

Each returns what the procedure did (its output row: files rewritten, added and removed, bytes)
plus the snapshot of the ref it rewrote (``main``, or the compacted branch) before and after, so
the XCom says what changed. Rolling back, which must stay exactly-once across retries, is
:mod:`.rollback`.

A rewrite commits a ``replace`` snapshot on ``main``, after which ``main`` can no longer be
fast-forwarded to a branch made before it: write-audit-publish's publish would fail. Two ways
out. The rewrites can wait (``wait_for_branches``): while a matching branch waits to be
published, they change nothing. A matching branch at ``main``'s head waits too: it is what a
branch write looks like between making its branch and committing its (long) MERGE or write, and
compacting then would fail the publish that follows. Or, from Iceberg 1.11, compaction can
rewrite the branch itself (``rewrite_data_files(branch => ...)``): its ``replace`` snapshot lands
on the branch, which still descends from ``main``, so the publish fast-forwards ``main`` to
compacted files. Iceberg offers no branch for ``rewrite_manifests`` nor
``rewrite_position_delete_files`` (up to 1.12), which rewrite ``main`` only.

No rewrite changes a row, so none needs a commit id to stay exactly-once: a retry of a try that
committed finds nothing left to rewrite (or rewrites the same rows again) and the rows stay those
of the ref before the first try.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

from airflow_iceberg.jobs.branches import procedure_call, sql_string
from airflow_iceberg.jobs.iceberg_runtime import FIRST_ICEBERG_WITH_BRANCH_COMPACTION, require_runtime
from airflow_iceberg.jobs.merges import check_expressions
from airflow_iceberg.jobs.spec.upkeep import (
    ExpireSnapshotsSpec,
    RewriteDataFilesSpec,
    RewriteManifestsSpec,
    RewritePositionDeletesSpec,
    quoted_sort_order,
)
from airflow_iceberg.jobs.table_state import (
    TableStateError,
    branch_heads,
    driver_table,
    is_ancestor,
    metadata_table,
    ref_snapshot_id,
    require_table,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def sql_timestamp(epoch_ms: int) -> str:
    """A ``TIMESTAMP`` literal with an explicit UTC zone, so the session time zone cannot shift it."""
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc)
    return f"TIMESTAMP '{moment.strftime('%Y-%m-%d %H:%M:%S')}.{epoch_ms % 1000:03d}Z'"


def sql_map(options: dict[str, str]) -> str:
    return "map(" + ", ".join(f"{sql_string(k)}, {sql_string(v)}" for k, v in options.items()) + ")"


def _snapshot_ids(spark: SparkSession, table: str) -> set[int]:
    driver_table(spark, table)  # refreshes the catalog's cached table, which the metadata table reads
    rows = spark.table(metadata_table(table, "snapshots")).select("snapshot_id").collect()
    return {int(row.snapshot_id) for row in rows}


def branches_waiting_to_publish(
    spark: SparkSession, table: str, patterns: Sequence[str]
) -> list[dict[str, Any]]:
    """The branches matching ``patterns`` (``fnmatch``) that ``main`` can still be fast-forwarded to.

    Such a branch may be waiting to be published: its head is ``main``'s or descends from it. At
    ``main``'s head it may be a branch write in flight (the branch is made, the write has not
    committed yet), so it is waited for as well; a branch left there (published without
    ``drop_branch``) keeps the rewrites waiting until it is dropped. One that ``main`` moved away
    from cannot be fast-forwarded to any more, and is not waited for.
    """
    if not patterns:
        return []
    heads = branch_heads(spark, table)
    main = heads.get("main")
    waiting = []
    for name, head in sorted(heads.items()):
        if main is None or name == "main":
            continue
        if any(fnmatchcase(name, pattern) for pattern in patterns) and is_ancestor(spark, table, main, head):
            waiting.append({"branch": name, "snapshot_id": head})
    return waiting


def _run(
    spark: SparkSession,
    table: str,
    procedure: str,
    arguments: dict[str, str],
    wait_for_branches: Sequence[str] = (),
    ref: str = "main",
) -> dict[str, Any]:
    """Call ``procedure`` unless a branch matching ``wait_for_branches`` waits to be published.

    ``ref`` is the branch the procedure rewrites (``main`` unless it is given ``branch``): the
    result's snapshot ids are that branch's, before and after.
    """
    require_table(spark, table)
    before = ref_snapshot_id(spark, table, ref, "BRANCH")
    waiting = branches_waiting_to_publish(spark, table, wait_for_branches)
    if waiting:
        names = ", ".join(f"{entry['branch']} (snapshot {entry['snapshot_id']})" for entry in waiting)
        reason = (
            f"{procedure} of {table} skipped: branch {names} may be waiting to be published (a branch at "
            "main's snapshot may be a write in flight), and a rewrite committed to main now would leave "
            "main impossible to fast-forward to it. Nothing was changed; a later run does the work once "
            "the branch is gone: a leftover matching branch blocks compaction until it is published "
            "with drop_branch, or dropped"
        )
        print(f"airflow-iceberg: {reason}", flush=True)
        return {
            "table": table,
            "procedure": procedure,
            "skipped": True,
            "reason": reason,
            "waiting_for_branches": waiting,
            "previous_snapshot_id": before,
            "snapshot_id": before,
        }
    rows = procedure_call(spark, table, procedure, arguments)
    return {
        "table": table,
        "procedure": procedure,
        **({"branch": ref} if ref != "main" else {}),
        **(rows[0].asDict() if rows else {}),
        "previous_snapshot_id": before,
        "snapshot_id": ref_snapshot_id(spark, table, ref, "BRANCH"),
    }


def expire_snapshots(spark: SparkSession, spec: ExpireSnapshotsSpec) -> dict[str, Any]:
    """``expire_snapshots``: snapshots older than ``older_than`` beyond the last ``retain_last`` go."""
    require_table(spark, spec.table)
    arguments = {}
    if spec.older_than is not None:
        arguments["older_than"] = sql_timestamp(spec.older_than)
    if spec.retain_last is not None:
        arguments["retain_last"] = str(int(spec.retain_last))
    before = _snapshot_ids(spark, spec.table)
    result = _run(spark, spec.table, "expire_snapshots", arguments)
    # The ids that went, not a difference of counts: another writer's commit landing meanwhile
    # adds a snapshot that is no expired one.
    result["expired_snapshots_count"] = len(before - _snapshot_ids(spark, spec.table))
    return result


def rewrite_data_files(spark: SparkSession, spec: RewriteDataFilesSpec) -> dict[str, Any]:
    """``rewrite_data_files``: compact small files (binpack) or also sort them, on ``main`` or a branch.

    A branch is compacted only on Iceberg 1.11 or later, and only if it exists: either refusal
    comes before anything changes.
    """
    arguments = {"strategy": sql_string(spec.strategy)}
    checks = []
    if spec.sort_order is not None:
        arguments["sort_order"] = sql_string(quoted_sort_order(spec.sort_order))
    if spec.where is not None:
        checks.append(("where", spec.where))
        arguments["where"] = sql_string(spec.where)
    check_expressions(spark, checks)
    if spec.options:
        arguments["options"] = sql_map(spec.options)
    if spec.branch is None:
        return _run(spark, spec.table, "rewrite_data_files", arguments, spec.wait_for_branches)
    require_table(spark, spec.table)
    feature = f"rewrite_data_files of branch {spec.branch!r}"
    require_runtime(spark, spec.table, FIRST_ICEBERG_WITH_BRANCH_COMPACTION, feature)
    if ref_snapshot_id(spark, spec.table, spec.branch, "BRANCH") is None:
        if ref_snapshot_id(spark, spec.table, spec.branch, "TAG") is not None:
            raise TableStateError(
                f"{spec.table}'s {spec.branch!r} is a tag, not a branch: a tag's snapshot is never "
                "rewritten, give the branch to compact; nothing was changed"
            )
        raise TableStateError(
            f"{spec.table} has no branch {spec.branch!r} to compact (published and dropped already, or "
            "not made yet); nothing was changed"
        )
    arguments["branch"] = sql_string(spec.branch)
    return _run(spark, spec.table, "rewrite_data_files", arguments, ref=spec.branch)


def rewrite_manifests(spark: SparkSession, spec: RewriteManifestsSpec) -> dict[str, Any]:
    return _run(spark, spec.table, "rewrite_manifests", {}, spec.wait_for_branches)


def rewrite_position_deletes(
    spark: SparkSession, spec: RewritePositionDeletesSpec
) -> dict[str, Any]:
    arguments = {}
    if spec.where is not None:
        check_expressions(spark, [("where", spec.where)])
        arguments["where"] = sql_string(spec.where)
    if spec.options:
        arguments["options"] = sql_map(spec.options)
    return _run(spark, spec.table, "rewrite_position_delete_files", arguments, spec.wait_for_branches)

"""Write-audit-publish: writing to a branch, publishing it to ``main``, and tagging snapshots.

A write, merge or delete with ``branch`` lands on that branch only: readers of ``main`` see
nothing until :func:`publish_branch` fast-forwards ``main`` to it, which is one atomic metadata
commit. Fast-forward only: if ``main`` moved since the branch was made, publishing fails and
changes nothing, instead of silently dropping the newer commits of ``main``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from airflow_iceberg.jobs import action_specs
from airflow_iceberg.jobs.job_spec import quote_identifier, quote_name, split_identifier
from airflow_iceberg.jobs.table_state import (
    SnapshotNotFoundError,
    TableStateError,
    ref_snapshot_id,
    require_table,
    snapshot_exists,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class PublishError(TableStateError):
    """The target branch cannot be fast-forwarded to the audited branch; nothing was changed."""


def branch_identifier(table: str, branch: str | None) -> str:
    """The quoted identifier Spark writes to: ``table.branch_<name>`` for a branch, else the table."""
    return (
        f"{quote_identifier(table)}.{quote_name(f'branch_{branch}')}" if branch else quote_identifier(table)
    )


@contextmanager
def branch_for_commit(
    spark: SparkSession, table: str, branch: str | None, reset: bool = False
) -> Iterator[None]:
    """Run the block with ``branch`` ready for a commit; undo that if the block fails.

    Ready means made from ``main``'s current snapshot if missing, or, with ``reset``, pointed at
    that snapshot whatever it held (:func:`reset_branch`). The commit that fails in the block
    leaves the table as it was, and so does this: a branch it created is dropped again, and a
    branch it reset points back where it was, as long as it still points where this left it
    (no commit on it since).
    """
    if not branch:
        yield
        return
    previous = ref_snapshot_id(spark, table, branch, "BRANCH")
    moved_to = reset_branch(spark, table, branch) if reset else ensure_branch(spark, table, branch)
    try:
        yield
    except BaseException:
        if moved_to is not None and ref_snapshot_id(spark, table, branch, "BRANCH") == moved_to:
            _undo_branch_move(spark, table, branch, previous)
        raise


def _undo_branch_move(spark: SparkSession, table: str, branch: str, previous: int | None) -> None:
    name = quote_identifier(table)
    if previous is None:
        spark.sql(f"ALTER TABLE {name} DROP BRANCH IF EXISTS {branch}")
    else:
        spark.sql(f"ALTER TABLE {name} REPLACE BRANCH {branch} AS OF VERSION {int(previous)}")


def ensure_branch(spark: SparkSession, table: str, branch: str) -> int | None:
    """Create ``branch`` from ``main``'s current snapshot unless it exists; return that snapshot if new."""
    if ref_snapshot_id(spark, table, branch, "BRANCH") is not None:
        return None
    _main_to_branch_from(spark, table, branch)
    spark.sql(f"ALTER TABLE {quote_identifier(table)} CREATE BRANCH IF NOT EXISTS {branch}")
    print(f"airflow-iceberg: created branch {branch} of {table} at main's current snapshot", flush=True)
    return ref_snapshot_id(spark, table, branch, "BRANCH")


def reset_branch(spark: SparkSession, table: str, branch: str) -> int | None:
    """Point ``branch`` at main's current snapshot (made if missing); return that snapshot if it moved.

    This is how a repaired write-audit-publish run starts again from ``main``: the commits a
    failed audit left on the branch are no longer on it (they stay in the table's snapshots,
    readable by id, until expired), so the new write lands on ``main`` exactly. A branch that
    already points at ``main``'s snapshot is left alone (no metadata commit).
    """
    main = _main_to_branch_from(spark, table, branch)
    head = ref_snapshot_id(spark, table, branch, "BRANCH")
    if head == main:
        return None
    spark.sql(f"ALTER TABLE {quote_identifier(table)} CREATE OR REPLACE BRANCH {branch} AS OF VERSION {main}")
    was = f"it was at snapshot {head}" if head is not None else "it did not exist"
    print(
        f"airflow-iceberg: reset branch {branch} of {table} to main's current snapshot {main} ({was})",
        flush=True,
    )
    return main


def _main_to_branch_from(spark: SparkSession, table: str, branch: str) -> int:
    """``main``'s current snapshot, which a new or reset ``branch`` starts from; refuses a tag's name."""
    if ref_snapshot_id(spark, table, branch, "TAG") is not None:
        raise TableStateError(
            f"{branch!r} is a tag of table {table}, not a branch: choose another branch name"
        )
    main = ref_snapshot_id(spark, table, "main", "BRANCH")
    if main is None:
        raise SnapshotNotFoundError(
            f"table {table} has no snapshot on main to branch {branch!r} from: write to main first"
        )
    return main


def procedure_call(spark: SparkSession, table: str, procedure: str, arguments: dict[str, str]) -> list[Any]:
    """``CALL <catalog>.system.<procedure>(table => '<ns.table>', ...)``; returns the output rows.

    The procedure parses its ``table`` string as a multipart identifier, so the string holds the
    quoted parts (```sales-eu`.`Orders```), itself escaped as a SQL string literal. ``arguments``
    values are SQL literals the caller built from validated input.
    """
    parts = split_identifier(table)
    catalog, name = (parts[0], parts[1:]) if len(parts) > 2 else (spark.catalog.currentCatalog(), parts)
    named = ", ".join(
        [
            f"table => {sql_string(quote_identifier(name))}",
            *(f"{key} => {value}" for key, value in arguments.items()),
        ]
    )
    return spark.sql(f"CALL {quote_name(catalog)}.system.{procedure}({named})").collect()


def sql_string(value: str) -> str:
    """A Spark SQL string literal holding ``value`` exactly."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def publish_branch(spark: SparkSession, spec: action_specs.PublishSpec) -> dict[str, Any]:
    """Fast-forward ``target_branch`` to ``branch`` (Iceberg's ``fast_forward``), then maybe drop ``branch``.

    Fast-forwarding a branch that is already there is a no-op, so a retry that finds the target
    already published (and the branch not yet dropped) succeeds.
    """
    table = spec.table
    require_table(spark, table)
    head = ref_snapshot_id(spark, table, spec.branch, "BRANCH")
    if head is None:
        raise SnapshotNotFoundError(
            f"branch {spec.branch!r} does not exist in table {table}: nothing to publish"
        )
    previous = ref_snapshot_id(spark, table, spec.target_branch, "BRANCH")
    try:
        procedure_call(
            spark, table, "fast_forward", {"branch": f"'{spec.target_branch}'", "to": f"'{spec.branch}'"}
        )
    except Exception as error:
        if "not an ancestor" not in str(error):
            raise
        raise PublishError(
            f"cannot publish branch {spec.branch!r} of {table}: {spec.target_branch} moved since the branch "
            f"was made ({spec.target_branch} is at snapshot {previous}, which is not an ancestor of "
            f"{spec.branch}'s {head}). {spec.target_branch} is unchanged; rebuild the branch from it"
        ) from None
    if spec.drop_branch:
        spark.sql(f"ALTER TABLE {quote_identifier(table)} DROP BRANCH IF EXISTS {spec.branch}")
    return {
        "table": table,
        "branch": spec.branch,
        "target_branch": spec.target_branch,
        "previous_snapshot_id": previous,
        "snapshot_id": ref_snapshot_id(spark, table, spec.target_branch, "BRANCH"),
        "branch_dropped": spec.drop_branch,
    }


def tag_snapshot(spark: SparkSession, spec: action_specs.TagSpec) -> dict[str, Any]:
    """``ALTER TABLE ... CREATE [OR REPLACE] TAG name [AS OF VERSION id] [RETAIN n DAYS]``."""
    table = spec.table
    require_table(spark, table)
    snapshot_id = (
        spec.snapshot_id if spec.snapshot_id is not None else ref_snapshot_id(spark, table, "main", "BRANCH")
    )
    if snapshot_id is None:
        raise SnapshotNotFoundError(f"table {table} has no snapshot to tag")
    if not snapshot_exists(spark, table, snapshot_id):
        raise SnapshotNotFoundError(f"snapshot_id {snapshot_id} is not a snapshot of table {table}")
    verb = "CREATE OR REPLACE TAG" if spec.replace else "CREATE TAG"
    sql = f"ALTER TABLE {quote_identifier(table)} {verb} {spec.tag} AS OF VERSION {int(snapshot_id)}"
    if spec.retain_days is not None:
        sql += f" RETAIN {int(spec.retain_days)} DAYS"
    spark.sql(sql)
    return {"table": table, "tag": spec.tag, "snapshot_id": snapshot_id, "retain_days": spec.retain_days}

"""Rolling ``main`` back to an earlier snapshot of its history, exactly once across retries.

A rollback makes no snapshot, so a retry cannot find its earlier try by commit id. The first try
records the snapshot ``main`` is at (the one it rolls back *from*, R) in a marker tag named from
the task's commit id (:mod:`.retry_markers`), before it acts. A retry reads the marker and
decides from ``main``'s snapshot log, the record of what ``main`` pointed at and when:

- the log shows the target made current after R was (R's entry as of when the marker was
  made): the rollback happened; do nothing more, even when another writer committed on top
  since, and even when a publish brought R back into ``main``'s history (a branch made from R
  before the rollback, fast-forwarded to later: rolling back again would drop that commit);
- it does not, and R is still in ``main``'s history: the rollback did not happen yet (the try
  died before it); roll back now. A commit that landed on R meanwhile is rolled back with it;
- neither (the table was replaced, or someone moved ``main`` elsewhere, or an expiry cut the log
  short of R): refuse, changing nothing, since nothing says what the first try did.

Ancestry alone cannot tell the first case from the second: both have R in ``main``'s history.
A timestamp is resolved among the ancestors of the recorded snapshot, so every try rolls back to
the same snapshot. The move is Iceberg's ``rollback_to_snapshot`` procedure, the same SQL in
both execution modes (in the worker, the same ref change through pyiceberg:
:func:`rollback_with` takes either); the target is checked first (a snapshot of ``main``'s
history), so a refusal names the table and the snapshots and says what to do, instead of passing
on Iceberg's raw text.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow_iceberg.jobs.branches import SparkTableRefs
from airflow_iceberg.jobs.retry_markers import marker_made_by, record_snapshot, recorded_snapshot
from airflow_iceberg.jobs.snapshot_history import TableHistory
from airflow_iceberg.jobs.spec.branches import RollbackSpec
from airflow_iceberg.jobs.table_refs import TableRefs
from airflow_iceberg.jobs.table_state import (
    SnapshotNotFoundError,
    TableStateError,
    commit_outcome_unknown,
    iceberg_error_reason,
    require_table,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class RollbackError(TableStateError):
    """The rollback cannot be done as asked; nothing was changed."""


def rollback(
    spark: SparkSession,
    spec: RollbackSpec,
    commit_id: str | None = None,
    reuse_commit: bool = False,
) -> dict[str, Any]:
    """Make ``spec``'s snapshot of ``main``'s history current again, once per task instance.

    With ``reuse_commit`` (a commit id that a retry keeps), the first try records where ``main``
    was; without it every try resolves afresh. See :func:`rollback_with`.
    """
    require_table(spark, spec.table)
    return rollback_with(SparkTableRefs(spark, spec.table), spec, commit_id if reuse_commit else None)


def rollback_with(refs: TableRefs, spec: RollbackSpec, marker_id: str | None) -> dict[str, Any]:
    """Roll ``main`` back through ``refs`` (the Spark job's or the worker's), once per task instance.

    Returns ``previous_snapshot_id`` (rolled back from), ``current_snapshot_id`` (rolled back
    to), ``snapshot_id`` (``main`` now) and ``already_rolled_back`` (an earlier try did it).
    ``marker_id`` (the task's commit id, kept by its retries) names the marker where the first try
    records where ``main`` was; without one every try resolves afresh.
    """
    table = spec.table
    history = refs.history()
    main = history.branch("main")
    if main is None:
        raise SnapshotNotFoundError(f"table {table} has no snapshot on main to roll back; nothing changed")
    recorded = recorded_snapshot(history, marker_id)
    rolled_from = recorded if recorded is not None else main
    target = rollback_target(history, spec, rolled_from)
    if recorded is None and marker_id and record_snapshot(refs, history, marker_id, main) != main:
        return rollback_with(refs, spec, marker_id)  # a racing try recorded first: follow it
    result = {
        "table": table,
        "procedure": "rollback_to_snapshot",
        "previous_snapshot_id": rolled_from,
        "current_snapshot_id": target,
        "already_rolled_back": False,
    }
    if rolled_from == target:
        return {**result, "snapshot_id": main}
    if recorded is not None:
        if rolled_back_since(history, recorded, target, marker_made_by(history, marker_id)):
            print(
                f"airflow-iceberg: {table} was already rolled back from snapshot {recorded} to {target} "
                f"after this task's first try recorded it (main's snapshot log); main is at {main}; "
                "not rolling back again",
                flush=True,
            )
            return {**result, "snapshot_id": main, "already_rolled_back": True}
        if not history.is_ancestor(recorded, of=main):
            raise _lost_track(history, recorded, target, main)
    try:
        refs.rollback_main(target)
    except Exception as error:
        if commit_outcome_unknown(error):
            raise RollbackError(
                f"rolling back table {table} from snapshot {rolled_from} to {target}: the outcome is "
                f"unknown ({iceberg_error_reason(error)}): the rollback may or may not have been made. "
                "Retrying the task is safe: the retry reads main's snapshot log and rolls back only if "
                "this one did not"
            ) from None
        now = refs.history().branch("main")
        if now != target:  # e.g. a concurrent change to main; else the commit did land
            raise RollbackError(
                f"could not roll back table {table} from snapshot {rolled_from} to {target}: main changed "
                f"while rolling back ({iceberg_error_reason(error)}); main is at {now}. Nothing was changed "
                "by this try; retry the task"
            ) from None
    return {**result, "snapshot_id": target}


def rolled_back_since(history: TableHistory, recorded: int, target: int, marker_made_by: int | None) -> bool:
    """Whether ``main``'s log shows ``target`` made current after ``recorded`` was, when the marker was made.

    ``recorded`` may have been current more than once (rolled back to, or fast-forwarded to,
    before or after the marker). Its entry is the last one made by the time the marker was
    (:func:`~.retry_markers.marker_made_by`, to the minute, by the clock of the job that made
    it); when no entry is that old (clocks apart), the first.
    """
    entries = [index for index, (_, snapshot) in enumerate(history.main_log) if snapshot == recorded]
    if not entries:
        return False
    dated = [i for i in entries if marker_made_by is None or history.main_log[i][0] <= marker_made_by]
    start = dated[-1] if dated else entries[0]
    return any(snapshot == target for _, snapshot in history.main_log[start + 1 :])


def _lost_track(history: TableHistory, recorded: int, target: int, main: int) -> RollbackError:
    in_log = any(snapshot == recorded for _, snapshot in history.main_log)
    why = (
        "and main's snapshot log shows no rollback to it since: the table was replaced, or main was "
        "moved elsewhere by someone else"
        if in_log
        else "and main's snapshot log no longer reaches back to it (an expiry removed snapshots that "
        "were current after it), so it cannot tell what happened"
    )
    return RollbackError(
        f"cannot roll back table {history.table} to snapshot {target}: this task's first try recorded "
        f"main at snapshot {recorded}, which is no longer in main's history (main is at {main}), {why}. "
        "Nothing changed. Check the table's history metadata table; to roll back from where main is "
        "now, clear the task (a cleared task resolves afresh)"
    )


def rollback_target(history: TableHistory, spec: RollbackSpec, rolled_from: int) -> int:
    """The snapshot to roll back to: ``spec.snapshot_id``, or the last committed before ``spec.timestamp``.

    Either must be in the history of ``rolled_from`` (``main``'s head the first try saw); a
    timestamp picks, as Iceberg's ``rollback_to_timestamp`` does, the newest such ancestor
    committed strictly before it.
    """
    if spec.snapshot_id is not None:
        return _checked_snapshot(history, int(spec.snapshot_id), rolled_from)
    moment = int(spec.timestamp or 0)
    ancestors = list(history.ancestors(rolled_from))
    older = [s for s in ancestors if history.timestamps[s] < moment]
    if not older:
        oldest = ancestors[-1]
        raise RollbackError(
            f"cannot roll back table {history.table} to timestamp {moment} ({_iso(moment)}): no snapshot "
            f"of main's history was committed before it (the oldest kept is {oldest}, committed at "
            f"{_iso(history.timestamps[oldest])}). Nothing changed; give a later timestamp or a snapshot_id"
        )
    return max(older, key=lambda s: history.timestamps[s])


def _checked_snapshot(history: TableHistory, snapshot_id: int, rolled_from: int) -> int:
    if not history.has_snapshot(snapshot_id):
        raise SnapshotNotFoundError(
            f"cannot roll back table {history.table} to snapshot {snapshot_id}: it is not a snapshot of "
            "the table (never made, or expired). Nothing changed; the table's snapshots metadata table "
            "lists the ones it has"
        )
    if history.is_ancestor(snapshot_id, of=rolled_from):
        return snapshot_id
    holders = [b for b in history.branches() if history.is_ancestor(snapshot_id, of=history.branch(b))]
    where = f" (it is on branch {', '.join(holders)})" if holders else " (it was rolled back or replaced)"
    raise RollbackError(
        f"cannot roll back table {history.table} to snapshot {snapshot_id}: it is not in main's history"
        f"{where}; main is at {rolled_from}, and a rollback only moves main back to one of its own "
        f"ancestors. Nothing changed. Roll back to an ancestor of {rolled_from}. To bring that "
        "snapshot's rows to main, audit it and publish it pinned (IcebergPublishOperator with "
        "expected_snapshot_id): a branch's other commits were not audited"
    )


def _iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")

"""Which of a table's snapshots are new since a baseline: the snapshot sensor's and trigger's question.

A wait starts from a *baseline* snapshot, and a snapshot is new when it joined the watched ref's
history after the baseline was taken. Walking back from the ref's head through parent ids finds
them; the walk stops at the baseline, at any ancestor of the baseline, or at a snapshot committed
before it. That last test matters when the baseline is no longer an ancestor of the head (a
rollback, a replace, a branch reset): the walk must stop at the first old snapshot. Format v2+
tables order their commits by sequence number. Format v1 tables (every sequence number 0) have
only commit times, the writers' clocks: a commit whose writer's clock is behind the baseline's
writer's by more than the time between the two commits could count as old.

A ref that does not exist yet (a branch the sensor watches before a write creates it) has as
baseline the table's newest snapshot, so that none of the snapshots that existed when the wait
started counts as new when the branch is created from one of them.

Works on pyiceberg ``Table`` objects (imported by the caller; nothing here imports pyiceberg).
"""

from __future__ import annotations

from typing import Any


def head_snapshot_id(table: Any, branch: str | None = None) -> int | None:
    """The snapshot at the head of ``branch`` (default: the table's current snapshot), if any."""
    if branch:
        ref = table.metadata.refs.get(branch)
        return ref.snapshot_id if ref is not None else None
    snapshot = table.current_snapshot()
    return snapshot.snapshot_id if snapshot is not None else None


def baseline_snapshot_id(table: Any, branch: str | None = None, at_ms: int | None = None) -> int | None:
    """The baseline of a wait on ``branch`` (default: main) that starts now, or that started at ``at_ms``.

    Main: its head (at ``at_ms``: from the table's snapshot log, which records every change of
    the current snapshot, rollbacks included). A branch: its head (at ``at_ms``: the newest
    ancestor of its head committed by then); a branch that does not exist: the table's newest
    snapshot (committed by ``at_ms``). ``None``: the table had no snapshot, so every one is new.
    Times are the writers' clocks.
    """
    if not branch:
        if at_ms is None:
            return head_snapshot_id(table)
        entries = [entry for entry in table.metadata.snapshot_log if entry.timestamp_ms <= at_ms]
        return entries[-1].snapshot_id if entries else None
    head = head_snapshot_id(table, branch)
    if head is None:
        return newest_snapshot_id(table, at_ms)
    if at_ms is None:
        return head
    by_id = snapshots_by_id(table)
    snapshot = by_id.get(head)
    while snapshot is not None and snapshot.timestamp_ms > at_ms:
        snapshot = by_id.get(snapshot.parent_snapshot_id)
    return snapshot.snapshot_id if snapshot is not None else newest_snapshot_id(table, at_ms)


def newest_snapshot_id(table: Any, at_ms: int | None = None) -> int | None:
    """The table's last commit (by sequence number, then time), of those committed by ``at_ms``."""
    snapshots = [s for s in table.metadata.snapshots if at_ms is None or s.timestamp_ms <= at_ms]
    if not snapshots:
        return None
    return max(snapshots, key=lambda s: (s.sequence_number or 0, s.timestamp_ms)).snapshot_id


def snapshots_after(table: Any, after_snapshot_id: int | None, branch: str | None = None) -> list[Any]:
    """The snapshots on ``branch`` (or main) that are new since ``after_snapshot_id``, oldest first.

    The head's ancestors back to the baseline, or to an ancestor of it: when the walk reaches the
    baseline itself, every snapshot on the way descends from it and is new; otherwise (the
    baseline left the ref's history) only those committed after it are (:func:`committed_after`).
    ``None`` means every snapshot of the ref is new. A baseline the table no longer has (expired)
    can only be recognised by its id, so the walk then goes back to the oldest snapshot kept.
    """
    by_id = snapshots_by_id(table)
    old = ancestor_ids(by_id, after_snapshot_id)
    path = []
    snapshot = by_id.get(head_snapshot_id(table, branch))
    while snapshot is not None and snapshot.snapshot_id not in old:
        path.append(snapshot)
        snapshot = by_id.get(snapshot.parent_snapshot_id)
    baseline = by_id.get(after_snapshot_id) if after_snapshot_id is not None else None
    if baseline is not None and (snapshot is None or snapshot.snapshot_id != after_snapshot_id):
        newer = []
        for candidate in path:  # newest first: once one is older than the baseline, so are its ancestors
            if not committed_after(candidate, baseline):
                break
            newer.append(candidate)
        path = newer
    return list(reversed(path))


def committed_after(snapshot: Any, baseline: Any) -> bool:
    """Whether ``snapshot`` was committed after ``baseline``: by sequence number, or by time in format v1.

    Format v1 snapshots all have sequence number 0 (pyiceberg reads a missing one so); a table
    upgraded to v2 gives its new snapshots sequence numbers above every v1 one.
    """
    sequence, baseline_sequence = snapshot.sequence_number or 0, baseline.sequence_number or 0
    if sequence or baseline_sequence:
        return sequence > baseline_sequence
    return snapshot.timestamp_ms > baseline.timestamp_ms


def ancestor_ids(by_id: dict[int, Any], snapshot_id: int | None) -> set[int]:
    """``snapshot_id`` and the ids of its ancestors that the table still has."""
    ids: set[int] = set()
    current = snapshot_id
    while current is not None and current not in ids:
        ids.add(current)
        snapshot = by_id.get(current)
        current = snapshot.parent_snapshot_id if snapshot is not None else None
    return ids


def snapshots_by_id(table: Any) -> dict[int, Any]:
    """Every snapshot of the table by id (pyiceberg's ``snapshot_by_id`` scans the list each time)."""
    return {snapshot.snapshot_id: snapshot for snapshot in table.metadata.snapshots}


def describe_snapshot(table_name: str, snapshot: Any) -> dict[str, Any]:
    """A JSON-friendly description of a pyiceberg snapshot, as the sensor's XCom and event payload."""
    summary = snapshot.summary
    properties = dict(summary.additional_properties) if summary else {}
    return {
        "table": table_name,
        "snapshot_id": snapshot.snapshot_id,
        "parent_snapshot_id": snapshot.parent_snapshot_id,
        "sequence_number": snapshot.sequence_number,
        "timestamp_ms": snapshot.timestamp_ms,
        "operation": summary.operation.value if summary else None,
        "summary": properties,
    }


def matches(description: dict[str, Any], operations: tuple[str, ...], summary: dict[str, str]) -> bool:
    """Whether a described snapshot passes the filters: one of ``operations``, every ``summary`` entry."""
    if operations and description.get("operation") not in operations:
        return False
    properties = description.get("summary") or {}
    return all(str(properties.get(key)) == str(value) for key, value in summary.items())

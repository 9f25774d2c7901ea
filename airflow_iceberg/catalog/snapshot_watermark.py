"""A watcher's watermark on an Iceberg table: the last snapshot it looked at, and what came after.

Snapshot ids are random, so a watermark that only named a snapshot could not tell what came after
it once that snapshot is gone (expired) or has left the watched ref's history (a rollback, a
replace). A :class:`Watermark` therefore keeps, besides the id, the snapshot's sequence number
and commit time (the table's commit order) and the table's UUID (a table dropped and created
again under the same name is another table, whose sequence numbers start again at 1):

- the same table, the watermark's snapshot still kept: the new snapshots are those of
  :func:`~airflow_iceberg.catalog.new_snapshots.snapshots_after` (descendants of the watermark on
  the ref, or, off its history, those committed after it);
- the same table, the watermark's snapshot expired: the head's ancestors committed after it
  (sequence number; format v1: commit time, the writers' clocks);
- another table (a new UUID), or no table when the watermark was taken: every snapshot on the
  ref, none of them was seen. A format v1 table may have no UUID (the field is optional in v1 and
  old writers left it out; pyiceberg then makes up a random one at every load): it is taken for
  the same table, so that every poll does not report its whole history again.

A ref that moves back (a rollback to an ancestor, a branch reset to an older snapshot) adds no
new snapshot, and the watermark does not move back with it: a snapshot seen once is not new again
when the ref moves forward to it.

Works on pyiceberg ``Table`` objects (imported by the caller; nothing here imports pyiceberg).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from airflow_iceberg.catalog.new_snapshots import (
    committed_after,
    head_snapshot_id,
    snapshots_after,
    snapshots_by_id,
)


@dataclass(frozen=True)
class Watermark:
    """The last snapshot a watcher looked at (``None``: none), of the table with ``table_uuid``.

    ``table_uuid`` ``None``: no table existed when the watermark was taken, so every snapshot of
    the table found later is new. ``sequence_number`` and ``timestamp_ms`` place the snapshot in
    the table's commit order after it expires; ``None`` when unknown (a given snapshot id the
    table no longer had).
    """

    table_uuid: str | None
    snapshot_id: int | None = None
    sequence_number: int | None = None
    timestamp_ms: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: Any) -> Watermark | None:
        """The watermark stored as ``value``; ``None`` for anything else (an older or hand-edited row)."""
        if not isinstance(value, dict) or set(value) != {f for f in cls.__dataclass_fields__}:
            return None
        try:
            return cls(
                table_uuid=None if value["table_uuid"] is None else str(value["table_uuid"]),
                snapshot_id=_optional_int(value["snapshot_id"]),
                sequence_number=_optional_int(value["sequence_number"]),
                timestamp_ms=_optional_int(value["timestamp_ms"]),
            )
        except (TypeError, ValueError):
            return None


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


#: The :attr:`Watermark.table_uuid` of a table whose metadata has no ``table-uuid`` (format v1).
NO_TABLE_UUID = ""


def table_uuid(table: Any) -> str:
    """The table's UUID, or :data:`NO_TABLE_UUID` when its metadata has none.

    pyiceberg fills a missing v1 ``table-uuid`` with a new random UUID at every load, so that
    value must not be compared: only a UUID the metadata holds identifies the table.
    """
    metadata = table.metadata
    if "table_uuid" not in metadata.model_fields_set:
        return NO_TABLE_UUID
    return str(metadata.table_uuid)


def another_table(watermark: Watermark, uuid: str) -> bool:
    """Whether the table with ``uuid`` is not the one ``watermark`` was taken on.

    A table without a UUID (on either side) cannot be told apart, and counts as the same one:
    once a writer gives it a UUID (Iceberg Java does at its next commit) it is still that table.
    """
    if NO_TABLE_UUID in (watermark.table_uuid, uuid):
        return False
    return watermark.table_uuid != uuid


def watermark_at(table: Any | None, snapshot_id: int | None) -> Watermark:
    """The watermark at ``snapshot_id`` of ``table`` (``None``: no table, or nothing seen of it yet)."""
    if table is None:
        return Watermark(table_uuid=None)
    snapshot = snapshots_by_id(table).get(snapshot_id) if snapshot_id is not None else None
    if snapshot is None:
        return Watermark(table_uuid=table_uuid(table), snapshot_id=snapshot_id)
    return watermark_of(table, snapshot)


def watermark_of(table: Any, snapshot: Any) -> Watermark:
    """The watermark at ``snapshot``, one of ``table``'s (no look-up: a poll makes one per commit)."""
    return Watermark(
        table_uuid=table_uuid(table),
        snapshot_id=snapshot.snapshot_id,
        sequence_number=snapshot.sequence_number or 0,
        timestamp_ms=snapshot.timestamp_ms,
    )


def snapshots_since(table: Any, watermark: Watermark, branch: str | None = None) -> list[Any]:
    """The snapshots on ``branch`` (or main) that are new since ``watermark``, oldest first."""
    if another_table(watermark, table_uuid(table)) or watermark.snapshot_id is None:
        return snapshots_after(table, None, branch)  # another table, or nothing seen: all of it is new
    by_id = snapshots_by_id(table)
    if watermark.snapshot_id in by_id or watermark.sequence_number is None:
        return snapshots_after(table, watermark.snapshot_id, branch)
    newer = []  # the watermark's snapshot expired: its place in the commit order is all there is
    snapshot = by_id.get(head_snapshot_id(table, branch))
    while snapshot is not None and committed_after(snapshot, watermark):
        newer.append(snapshot)
        snapshot = by_id.get(snapshot.parent_snapshot_id)
    return list(reversed(newer))

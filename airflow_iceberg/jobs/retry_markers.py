"""Marker tags: how a retry of a rollback or a tag knows what its earlier try resolved.

A write finds its earlier try by the commit id in its snapshot's summary. A rollback or a tag
makes no snapshot, so there is no summary to find. Instead, before it acts, the first try records
the snapshot it resolved in a tag named from the task's commit id,
``airflow_iceberg_pin_<first 16 hex digits of sha256(commit id)>``: a rollback the snapshot
``main`` was at (the one it rolls back *from*), a tag the snapshot it tags. A retry reads the
marker instead of resolving again, so it acts on what the first try saw, never on a commit
another writer made in between.

``CREATE TAG`` fails when the tag exists (checked against the commit's own base metadata), so of
two tries racing to record, one wins and the other reads the winner's marker. The marker outlives
the try: a try that finished but whose success Airflow never recorded (a lost worker) is retried
too, and its retry needs the record most. So it is kept for :data:`MARKER_LIFETIME_MS` (a week,
longer than Airflow's longest retry delay) and then removed by the next snapshot expiry, as its
``RETAIN`` says: Iceberg ages a tag from its snapshot's commit time, so the retention is that
age plus the lifetime. While it lives it keeps its snapshot, so a rolled-back snapshot stays
readable by time travel that long.
"""

from __future__ import annotations

import hashlib
import math
import time
from typing import TYPE_CHECKING

from airflow_iceberg.jobs.snapshot_history import TableHistory
from airflow_iceberg.jobs.spec.identifiers import quote_identifier
from airflow_iceberg.jobs.table_refs import Retention, TableRefs
from airflow_iceberg.jobs.table_state import TableStateError, iceberg_error_reason

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MARKER_PREFIX = "airflow_iceberg_pin_"
#: How long a marker is kept after it was made: the time a retry may still come.
MARKER_LIFETIME_MS = 7 * 24 * 3600 * 1000


def marker_name(commit_id: str) -> str:
    """The marker tag of one task instance (its commit id), e.g. ``airflow_iceberg_pin_3f9c0a1b2d4e5f60``."""
    return MARKER_PREFIX + hashlib.sha256(commit_id.encode("utf-8")).hexdigest()[:16]


def recorded_snapshot(history: TableHistory, commit_id: str | None) -> int | None:
    """The snapshot an earlier try of this task recorded, or None (no earlier try got that far)."""
    return history.tag(marker_name(commit_id)) if commit_id else None


def marker_made_by(history: TableHistory, commit_id: str | None) -> int | None:
    """The latest moment (epoch ms) this task's marker can have been made, or None without a marker.

    Iceberg keeps no creation time for a ref, but the marker's retention encodes it: it was made
    with ``RETAIN`` = its snapshot's age then plus :data:`MARKER_LIFETIME_MS`, rounded up to a
    minute, so it was made in the minute before this moment (by the clock of the job that made
    it). A rollback's retry uses it to tell the ``main`` it recorded from a later return of the
    same snapshot.
    """
    ref = history.refs.get(marker_name(commit_id)) if commit_id else None
    if ref is None or ref.max_ref_age_ms is None or ref.snapshot_id not in history.timestamps:
        return None
    return history.timestamps[ref.snapshot_id] + ref.max_ref_age_ms - MARKER_LIFETIME_MS


def record_snapshot(refs: TableRefs, history: TableHistory, commit_id: str, snapshot_id: int) -> int:
    """Record ``snapshot_id`` for this task's retries; return what is recorded (a racing try's, if it won).

    The marker is made once: a second ``CREATE TAG`` of the same name fails, and then the marker
    the other try made is the answer.
    """
    name = marker_name(commit_id)
    try:
        create_marker(refs, history, name, snapshot_id)
    except Exception as error:
        recorded = recorded_snapshot(refs.history(), commit_id)
        if recorded is None:  # e.g. a concurrent commit to the table failed the tag's commit
            raise TableStateError(
                f"could not record snapshot {snapshot_id} of table {history.table} in marker tag {name} "
                f"({iceberg_error_reason(error)}): nothing was changed; retry the task"
            ) from None
        return recorded
    print(
        f"airflow-iceberg: recorded snapshot {snapshot_id} of {history.table} in marker tag {name} "
        "for this task's retries",
        flush=True,
    )
    return snapshot_id


def create_marker(refs: TableRefs, history: TableHistory, name: str, snapshot_id: int) -> None:
    """``CREATE TAG name AS OF VERSION snapshot_id``, kept :data:`MARKER_LIFETIME_MS`; fails if it exists."""
    refs.create_tag(name, snapshot_id, replace=False, retain=marker_retention(history, snapshot_id))


def marker_retention(history: TableHistory, snapshot_id: int) -> Retention:
    """The marker's ``RETAIN``: its snapshot's age now plus :data:`MARKER_LIFETIME_MS`, in whole minutes."""
    age_ms = max(0, int(time.time() * 1000) - history.timestamps.get(snapshot_id, 0))
    return Retention(math.ceil((age_ms + MARKER_LIFETIME_MS) / 60_000), "MINUTES")


def drop_marker(spark: SparkSession, table: str, name: str) -> None:
    spark.sql(f"ALTER TABLE {quote_identifier(table)} DROP TAG IF EXISTS {name}")

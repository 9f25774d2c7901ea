"""A table's refs and snapshot ancestry at one moment, read once, for decisions about moving refs.

Publishing, rolling back and tagging each decide from the same few facts: where each branch and
tag points, and which snapshot descends from which (``is P already in main's history?``, ``is
main still an ancestor of the audited snapshot?``). :class:`TableHistory` holds those facts,
read in one go so that every check of one decision sees the same state, and answers the
questions in Python, the same way in both execution modes.

They also hold ``main``'s snapshot log (Iceberg's ``snapshot-log``: each time ``main``'s head
changed, the snapshot it was set to), the only record of what ``main`` pointed at in the past:
ancestry says what a snapshot descends from, the log says what ``main`` was. A rollback's retry
reads it to tell "my earlier try rolled back" from "a publish brought the snapshot back", and a
publish to find a snapshot that ``main`` rolled back out of its history
(:meth:`TableHistory.rolled_out_of_main`).

Where they come from: with a driver JVM (spark-submit), the table metadata Iceberg already holds
(``TableMetadataParser.toJson``: one py4j call, no Spark job), optionally the base of an open
Iceberg transaction, so the checks and the commit see the very same metadata. Over Spark Connect,
the ``refs``, ``snapshots`` and ``history`` metadata tables (three small queries). In the worker,
without Spark, the table metadata pyiceberg loaded (:func:`history_from_metadata`, the same
reading as the driver's).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_iceberg.jobs.table_state import driver_table, metadata_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

BRANCH, TAG = "BRANCH", "TAG"


@dataclass(frozen=True)
class Ref:
    """One branch or tag: its kind (``BRANCH``/``TAG``), snapshot and ``max-ref-age-ms`` (None: forever)."""

    kind: str
    snapshot_id: int
    max_ref_age_ms: int | None = None


@dataclass(frozen=True)
class TableHistory:
    """Refs, each snapshot's parent and commit time (epoch ms), and ``main``'s log, at one moment."""

    table: str
    refs: dict[str, Ref] = field(default_factory=dict)
    parents: dict[int, int | None] = field(default_factory=dict)
    timestamps: dict[int, int] = field(default_factory=dict)
    #: Each snapshot's summary (the commit id and Airflow identity the provider stamps are in it).
    summaries: dict[int, dict[str, str]] = field(default_factory=dict)
    #: ``main``'s snapshot log, oldest first: (when it was made current, epoch ms; snapshot id).
    #: Iceberg shortens it when an expiry removes a snapshot it names (what came before is dropped).
    main_log: tuple[tuple[int, int], ...] = ()

    def branch(self, name: str) -> int | None:
        """The snapshot branch ``name`` points at, or None (no such branch, or it is a tag)."""
        ref = self.refs.get(name)
        return ref.snapshot_id if ref is not None and ref.kind == BRANCH else None

    def tag(self, name: str) -> int | None:
        """The snapshot tag ``name`` points at, or None (no such tag, or it is a branch)."""
        ref = self.refs.get(name)
        return ref.snapshot_id if ref is not None and ref.kind == TAG else None

    def has_snapshot(self, snapshot_id: int) -> bool:
        return snapshot_id in self.parents

    def ancestors(self, snapshot_id: int | None) -> Iterator[int]:
        """``snapshot_id``, its parent, and so on, newest first (stops at an expired parent)."""
        seen: set[int] = set()
        current = snapshot_id
        while current is not None and current in self.parents and current not in seen:
            yield current
            seen.add(current)
            current = self.parents[current]

    def is_ancestor(self, ancestor: int, of: int | None) -> bool:
        """Whether ``ancestor`` is ``of`` or one of its ancestors."""
        return any(snapshot == ancestor for snapshot in self.ancestors(of))

    def branches(self) -> list[str]:
        return sorted(name for name, ref in self.refs.items() if ref.kind == BRANCH)

    def was_in_history_of(self, snapshot_id: int, of: int | None) -> bool:
        """Whether ``snapshot_id`` is in the history of ``of``, expired or not: an ancestor, or the
        parent of one (a snapshot's parent id outlives the parent's expiry)."""
        return any(s == snapshot_id or self.parents[s] == snapshot_id for s in self.ancestors(of))

    def rolled_out_of_main(self) -> set[int]:
        """Snapshots that were in ``main``'s history once (per its log) and are not any more.

        Each snapshot the log says ``main`` was set to, with its ancestors, minus the ancestors of
        ``main``'s head now: what a rollback (or a replace) took out of ``main``. The log holds
        only heads, so a snapshot never itself current (committed together with a later one, or
        fast-forwarded past) counts through the head it is an ancestor of.
        """
        current = set(self.ancestors(self.branch("main")))
        was: set[int] = set()
        for _, head in self.main_log:
            for snapshot in self.ancestors(head):
                if snapshot in was:
                    break
                was.add(snapshot)
        return was - current


def load_history(spark: SparkSession, table: str) -> TableHistory:
    """The table's refs and ancestry now: from the driver's metadata, or over Connect from metadata tables."""
    loaded = driver_table(spark, table)
    if loaded is not None:
        return history_of_java_table(spark, table, loaded)
    return _history_from_metadata_tables(spark, table)


def _optional_int(value: Any) -> int | None:
    return int(value) if value is not None else None


def history_of_java_table(spark: SparkSession, table: str, java_table: Any) -> TableHistory:
    """The history of an Iceberg Java ``Table``, e.g. an open transaction's ``table()`` (its base)."""
    parser = spark.sparkContext._jvm.org.apache.iceberg.TableMetadataParser
    return history_from_metadata(table, json.loads(parser.toJson(java_table.operations().current())))


def history_from_metadata(table: str, metadata: Mapping[str, Any]) -> TableHistory:
    """The history in a table metadata file's JSON (the spec's ``refs``, ``snapshots``, ``snapshot-log``).

    One reading for both sides: the driver's ``TableMetadataParser.toJson``, and in the worker
    pyiceberg's metadata, serialised as pyiceberg writes its metadata files.
    """
    refs = {
        str(name): Ref(
            kind=str(ref["type"]).upper(),
            snapshot_id=int(ref["snapshot-id"]),
            max_ref_age_ms=_optional_int(ref.get("max-ref-age-ms")),
        )
        for name, ref in (metadata.get("refs") or {}).items()
    }
    snapshots = metadata.get("snapshots") or []
    return TableHistory(
        table=table,
        refs=refs,
        parents={int(s["snapshot-id"]): _optional_int(s.get("parent-snapshot-id")) for s in snapshots},
        timestamps={int(s["snapshot-id"]): int(s["timestamp-ms"]) for s in snapshots},
        summaries={
            int(s["snapshot-id"]): {str(k): str(v) for k, v in (s.get("summary") or {}).items()}
            for s in snapshots
        },
        main_log=tuple(
            (int(e["timestamp-ms"]), int(e["snapshot-id"])) for e in metadata.get("snapshot-log") or []
        ),
    )


def _history_from_metadata_tables(spark: SparkSession, table: str) -> TableHistory:
    refs = {
        str(row.name): Ref(
            kind=str(row.type).upper(),
            snapshot_id=int(row.snapshot_id),
            max_ref_age_ms=_optional_int(row.max_reference_age_in_ms),
        )
        for row in spark.table(metadata_table(table, "refs"))
        .selectExpr("name", "type", "snapshot_id", "max_reference_age_in_ms")
        .collect()
    }
    rows = (
        spark.table(metadata_table(table, "snapshots"))
        .selectExpr("snapshot_id", "parent_id", "unix_millis(committed_at) AS committed_ms", "summary")
        .collect()
    )
    log = (
        spark.table(metadata_table(table, "history"))
        .selectExpr("unix_millis(made_current_at) AS made_current_ms", "snapshot_id")
        .collect()
    )
    return TableHistory(
        table=table,
        refs=refs,
        parents={int(r.snapshot_id): _optional_int(r.parent_id) for r in rows},
        timestamps={int(r.snapshot_id): int(r.committed_ms) for r in rows},
        summaries={int(r.snapshot_id): dict(r.summary or {}) for r in rows},
        # One static scan task over Iceberg's snapshot log: the rows come in the log's order, which
        # is the order of the commits (not sorted by time: writers' clocks may disagree).
        main_log=tuple((int(r.made_current_ms), int(r.snapshot_id)) for r in log),
    )

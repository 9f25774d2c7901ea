"""Running the job in a Spark Connect session: what differs from the driver, and what cannot run.

spark-submit runs the job on the driver, next to the JVM, so a few steps talk to it through py4j
(Iceberg's Java ``Table`` for a ref's head and history, ``CommitMetadata`` for SQL commits, the
session's parser). A Spark Connect session (pyspark-client, no JVM on the client) has no py4j:
those steps use the ``refs`` and ``snapshots`` metadata tables and plain SQL instead
(:func:`ref_head`, :func:`find_commit_in_branches`), SQL commits the session's snapshot
properties (:mod:`.session_commit_tags`), and the one feature that needs the JVM is refused
before anything runs (:func:`unsupported_reason`). The spark-submit path keeps its JVM calls,
which are faster there.

Over Connect a write runs on the server as an *operation* that outlives the client that started
it: a worker killed mid-write leaves it running, and it may still commit. The job says which of
its calls is the one that commits (:func:`committing`); the operator's session names that
operation with an id a retry can find again, and waits for it before looking for the earlier
commit (``airflow_iceberg.operators.connect_tries``).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from airflow_iceberg.jobs.spec.identifiers import quote_identifier
from airflow_iceberg.jobs.spec.request import COMMIT_ID_PROPERTY
from airflow_iceberg.jobs.spec.upkeep import OrphanFilesSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


#: True while the job runs the Spark call that makes its commit (see :func:`committing`).
_COMMITTING: contextvars.ContextVar[bool] = contextvars.ContextVar("airflow_iceberg_commit", default=False)


@contextlib.contextmanager
def committing() -> Iterator[None]:
    """Mark the block that makes the job's one commit: a single ``DataFrameWriterV2`` call.

    On the driver this changes nothing. Over Spark Connect, whoever owns the session (the
    operator) reads :func:`is_committing` when a request leaves and gives that request the
    operation id the task's next try will look for; the job itself knows no ids.
    """
    token = _COMMITTING.set(True)
    try:
        yield
    finally:
        _COMMITTING.reset(token)


def is_committing() -> bool:
    """Whether the calling code runs inside :func:`committing`."""
    return _COMMITTING.get()


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (``pyspark.sql.connect``), not a driver's."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def unsupported_reason(spec: Any) -> str | None:
    """Why this request cannot run over Spark Connect, on any server, or None when it can.

    Orphan-file removal under Iceberg's 24-hour floor (``allow_recent_files``) needs Iceberg's
    action API, which only the JVM next to the Python code reaches: the ``remove_orphan_files``
    procedure refuses it. SQL commits (``MERGE INTO``, ``DELETE FROM``, SQL CTAS) run over Connect
    on a server of Spark 4.0+ and Iceberg 1.11+, which the job asks the server once connected
    (:func:`airflow_iceberg.jobs.session_commit_tags.require_session_tags`): the operator, which
    calls this before any session opens, cannot know the server's versions.
    """
    fix = "use a spark-submit connection (conn_type 'spark') for this task"
    if isinstance(spec, OrphanFilesSpec) and spec.allow_recent_files:
        return (
            "orphan-file removal with allow_recent_files is spark-submit only: over Spark Connect it "
            f"runs Iceberg's remove_orphan_files procedure, which refuses files under 24 hours old; {fix}"
        )
    return None


def ref_head(spark: SparkSession, table: str, ref: str = "main") -> int | None:
    """The snapshot id branch ``ref`` points at, from the ``refs`` metadata table."""
    from pyspark.sql import functions as F  # imported here: the operators import unsupported_reason

    rows = (
        spark.table(f"{quote_identifier(table)}.refs")
        .where((F.col("name") == ref) & (F.col("type") == "BRANCH"))
        .select("snapshot_id")
        .collect()
    )
    return int(rows[0].snapshot_id) if rows else None


def branch_heads(spark: SparkSession, table: str) -> dict[str, int]:
    """Every branch of the table and the snapshot it points at, from the ``refs`` metadata table."""
    from pyspark.sql import functions as F

    rows = (
        spark.table(f"{quote_identifier(table)}.refs")
        .where(F.col("type") == "BRANCH")
        .select("name", "snapshot_id")
        .collect()
    )
    return {str(row.name): int(row.snapshot_id) for row in rows}


def _history(
    spark: SparkSession, table: str, commit_id: str | None = None
) -> tuple[dict[int, Any], set[int]]:
    """One query of the ``snapshots`` table: each snapshot's parent, and those tagged ``commit_id``."""
    from pyspark.sql import functions as F

    tagged = (
        F.coalesce(F.col("summary")[COMMIT_ID_PROPERTY] == commit_id, F.lit(False))
        if commit_id is not None
        else F.lit(False)
    )
    snapshots = spark.table(f"{quote_identifier(table)}.snapshots")
    rows = snapshots.select("snapshot_id", "parent_id", tagged.alias("tagged")).collect()
    parents = {int(row.snapshot_id): row.parent_id for row in rows}
    return parents, {int(row.snapshot_id) for row in rows if row.tagged}


def _ancestors(parents: dict[int, Any], head: int | None) -> list[int]:
    """``head`` and its ancestors, newest first, as far as the table still holds them."""
    found: list[int] = []
    seen: set[int] = set()
    current = head
    while current is not None and current in parents and current not in seen:
        found.append(current)
        seen.add(current)
        parent = parents[current]
        current = int(parent) if parent is not None else None
    return found


def is_ancestor(spark: SparkSession, table: str, ancestor_id: int, snapshot_id: int) -> bool:
    """Whether ``ancestor_id`` is ``snapshot_id`` or one of its ancestors, from the ``snapshots`` table."""
    parents, _ = _history(spark, table)
    return int(ancestor_id) in _ancestors(parents, int(snapshot_id))


def find_commit_in_branches(
    spark: SparkSession, table: str, commit_id: str, branches: list[str] | tuple[str, ...]
) -> tuple[str, int] | None:
    """The first of ``branches`` whose history holds the snapshot tagged ``commit_id``: (branch, its id).

    The same answer as the driver's walk of the Java ``Table``'s ancestors: one query reads the
    branches' heads, one each snapshot's parent and whether it carries the tag, and the ancestry
    is followed here (a snapshot a rollback took out of a branch's history does not count).
    """
    heads = branch_heads(spark, table)
    parents, marked = _history(spark, table, commit_id)
    for branch in branches:
        for snapshot_id in _ancestors(parents, heads.get(branch)):
            if snapshot_id in marked:
                return branch, snapshot_id
    return None

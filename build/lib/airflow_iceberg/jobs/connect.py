"""Running the job in a Spark Connect session: what differs from the driver, and what cannot run.

spark-submit runs the job on the driver, next to the JVM, so a few steps talk to it through py4j
(Iceberg's Java ``Table`` for a ref's head and history, ``CommitMetadata`` for SQL commits, the
session's parser). A Spark Connect session (pyspark-client, no JVM on the client) has no py4j:
those steps use the ``refs`` and ``snapshots`` metadata tables and plain SQL instead
(:func:`ref_head`, :func:`find_commit`), and the few features that need the JVM are refused
before anything runs (:func:`unsupported_reason`). The spark-submit path keeps its JVM calls,
which are faster there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_iceberg.jobs import action_specs, job_spec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (``pyspark.sql.connect``), not a driver's."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def unsupported_reason(spec: Any) -> str | None:
    """Why this request cannot run over Spark Connect, or None when it can.

    Each refused feature needs the JVM next to the Python code: SQL commits (``MERGE INTO``,
    ``DELETE FROM``, a create partitioned by ``truncate(W, col)`` or a quoted column, which is
    SQL CTAS) are stamped with the commit
    id through ``CommitMetadata.withCommitProperties``, a JVM thread-local that Spark Connect
    cannot reach; orphan-file removal under Iceberg's 24-hour floor (``allow_recent_files``) needs
    Iceberg's action API, as the ``remove_orphan_files`` procedure refuses it.
    """
    fix = "use a spark-submit connection (conn_type 'spark') for this task"
    if isinstance(spec, (action_specs.MergeSpec, action_specs.DeleteSpec)):
        kind = "MERGE INTO" if isinstance(spec, action_specs.MergeSpec) else "DELETE FROM"
        return (
            f"{kind} is spark-submit only: its commit is tagged with the commit id through Iceberg's "
            f"JVM-side CommitMetadata, which a Spark Connect client cannot reach; {fix}"
        )
    if isinstance(spec, job_spec.WriteSpec) and spec.created_with_sql:
        return (
            "a create partitioned by truncate(W, col) or by a column that is not a plain name is "
            "spark-submit only: it is SQL CREATE TABLE AS "
            f"SELECT, tagged through Iceberg's JVM-side CommitMetadata; {fix}"
        )
    if isinstance(spec, job_spec.OrphanFilesSpec) and spec.allow_recent_files:
        return (
            "orphan-file removal with allow_recent_files is spark-submit only: over Spark Connect it "
            f"runs Iceberg's remove_orphan_files procedure, which refuses files under 24 hours old; {fix}"
        )
    return None


def ref_head(spark: SparkSession, table: str, ref: str = "main") -> int | None:
    """The snapshot id branch ``ref`` points at, from the ``refs`` metadata table."""
    from pyspark.sql import functions as F  # imported here: the operators import unsupported_reason

    rows = (
        spark.table(f"{job_spec.quote_identifier(table)}.refs")
        .where((F.col("name") == ref) & (F.col("type") == "BRANCH"))
        .select("snapshot_id")
        .collect()
    )
    return int(rows[0].snapshot_id) if rows else None


def find_commit(spark: SparkSession, table: str, commit_id: str, ref: str = "main") -> int | None:
    """The id of the snapshot tagged ``commit_id`` among ``ref``'s ancestors, or None.

    The same answer as the driver's walk of the Java ``Table``'s ancestors: one query reads the
    ref's head, and each snapshot's parent and whether it carries the tag, and the ancestry is
    followed here (a snapshot a rollback took out of the ref's history does not count).
    """
    from pyspark.sql import functions as F

    head = ref_head(spark, table, ref)
    if head is None:
        return None
    tagged = F.coalesce(F.col("summary")[job_spec.COMMIT_ID_PROPERTY] == commit_id, F.lit(False))
    snapshots = spark.table(f"{job_spec.quote_identifier(table)}.snapshots")
    rows = snapshots.select("snapshot_id", "parent_id", tagged.alias("tagged")).collect()
    parents = {int(row.snapshot_id): row.parent_id for row in rows}
    marked = {int(row.snapshot_id) for row in rows if row.tagged}
    current: int | None = head
    seen: set[int] = set()
    while current is not None and current in parents and current not in seen:
        if current in marked:
            return current
        seen.add(current)
        parent = parents[current]
        current = int(parent) if parent is not None else None
    return None

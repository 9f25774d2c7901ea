"""Tagging a SQL commit over Spark Connect: the session's snapshot properties, set for one statement.

On the driver a SQL commit (``MERGE INTO``, ``DELETE FROM``, CTAS) is tagged through
``CommitMetadata.withCommitProperties``, a JVM thread-local a Connect client cannot reach. Iceberg
1.11 (apache/iceberg#14545) also reads the session settings ``spark.sql.iceberg.snapshot-property.<key>``
into every commit its Spark 4.0 and 4.1 writes make (``SparkWriteConf.extraSnapshotMetadata``, read by
``SparkWrite`` and ``SparkPositionDeltaWrite``: copy-on-write and merge-on-read MERGE and DELETE, and
CTAS, whose staged table writes through ``SparkWrite``). So over Connect the job sets them on its own
session right before the one statement and restores them right after (:func:`session_snapshot_properties`).
A Connect session's settings are its own (the server gives each session its own SQL conf) and every
task opens its own session, so they tag no other task's commit, and no later statement of this one.

One path reads only the thread-local: a DELETE whose condition covers whole files, which Spark turns
into a metadata-only delete (``SparkTable.deleteWhere``, ``OptimizeMetadataOnlyDeleteFromTable``).
It would commit without the commit id, and a retry could not find it. Over Connect the job excludes
that optimizer rule for the statement (:func:`without_metadata_only_delete`): Spark then runs the
row-level delete, whose commit reads the session's properties. It reads the files the condition
covers (copy-on-write) or writes a delete for each of their rows (merge-on-read) instead of
dropping them from the metadata: the price of a commit a retry can find. A condition Spark proves
holds for every row (``true``, ``1 = 1``) has no tagged plan at all, and is refused
(:func:`require_row_level_delete`).

An older server, Spark 3.5 (Iceberg's 3.5 runtime never reads the session settings) or Iceberg
before 1.11, would commit untagged: the job refuses there, before anything runs
(:func:`require_session_tags`), as it refused every SQL commit over Connect before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from airflow_iceberg.jobs import connect
from airflow_iceberg.jobs.iceberg_runtime import major_minor, runtime_version
from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.identifiers import quote_identifier
from airflow_iceberg.jobs.spec.row_changes import DeleteSpec, MergeSpec
from airflow_iceberg.jobs.spec.writes import WriteSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The session settings Iceberg copies into a commit's snapshot summary, key after the prefix.
SESSION_PROPERTY_PREFIX = "spark.sql.iceberg.snapshot-property."
#: The first Iceberg release that reads them (apache/iceberg#14545), and the first Spark line.
FIRST_ICEBERG_WITH_SESSION_TAGS = (1, 11)
FIRST_SPARK_WITH_SESSION_TAGS = (4, 0)
#: Spark's optimizer rule that turns a DELETE covering whole files into ``SparkTable.deleteWhere``.
METADATA_ONLY_DELETE_RULE = (
    "org.apache.spark.sql.execution.datasources.v2.OptimizeMetadataOnlyDeleteFromTable"
)
EXCLUDED_RULES = "spark.sql.optimizer.excludedRules"


def sql_commit_kind(spec: Any) -> str | None:
    """The SQL statement this request commits with (``MERGE INTO`` ...), or None for a writer-API commit."""
    if isinstance(spec, MergeSpec):
        return "MERGE INTO"
    if isinstance(spec, DeleteSpec):
        return "DELETE FROM"
    if isinstance(spec, WriteSpec) and spec.created_with_sql:
        return "a create partitioned by truncate(W, col) or by a column that is not a plain name (SQL CTAS)"
    return None


def refusal(kind: str, table: str, spark_version: str, iceberg_version: str | None) -> str | None:
    """Why a server of these versions cannot tag ``kind``'s commit over Spark Connect, or None when it can.

    ``iceberg_version`` is None when the server does not tell it (a session catalog's table: Spark
    resolves ``spark_catalog.system.*`` in its built-in catalog), which is refused too: an
    untagged commit is what a retry cannot find.
    """
    fix = (
        "run a Spark Connect server on Spark 4.0 or later with Iceberg 1.11 or later, or use a "
        "spark-submit connection (conn_type 'spark') for this task. Nothing was changed"
    )
    if major_minor(spark_version) < FIRST_SPARK_WITH_SESSION_TAGS:
        return (
            f"{kind} over Spark Connect needs a server on Spark 4.0 or later, and this one runs Spark "
            f"{spark_version}: its commit is tagged with the commit id through the session setting "
            f"{SESSION_PROPERTY_PREFIX}<key>, which Iceberg's Spark 3.5 runtime does not read; {fix}"
        )
    if iceberg_version is None:
        return (
            f"{kind} over Spark Connect needs Iceberg 1.11 or later on the server, and the server does "
            f"not tell which release {table}'s catalog runs (a session catalog, spark_catalog, does not "
            f"answer system.iceberg_version()); name the table through an Iceberg SparkCatalog, or {fix}"
        )
    if major_minor(iceberg_version) < FIRST_ICEBERG_WITH_SESSION_TAGS:
        return (
            f"{kind} over Spark Connect needs Iceberg 1.11 or later on the server, and {table}'s catalog "
            f"runs Iceberg {iceberg_version}: only 1.11 reads the session setting "
            f"{SESSION_PROPERTY_PREFIX}<key> that tags its commit with the commit id; {fix}"
        )
    return None


def require_session_tags(spark: SparkSession, spec: Any) -> None:
    """Refuse a SQL commit over Spark Connect on a server that would commit it untagged.

    Asked of the server (``spark.version`` is the server's over Connect; the runtime answers
    ``system.iceberg_version()``) before anything runs: the operator cannot know the server's
    versions before it connects.
    """
    kind = sql_commit_kind(spec)
    if kind is None or not connect.is_connect(spark):
        return
    refused = refusal(kind, spec.table, str(spark.version), runtime_version(spark, spec.table))
    if refused:
        raise InvalidSpecError(refused)


@contextlib.contextmanager
def session_snapshot_properties(spark: SparkSession, properties: Mapping[str, str]) -> Iterator[None]:
    """Set ``properties`` as the session's snapshot properties for the block, then restore what was there.

    A value the session held before (a user's ``conf``) comes back; a key it did not hold is unset.
    Should the block fail with the session gone, restoring fails too: the block's error is the one
    raised (a gone session holds nothing any more).
    """
    previous = _settings(spark, [SESSION_PROPERTY_PREFIX + key for key in properties])
    with _restoring(spark, previous):
        for key, value in properties.items():
            spark.conf.set(SESSION_PROPERTY_PREFIX + key, value)
        yield


@contextlib.contextmanager
def without_metadata_only_delete(spark: SparkSession) -> Iterator[None]:
    """Over Spark Connect, keep a DELETE off ``SparkTable.deleteWhere``, which commits untagged.

    On the driver nothing changes: ``deleteWhere`` reads the JVM thread-local the job sets there.
    The user's own excluded rules stay excluded, and the setting is restored after the block.
    """
    if not connect.is_connect(spark):
        yield
        return
    previous = _settings(spark, [EXCLUDED_RULES])
    rules = [rule for rule in (previous[EXCLUDED_RULES] or "").split(",") if rule.strip()]
    with _restoring(spark, previous):
        spark.conf.set(EXCLUDED_RULES, ",".join([*rules, METADATA_ONLY_DELETE_RULE]))
        yield


def require_row_level_delete(spark: SparkSession, table: str, condition: str) -> None:
    """Over Spark Connect, refuse a DELETE whose condition Spark proves holds for every row.

    Neither of Spark's plans for it can be tagged. A condition that is the literal ``true`` is no
    row-level delete at all: Spark hands it to the table's truncate (``SparkTable.deleteWhere``),
    untagged, whatever optimizer rule is excluded. One that folds to true (``1 = 1``,
    ``id IS NOT NULL`` on a required column) is, but with the metadata-only delete excluded the
    optimizer prunes the read of the rows to keep to an empty relation, and Iceberg's
    copy-on-write commit then replaces no file: a tagged commit that deletes nothing. Asked of
    the server before anything runs: the plan of the rows such a delete would keep.
    """
    if not connect.is_connect(spark):
        return
    query = f"SELECT * FROM {quote_identifier(table)} WHERE NOT (({condition}) <=> true)"
    plan = str(spark.sql(f"EXPLAIN EXTENDED {query}").first()[0])
    optimized = plan.split("== Optimized Logical Plan ==")[-1].split("== Physical Plan ==")[0]
    if optimized.strip().startswith("LocalRelation <empty>"):
        raise InvalidSpecError(
            f"the delete condition {condition!r} holds for every row of {table}, and over Spark Connect "
            "Spark commits such a DELETE without the commit id (its metadata-only delete) or deletes "
            "nothing (its row-level delete then reads no file), so a retry could not find it; delete by "
            "a condition on the rows' values, or use a spark-submit connection (conn_type 'spark') for "
            "this task. Nothing was changed"
        )


def _settings(spark: SparkSession, keys: list[str]) -> dict[str, str | None]:
    return {key: spark.conf.get(key, None) for key in keys}


@contextlib.contextmanager
def _restoring(spark: SparkSession, previous: Mapping[str, str | None]) -> Iterator[None]:
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            _restore(spark, previous)
        raise
    _restore(spark, previous)


def _restore(spark: SparkSession, previous: Mapping[str, str | None]) -> None:
    for key, value in previous.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)

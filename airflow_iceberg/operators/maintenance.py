"""Table upkeep through the same spark-submit path as the reads and writes.

Iceberg tables written every day keep every snapshot and accumulate small files until someone
expires and compacts them. These operators run Iceberg's Spark procedures (``expire_snapshots``,
``rewrite_data_files``, ``rewrite_manifests``, ``rewrite_position_delete_files``,
``rollback_to_*``) and the orphan-file action; each XCom says what was done: the procedure's
counts (files rewritten, added, removed, bytes) and ``main``'s snapshot before and after.

None of them rewrites rows, so none needs the commit id to stay exactly-once: a retry of a
compaction compacts what is left, a retry of an expiry expires nothing more. A rollback does use
it: its first try records where ``main`` was, so a retry never rolls back a later commit.
The rewrites can wait for branches about to be published (``wait_for_branches``): they are then
skipped, changing nothing. Or, on Iceberg 1.11 and later, compaction rewrites an audit branch
itself (``branch``), before its audit, and its publish brings the compacted files to ``main``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowSkipException

from airflow_iceberg.catalog.config import CatalogConfig
from airflow_iceberg.catalog.iceberg_runtimes import release
from airflow_iceberg.exceptions import InvalidSpecError
from airflow_iceberg.jobs.iceberg_runtime import FIRST_ICEBERG_WITH_BRANCH_COMPACTION
from airflow_iceberg.jobs.spec.branches import RollbackSpec
from airflow_iceberg.jobs.spec.partition_keys import partition_condition
from airflow_iceberg.jobs.spec.upkeep import (
    ExpireSnapshotsSpec,
    OrphanFilesSpec,
    RewriteDataFilesSpec,
    RewriteManifestsSpec,
    RewritePositionDeletesSpec,
)
from airflow_iceberg.operators.base import IcebergSparkSubmitOperator
from airflow_iceberg.operators.connect import is_spark_connect
from airflow_iceberg.operators.metadata_steps import IcebergRefStepOperator
from airflow_iceberg.operators.rendered import as_branch, as_dict, as_int, as_list
from airflow_iceberg.timestamps import to_epoch_millis, to_snapshot_id

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context


class _UpkeepOperator(IcebergSparkSubmitOperator):
    def log_result(self, result: Mapping[str, Any]) -> None:
        counts = {k: v for k, v in result.items() if k.endswith(("_count", "_snapshot_id"))}
        self.log.info("%s on %s: %s", result.get("procedure"), result.get("table"), counts)


class _RewriteOperator(_UpkeepOperator):
    """A rewrite commits a ``replace`` snapshot on ``main``: it can wait for branches about to be published.

    After such a commit, ``main`` cannot be fast-forwarded to a branch made before it, so a
    write-audit-publish publish fails. With ``wait_for_branches``, the job first looks for a
    matching branch that waits to be published (its head descends from ``main``'s and differs);
    if there is one, it changes nothing and the task is skipped, saying which branch it waited
    for. The next run does the work.

    :param wait_for_branches: Branch name patterns (``fnmatch``: ``*``, ``?``, ``[...]``), e.g.
        ``"audit_*"`` or ``["audit_*", "staging"]``. Default: none, never wait. (templated)
    """

    template_fields: Sequence[str] = (*IcebergSparkSubmitOperator.template_fields, "wait_for_branches")

    def __init__(self, *, wait_for_branches: Sequence[str] | str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.wait_for_branches = wait_for_branches

    def branch_patterns(self) -> tuple[str, ...]:
        return tuple(str(pattern) for pattern in as_list(self.wait_for_branches, "wait_for_branches"))

    def execute(self, context: Context) -> dict[str, Any]:
        result = super().execute(context)
        if result.get("skipped"):
            raise AirflowSkipException(str(result.get("reason") or "a branch waits to be published"))
        return result


class IcebergRemoveOrphanFilesOperator(IcebergSparkSubmitOperator):
    """Find, and with ``dry_run=False`` delete, files under a table that no snapshot references.

    A write killed before its commit leaves data files nobody reads. By default this only
    reports them (XCom ``orphan_file_count`` and up to 1000 ``orphan_files``) and deletes
    nothing; set ``dry_run=False`` to delete them.

    Files younger than 24 hours are never touched unless you opt in: a younger file may belong to
    a write that has not committed yet, and deleting it breaks that write. An ``older_than`` less
    than 24 hours ago fails before Spark starts unless ``allow_recent_files=True``.

    :param older_than: Only files last modified before this: epoch ms, ISO-8601 or a datetime.
        Default: Iceberg's, three days ago. (templated)
    :param dry_run: Report only (default True). False deletes the files found.
    :param allow_recent_files: Accept an ``older_than`` under 24 hours ago (default False). Only
        when no write to the table can be running, e.g. right after a known-dead write.
    """

    template_fields: Sequence[str] = (*IcebergSparkSubmitOperator.template_fields, "older_than")

    def __init__(
        self, *, older_than: Any = None, dry_run: bool = True, allow_recent_files: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.older_than = older_than
        self.dry_run = dry_run
        self.allow_recent_files = allow_recent_files

    def build_spec(self) -> OrphanFilesSpec:
        return OrphanFilesSpec(
            table=self.table,
            older_than=to_epoch_millis(self.older_than, "older_than"),
            dry_run=self.dry_run,
            allow_recent_files=self.allow_recent_files,
        )

    def log_result(self, result: Mapping[str, Any]) -> None:
        verb = "found (dry run, nothing deleted)" if result.get("dry_run") else "removed"
        self.log.info(
            "%s orphan files %s under %s", result.get("orphan_file_count"), verb, result.get("table")
        )


class IcebergExpireSnapshotsOperator(_UpkeepOperator):
    """Expire old snapshots (``expire_snapshots``) and delete the files only they referenced.

    Snapshots a branch or tag references are kept. Time travel to an expired snapshot stops
    working, and so does the exactly-once lookup of a commit that was expired.

    XCom: ``expired_snapshots_count``, ``deleted_data_files_count``,
    ``deleted_position_delete_files_count``, ``deleted_manifest_files_count``,
    ``deleted_manifest_lists_count`` ...

    :param older_than: Expire snapshots older than this: epoch ms, ISO-8601 or a datetime, e.g.
        ``"{{ macros.ds_add(ds, -7) }}"``. Default: Iceberg's, five days ago. (templated)
    :param retain_last: Keep at least this many of the newest snapshots whatever their age. (templated)
    """

    template_fields: Sequence[str] = (
        *IcebergSparkSubmitOperator.template_fields,
        "older_than",
        "retain_last",
    )

    def __init__(self, *, older_than: Any = None, retain_last: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.older_than = older_than
        self.retain_last = retain_last

    def build_spec(self) -> ExpireSnapshotsSpec:
        return ExpireSnapshotsSpec(
            table=self.table,
            older_than=to_epoch_millis(self.older_than, "older_than"),
            retain_last=as_int(self.retain_last, "retain_last"),
        )


class IcebergRewriteDataFilesOperator(_RewriteOperator):
    """Compact small data files (``rewrite_data_files``): rows unchanged, fewer and larger files.

    XCom: ``rewritten_data_files_count``, ``added_data_files_count``, ``rewritten_bytes_count``,
    ``failed_data_files_count``, ``removed_delete_files_count``, and the compacted branch's
    snapshot before (``previous_snapshot_id``) and after (``snapshot_id``).

    With ``branch`` (Iceberg 1.11 or later) it compacts that branch instead of ``main``, e.g. a
    write-audit-publish branch between its write and its audit: the compaction's snapshot lands on
    the branch, ``main`` is untouched, and the publish fast-forwards ``main`` to compacted files.
    A publish pinned to an audited snapshot refuses a branch compacted after its audit, so compact
    before it. A connection whose Iceberg version is older is refused before Spark starts; over
    Spark Connect the job asks the server's runtime before it changes anything.

    :param strategy: ``binpack`` (default) or ``sort``.
    :param sort_order: For ``sort``: ``"col [ASC|DESC] [NULLS FIRST|LAST], ..."`` or
        ``"zorder(c1, c2)"``; default the table's sort order. (templated)
    :param where: Only files that may hold rows matching this expression, e.g. yesterday's
        partition ``"day = DATE'{{ macros.ds_add(ds, -1) }}'"``. (templated)
    :param options: Iceberg rewrite options: ``target-file-size-bytes``, ``min-input-files``,
        ``min-file-size-bytes``, ``max-file-size-bytes``, ``partial-progress.enabled``,
        ``rewrite-all`` ... (templated)
    :param wait_for_branches: Skip, changing nothing, while a branch matching one of these
        patterns (e.g. ``"audit_*"``) waits to be published. Not with ``branch``. (templated)
    :param branch: Compact this branch, which must exist, instead of ``main``, e.g.
        ``"audit_{{ ds_nodash }}"``. Iceberg 1.11 or later. (templated)
    :param partition_key: Compact only this time partition: an Airflow partition key,
        ``2024-01-02T05``, ``2024-01-02``, ``2024-01`` or ``2024``, usually ``"{{ partition_key }}"``.
        ANDed with ``where``. (templated)
    :param partition_column: The DATE or TIMESTAMP column ``partition_key`` selects on. (templated)
    """

    template_fields: Sequence[str] = (
        *_RewriteOperator.template_fields,
        "sort_order",
        "where",
        "options",
        "branch",
        "partition_key",
        "partition_column",
    )

    def __init__(
        self,
        *,
        strategy: str = "binpack",
        sort_order: str | None = None,
        where: str | None = None,
        options: Mapping[str, Any] | None = None,
        branch: str | None = None,
        partition_key: str | None = None,
        partition_column: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.partition_key = partition_key
        self.partition_column = partition_column
        self.strategy = strategy
        self.sort_order = sort_order
        self.where = where
        self.options = options
        self.branch = branch

    def build_spec(self) -> RewriteDataFilesSpec:
        return RewriteDataFilesSpec(
            table=self.table,
            strategy=self.strategy,
            sort_order=self.sort_order or None,
            where=partition_condition(self.partition_key, self.partition_column, self.where or None),
            options=as_dict(self.options, "options"),
            wait_for_branches=self.branch_patterns(),
            branch=self._branch_to_compact(),
        )

    def _branch_to_compact(self) -> str | None:
        """``branch``, or None for ``main``: a blank one is refused (compacting ``main`` instead would
        commit the very ``replace`` that fails the branch's pending publish)."""
        return as_branch(self.branch)

    def execute(self, context: Context) -> dict[str, Any]:
        if self.branch and not is_spark_connect(self._conn_id):  # the connection picks the runtime
            refuse_branch_compaction_before_1_11(self.iceberg_conn_id, self.catalog_hooks[0].catalog_config)
        return super().execute(context)


def refuse_branch_compaction_before_1_11(conn_id: str, config: CatalogConfig) -> None:
    """Refuse a branch compaction that spark-submit would run on an Iceberg runtime before 1.11.

    The connection says which runtime spark-submit loads: ``iceberg_version``, or the release in
    ``runtime_jar``'s standard file name. A jar named otherwise is left to the job, which asks the
    runtime itself before it changes anything.
    """
    version = config.runtime_iceberg_version
    if version is None or release(version)[:2] >= FIRST_ICEBERG_WITH_BRANCH_COMPACTION:
        return
    first = ".".join(map(str, FIRST_ICEBERG_WITH_BRANCH_COMPACTION))
    source = "its Runtime jar holds" if config.runtime_jar else "its Iceberg version (iceberg_version) is"
    raise InvalidSpecError(
        f"branch: compacting a branch (rewrite_data_files with branch) needs Iceberg {first} or later, "
        f"and connection {conn_id!r} loads Iceberg {version} ({source} {version}, for Spark "
        f"{config.spark_version}); set its Iceberg version to {first}.0 or later, or leave it empty for "
        "the newest of its Spark line. Nothing was run"
    )


class IcebergRewriteManifestsOperator(_RewriteOperator):
    """Regroup manifests (``rewrite_manifests``) so scan planning reads fewer of them.

    XCom: ``rewritten_manifests_count``, ``added_manifests_count``.

    :param wait_for_branches: Skip, changing nothing, while a branch matching one of these
        patterns waits to be published. (templated)
    """

    def build_spec(self) -> RewriteManifestsSpec:
        return RewriteManifestsSpec(table=self.table, wait_for_branches=self.branch_patterns())


class IcebergRewritePositionDeleteFilesOperator(_RewriteOperator):
    """Compact the position delete files merge-on-read leaves (``rewrite_position_delete_files``).

    XCom: ``rewritten_delete_files_count``, ``added_delete_files_count``, ``rewritten_bytes_count``,
    ``added_bytes_count``.

    :param where: Only delete files of partitions matching this expression. (templated)
    :param options: Iceberg options such as ``rewrite-all``, ``min-input-files``. (templated)
    :param wait_for_branches: Skip, changing nothing, while a branch matching one of these
        patterns waits to be published. (templated)
    """

    template_fields: Sequence[str] = (*_RewriteOperator.template_fields, "where", "options")

    def __init__(self, *, where: str | None = None, options: Mapping[str, Any] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.where = where
        self.options = options

    def build_spec(self) -> RewritePositionDeletesSpec:
        return RewritePositionDeletesSpec(
            table=self.table,
            where=self.where or None,
            options=as_dict(self.options, "options"),
            wait_for_branches=self.branch_patterns(),
        )


class IcebergRollbackOperator(IcebergRefStepOperator, _UpkeepOperator):
    """Make an earlier snapshot of ``main``'s history current again (``rollback_to_snapshot``).

    Give exactly one of ``snapshot_id`` and ``timestamp``. A timestamp rolls back to the last
    snapshot of ``main``'s history committed *before* it. A snapshot that is not in ``main``'s
    history is refused before anything changes, naming where it is.

    Exactly once across retries (``idempotent=True``, the default): before it acts, the first
    try records the snapshot ``main`` is at in a marker tag
    ``airflow_iceberg_pin_<hash of the commit id>`` (kept a week for the retries). A retry that
    finds that snapshot gone from ``main``'s history knows the rollback happened and changes
    nothing (``"already_rolled_back": true``), so it never undoes a commit another writer made
    after the rollback. XCom: ``previous_snapshot_id`` (rolled back from),
    ``current_snapshot_id`` (rolled back to), ``snapshot_id`` (``main`` now), ``already_rolled_back``.

    :param snapshot_id: The snapshot, e.g. from an upstream XCom:
        ``"{{ ti.xcom_pull(task_ids='append')['snapshot_id'] }}"``. (templated)
    :param timestamp: Epoch ms, ISO-8601 or a datetime. (templated)
    :param engine: ``"auto"`` (default), ``"spark"`` or ``"pyiceberg"``: where the rollback is
        made, as for :class:`~airflow_iceberg.operators.branches.IcebergPublishOperator`.
    """

    template_fields: Sequence[str] = (*IcebergSparkSubmitOperator.template_fields, "snapshot_id", "timestamp")

    def __init__(self, *, snapshot_id: Any = None, timestamp: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.snapshot_id = snapshot_id
        self.timestamp = timestamp

    def build_spec(self) -> RollbackSpec:
        return RollbackSpec(
            table=self.table,
            snapshot_id=to_snapshot_id(self.snapshot_id),
            timestamp=to_epoch_millis(self.timestamp, "timestamp"),
        )

"""A table's refs through pyiceberg: read as the Spark job reads them, changed in one checked commit.

Publish, tag and rollback move refs and make no snapshot, so in the Airflow worker they need no
Spark: pyiceberg loads the table's metadata, the job's own decisions run on it
(:func:`~airflow_iceberg.jobs.publish.decide`, :func:`~airflow_iceberg.jobs.branches.tag_with`,
:func:`~airflow_iceberg.jobs.rollback.rollback_with`), and the ref change is one commit.
:class:`PyicebergTableRefs` is the worker's :class:`~airflow_iceberg.jobs.table_refs.TableRefs`.

**Atomic against concurrent writers.** Each commit carries requirements: ``assert-ref-snapshot-id``
for every ref its decision read (where a branch pointed, or that a tag did not exist yet) and
``assert-table-uuid``. The catalog checks them against its current metadata in the same step
that swaps the metadata, as it does for Iceberg's Java client: a REST server on its side; the SQL
catalog with ``UPDATE … WHERE metadata_location = <the location it checked>``; Hive under the
metastore's table lock, which Iceberg's HiveCatalog takes too.
A concurrent commit that moved one of those refs fails the commit (pyiceberg's
``CommitFailedException``) and nothing changes. A concurrent commit elsewhere in the table
(another branch's append) fails the SQL or Hive swap although the decision still holds:
then the change is built and checked again on the new metadata and made again, as a REST server
does on its side and Iceberg's Java client does for a ref change, up to the table's
``commit.retry.num-retries`` times.

The updates and requirements are written out here rather than made with pyiceberg's
``ManageSnapshots`` (0.12), for three reasons: a publish must require a ref it does not change
(the published branch, whose head was audited); ``create_branch``/``set_current_snapshot`` on an
existing branch drop its retention settings, which Iceberg's ``replaceBranch`` and rollback keep;
and a transaction keeps one requirement per type across separately staged changes
(``Transaction._stage``), so a rollback staged after another ref change loses its
``assert-ref-snapshot-id``.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from airflow_iceberg.catalog.pyiceberg_path import clock_refusal
from airflow_iceberg.jobs.snapshot_history import TableHistory, history_from_metadata
from airflow_iceberg.jobs.table_state import TableNotFoundError

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.refs import SnapshotRef

    from airflow_iceberg.jobs.table_refs import Retention

#: One ref change: the updates of one commit and the requirements that make it safe, built from
#: the table as it is when the commit is tried.
Change = Callable[["Table"], tuple[Sequence[Any], Sequence[Any]]]


def history_of(table: str, loaded: Table) -> TableHistory:
    """The refs, ancestry and ``main``'s log of a table pyiceberg loaded, read as the Spark job reads its own.

    pyiceberg serialises its metadata as the Iceberg spec's JSON (as in the files it writes), which
    :func:`~airflow_iceberg.jobs.snapshot_history.history_from_metadata` reads exactly like the
    driver's ``TableMetadataParser.toJson``.
    """
    return history_from_metadata(table, json.loads(loaded.metadata.model_dump_json()))


def set_ref(name: str, snapshot_id: int, kind: str, existing: SnapshotRef | None, **retention: Any) -> Any:
    """``set-snapshot-ref``: point ``name`` at ``snapshot_id``, keeping ``existing``'s retention.

    Iceberg's ``replaceBranch``, ``replaceTag`` and a rollback keep a ref's retention settings
    (``SnapshotRef.builderFrom``); ``retention`` overrides them (a tag's ``RETAIN``).
    """
    from pyiceberg.table.update import SetSnapshotRefUpdate

    kept = {
        "max_ref_age_ms": getattr(existing, "max_ref_age_ms", None),
        "max_snapshot_age_ms": getattr(existing, "max_snapshot_age_ms", None),
        "min_snapshots_to_keep": getattr(existing, "min_snapshots_to_keep", None),
    }
    return SetSnapshotRefUpdate(ref_name=name, snapshot_id=snapshot_id, type=kind, **{**kept, **retention})


def ref_is(name: str, snapshot_id: int | None) -> Any:
    """``assert-ref-snapshot-id``: ``name`` still points at ``snapshot_id`` (None: no ref of that name)."""
    from pyiceberg.table.update import AssertRefSnapshotId

    return AssertRefSnapshotId(ref=name, snapshot_id=snapshot_id)


class PyicebergTableRefs:
    """One table's refs through pyiceberg, for the steps that move them in the worker.

    :param table: The table as the task names it (``catalog.namespace.table``), for messages.
    :param load: Loads the table afresh (:func:`~.pyiceberg_tables.table_loader`).
    :param loaded: The table already loaded (to choose the path), read by the first :meth:`history`.
    :param writes_metadata_files: The client writes the new metadata file (SQL and Hive
        catalogs), so it also deletes the files Iceberg's ``write.metadata.delete-after-commit``
        drops; a REST server does both itself.
    """

    def __init__(
        self,
        table: str,
        load: Callable[[], Table],
        loaded: Table | None = None,
        writes_metadata_files: bool = True,
    ) -> None:
        self.table = table
        self._load = load
        self._seeded = loaded
        self._last: Table | None = None  # the table as last read, until a commit changes it
        self._writes_metadata_files = writes_metadata_files
        self._uuid: Any = None
        self._decided: TableMetadata | None = None
        #: The table's metadata as last read or committed: what the step's lineage describes.
        self.metadata: TableMetadata | None = loaded.metadata if loaded is not None else None

    def read(self) -> Table:
        """The table now (the one loaded beforehand, the first time)."""
        loaded, self._seeded = self._seeded, None
        if loaded is None:
            from pyiceberg.exceptions import NoSuchTableError

            try:
                loaded = self._load()
            except NoSuchTableError:
                raise TableNotFoundError(f"table {self.table} does not exist") from None
        if self._uuid is None:  # the table the step decides about; a table made again is another
            self._uuid = loaded.metadata.table_uuid
        self._last, self.metadata = loaded, loaded.metadata
        return loaded

    def history(self) -> TableHistory:
        loaded = self.read()
        self._decided = loaded.metadata  # what the step decides on, even after its marker's commit
        return history_of(self.table, loaded)

    def create_tag(self, name: str, snapshot_id: int, *, replace: bool, retain: Retention | None) -> None:
        from pyiceberg.table.refs import SnapshotRefType

        # CREATE TAG: the tag must not exist; OR REPLACE: it must be where the decision saw it (a
        # swap, no clobber). Pinned to the decision's read, not per try nor after the marker's
        # commit: a tag another writer moved since must not be taken for the one to replace.
        decision = self._decided or (self._last or self.read()).metadata
        decided = decision.refs.get(name) if replace else None
        expected = decided.snapshot_id if decided is not None else None

        def change(current: Table) -> tuple[Sequence[Any], Sequence[Any]]:
            existing = current.metadata.refs.get(name)
            if replace and existing is not None and existing.snapshot_ref_type != SnapshotRefType.TAG:
                raise ValueError(f"Ref {name} is a branch not a tag")  # Iceberg's replaceTag refuses it
            age = {"max_ref_age_ms": retain.ms} if retain is not None else {}
            update = set_ref(name, snapshot_id, SnapshotRefType.TAG, existing if replace else None, **age)
            return [update], [ref_is(name, expected)]

        self.commit(change)

    def rollback_main(self, snapshot_id: int) -> None:
        from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType

        def change(current: Table) -> tuple[Sequence[Any], Sequence[Any]]:
            main = current.metadata.refs.get(MAIN_BRANCH)
            head = main.snapshot_id if main is not None else None
            if not history_of(self.table, current).is_ancestor(snapshot_id, of=head):
                # Iceberg's words, checked as its rollback checks them: against the base of each try
                raise ValueError(
                    f"Cannot roll back to snapshot, not an ancestor of the current state: {snapshot_id}"
                )
            update = set_ref(MAIN_BRANCH, snapshot_id, SnapshotRefType.BRANCH, main)
            return [update], [ref_is(MAIN_BRANCH, head)]

        self.commit(change)

    def commit(self, change: Change) -> TableMetadata:
        """Make ``change`` in one commit; return the table's metadata after it.

        Each try builds the change from the table as it is, checks its requirements on that
        metadata (a ref that moved raises ``CommitFailedException``: nothing changed), and
        commits. A swap that failed while the requirements held is tried again on the new
        metadata, at most ``commit.retry.num-retries`` more times, waiting as Iceberg does between
        tries. A catalog that answered with a refusal (a 4xx: bad request, no access, no table)
        raises its error; any other error of the commit (a timeout, a 5xx, a dropped connection)
        may have come after the catalog swapped the metadata, so it is raised as pyiceberg's
        ``CommitStateUnknownException``: the step then says the outcome is unknown, never that
        nothing changed, as the Spark job does after Iceberg's Java exception of that name.
        """
        from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
        from pyiceberg.table.update import AssertTableUUID

        current = self._last or self.read()  # the table the decision read, unless a commit came since
        retries = _retry_settings(current.metadata.properties)
        for attempt in range(retries[0] + 1):
            updates, requirements = change(current)
            checks = (
                *requirements,
                *self._client_swap_requirements(current, updates),
                AssertTableUUID(uuid=self._uuid or current.metadata.table_uuid),
            )
            if self._writes_metadata_files and (behind := clock_refusal(current.metadata)):
                raise ValueError(f"{behind}. Nothing was changed")  # a later writer's clock got ahead
            for requirement in checks:
                requirement.validate(current.metadata)
            try:
                response = current.catalog.commit_table(current, tuple(checks), tuple(updates))
            except CommitFailedException:
                if attempt == retries[0]:
                    raise
                time.sleep(min(retries[1] * 2**attempt, retries[2]) / 1000)
                current = self.read()
                continue
            except (CommitStateUnknownException, *_refusals()):
                raise
            except Exception as error:
                raise CommitStateUnknownException(f"{type(error).__name__}: {error}") from error
            if self._writes_metadata_files:
                delete_removed_metadata_files(current, response.metadata)
            self._last, self.metadata = None, response.metadata
            return response.metadata
        raise AssertionError("unreachable: the last try returns or raises")


    def _client_swap_requirements(self, current: Table, updates: Sequence[Any]) -> list[Any]:
        """What a catalog that swaps in the client also checks: each ref set is exactly as the change
        read it, and this worker's clock is not behind the metadata it stamps
        (:func:`~.pyiceberg_path.clock_refusal`).

        A ``set-snapshot-ref`` keeps the ref's retention as read; the catalog applies it to the
        metadata it loads inside ``commit_table``. Requiring the whole ref (not only its snapshot)
        there turns another writer's retention change in between into a failed swap, and the
        change is built again on the new metadata instead of writing the old retention back.
        """
        if not self._writes_metadata_files:  # REST: the server knows only the spec's requirement types
            return []
        from pyiceberg.table.update import SetSnapshotRefUpdate

        from airflow_iceberg.catalog.ref_requirement import AssertClockNotBehind, AssertRefUnchanged

        return [
            *(
                AssertRefUnchanged(ref=update.ref_name, expected=current.metadata.refs.get(update.ref_name))
                for update in updates
                if isinstance(update, SetSnapshotRefUpdate)
            ),
            AssertClockNotBehind(),  # the catalog stamps the metadata it loads inside the swap
        ]


def _refusals() -> tuple[type[Exception], ...]:
    from pyiceberg.exceptions import BadRequestError, ForbiddenError, NoSuchTableError, UnauthorizedError

    return BadRequestError, ForbiddenError, NoSuchTableError, UnauthorizedError


def _retry_settings(properties: dict[str, str]) -> tuple[int, int, int]:
    """The table's ``commit.retry.num-retries``, ``min-wait-ms`` and ``max-wait-ms`` (Iceberg's defaults)."""

    def number(key: str, default: int) -> int:
        try:
            return max(0, int(properties.get(key, default)))
        except ValueError:
            return default

    return (
        number("commit.retry.num-retries", 4),
        number("commit.retry.min-wait-ms", 100),
        number("commit.retry.max-wait-ms", 60_000),
    )


def delete_removed_metadata_files(base: Table, metadata: TableMetadata) -> None:
    """Delete the metadata files a commit dropped from the metadata log, if the table asks for it.

    What Iceberg's ``CatalogUtil.deleteRemovedMetadataFiles`` does after a commit with
    ``write.metadata.delete-after-commit.enabled``: the files of the old log that the new one no
    longer lists (``write.metadata.previous-versions-max`` keeps the newest). Best effort, as there:
    a file left behind is an orphan, never a broken table.
    """
    if str(metadata.properties.get("write.metadata.delete-after-commit.enabled", "false")).lower() != "true":
        return
    kept = {entry.metadata_file for entry in metadata.metadata_log}
    for entry in base.metadata.metadata_log:
        if entry.metadata_file not in kept:
            try:
                base.io.delete(entry.metadata_file)
            except Exception as error:  # the commit stands; only a file stays behind
                warnings.warn(
                    f"Failed to delete old metadata file {entry.metadata_file}: {error}", stacklevel=2
                )

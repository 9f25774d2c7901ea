"""Commit requirements the client-side swaps check: a ref exactly as read, and the worker's clock.

``assert-ref-snapshot-id``, the only ref requirement in Iceberg's REST spec, names a ref's
snapshot. A ``set-snapshot-ref`` carries the whole ref, retention included, so a ref change built
on metadata read before another writer's ``REPLACE BRANCH … RETAIN`` would write the old retention
back: the snapshot still matches. pyiceberg's SQL and Hive catalogs load the table
themselves inside ``commit_table`` and apply the updates to *that* metadata after checking each
requirement's :meth:`validate` on it, in the same step as their atomic swap; this requirement fails
that check when the ref differs in any field from the one the change was built on, and the
caller builds the change again on the new metadata. A REST server checks requirements on its side
from their JSON, which has no such type, so it is never sent there.

Imports pyiceberg: import this module only where the pyiceberg path runs.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRef
from pyiceberg.table.update import ValidatableTableRequirement


class AssertRefUnchanged(ValidatableTableRequirement):
    """The ref ``ref`` is exactly ``expected`` (None: there is no ref of that name)."""

    type: Literal["airflow-iceberg-assert-ref-unchanged"] = Field(
        default="airflow-iceberg-assert-ref-unchanged"
    )
    ref: str
    expected: SnapshotRef | None = None

    def validate(self, base_metadata: TableMetadata | None) -> None:
        current = base_metadata.refs.get(self.ref) if base_metadata is not None else None
        if current != self.expected:
            raise CommitFailedException(
                f"Requirement failed: ref {self.ref} changed since the commit was built: "
                f"expected {self.expected}, found {current}"
            )


class AssertClockNotBehind(ValidatableTableRequirement):
    """This worker's clock is not more than a minute behind the metadata the catalog swaps.

    The client stamps ``last-updated-ms`` and the log entries of the metadata it loaded inside
    ``commit_table``, which may be newer than any the step read; Iceberg's Java client cannot load a
    log that runs backwards (:func:`~airflow_iceberg.catalog.pyiceberg_path.clock_refusal`).
    """

    type: Literal["airflow-iceberg-assert-clock-not-behind"] = Field(
        default="airflow-iceberg-assert-clock-not-behind"
    )

    def validate(self, base_metadata: TableMetadata | None) -> None:
        from airflow_iceberg.catalog.pyiceberg_path import clock_refusal

        if base_metadata is not None and (behind := clock_refusal(base_metadata)):
            raise CommitFailedException(f"Requirement failed: {behind}")

"""A commit requirement that a ref is exactly as read, snapshot *and* retention, for client-side swaps.

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

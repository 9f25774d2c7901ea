"""Where a tag's and a rollback's steps read the table's refs and make their ref changes.

A tag and a rollback take the same steps wherever they run: read the refs, record a marker for
the task's retries (:mod:`.retry_markers`), decide, move one ref. Only the reading and the moving
differ: in the Spark job they are Iceberg's SQL statements and procedures
(:class:`~.branches.SparkTableRefs`); in the Airflow worker they are pyiceberg commits
(:class:`airflow_iceberg.catalog.pyiceberg_refs.PyicebergTableRefs`). The steps
(:func:`~.branches.tag_with`, :func:`~.rollback.rollback_with`) take either, so both paths run
one algorithm, and what the job tests prove about its decisions holds for both.

Standard library only: the worker imports it without pyspark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from airflow_iceberg.jobs.snapshot_history import TableHistory

_UNIT_MS = {"DAYS": 86_400_000, "MINUTES": 60_000}


@dataclass(frozen=True)
class Retention:
    """A tag's ``RETAIN <amount> <unit>``: how long Iceberg keeps it, counted from its snapshot's commit."""

    amount: int
    unit: Literal["DAYS", "MINUTES"]

    @property
    def ms(self) -> int:
        """The tag's ``max-ref-age-ms``, as Iceberg's SQL sets it."""
        return self.amount * _UNIT_MS[self.unit]


class TableRefs(Protocol):
    """One table's refs: read them, create or replace a tag, roll ``main`` back."""

    table: str

    def history(self) -> TableHistory:
        """The table's refs, ancestry and ``main``'s log now, read afresh on every call."""
        ...

    def create_tag(self, name: str, snapshot_id: int, *, replace: bool, retain: Retention | None) -> None:
        """``ALTER TABLE … CREATE [OR REPLACE] TAG name AS OF VERSION snapshot_id [RETAIN …]``.

        As Iceberg's Spark SQL does it: without ``replace`` it fails when a ref of that name exists
        (checked against the commit's own base, so of two tries creating one marker exactly one
        wins); a replaced tag keeps its retention unless ``retain`` is given.
        """
        ...

    def rollback_main(self, snapshot_id: int) -> None:
        """Iceberg's ``rollback_to_snapshot``: ``main`` moves back to ``snapshot_id``.

        The snapshot must be an ancestor of ``main`` when the commit is made: a commit that lands
        on ``main`` meanwhile is rolled back with the rest, and one that takes the snapshot out
        of ``main``'s history makes this fail.
        """
        ...

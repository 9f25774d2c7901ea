"""Publishing an audited branch from the Airflow worker, through pyiceberg: the job's decision, one commit.

The decision is the Spark job's own (:func:`airflow_iceberg.jobs.publish.decide`, on the table's
metadata as pyiceberg loaded it), so are its refusals, its result and its failure messages. Only
the move differs: where the job commits one Iceberg transaction against the base it decided on,
this commits the same ref changes with requirements that name what the decision read:

- ``assert-ref-snapshot-id`` of the target at the head the decision saw (absent, for a target
  to create): a commit to the target in between (an append to ``main``, another publish, a
  rollback) fails the publish, and ``main`` is never moved past a commit it did not see;
- ``assert-ref-snapshot-id`` of the published branch at the head the decision saw: a commit on
  the branch in between (unaudited) fails it too, whether or not the branch is dropped.

Everything else the decision read (ancestry, ``main``'s snapshot log) changes only with those
refs, so a commit elsewhere in the table does not make the decision stale
(:class:`~.pyiceberg_refs.PyicebergTableRefs` makes the commit again on the new metadata).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_iceberg.catalog.pyiceberg_refs import PyicebergTableRefs, ref_is, set_ref
from airflow_iceberg.jobs.publish import already_published_note, decide, publish_failure, publish_result
from airflow_iceberg.jobs.spec.branches import PublishSpec

if TYPE_CHECKING:
    from pyiceberg.table import Table


def publish_with_pyiceberg(refs: PyicebergTableRefs, spec: PublishSpec) -> dict[str, Any]:
    """Fast-forward ``spec.target_branch`` to the audited snapshot; maybe drop the branch."""
    from pyiceberg.table.refs import SnapshotRefType
    from pyiceberg.table.update import RemoveSnapshotRefUpdate

    history = refs.history()
    decision = decide(history, spec)
    if decision.already:
        print(f"airflow-iceberg: {already_published_note(spec, decision)}", flush=True)
        if not decision.drop:
            return publish_result(spec, decision, dropped=False)
    requirements = [ref_is(spec.target_branch, decision.previous), ref_is(spec.branch, decision.branch_head)]

    def change(current: Table) -> tuple[list[Any], list[Any]]:
        # Built on the table as it is at each try, not as the decision read it: the requirements pin
        # the two heads only, so the target's retention is taken from the metadata the swap replaces
        # (a concurrent ``REPLACE BRANCH … RETAIN`` is kept wherever the client swaps the metadata).
        updates: list[Any] = []
        if not decision.already:  # a fast-forward (checked by decide), or the target made at the snapshot
            target = current.metadata.refs.get(spec.target_branch)
            updates.append(set_ref(spec.target_branch, decision.published, SnapshotRefType.BRANCH, target))
        if decision.drop:
            updates.append(RemoveSnapshotRefUpdate(ref_name=spec.branch))
        return updates, requirements

    try:
        refs.commit(change)
    except Exception as error:
        raise publish_failure(spec, decision, error) from None
    return publish_result(spec, decision, dropped=decision.drop)

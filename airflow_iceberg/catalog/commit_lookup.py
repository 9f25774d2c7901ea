"""Find a task's commit in the catalog by its commit id: the result of a job whose driver ran elsewhere.

In cluster deploy mode (YARN, Kubernetes) the Spark driver runs on the cluster, so the result
file the job writes in client mode never reaches the Airflow worker. It does not need to: every
commit carries its task's commit id in its snapshot summary
(:data:`~airflow_iceberg.jobs.spec.request.COMMIT_ID_PROPERTY`), so the worker reads the table's
metadata through the same catalog with pyiceberg and finds the snapshot the job committed. The
catalog is the one source of truth either way: a driver that committed and then died still left
its commit there, and a retry that reconnects to a running driver reads it once that driver ends.

The search is the job's own (:func:`airflow_iceberg.jobs.commits.earlier_commit`): the written
ref's history first (only snapshots still in it count: a rolled-back commit holds no rows), then,
for a branch write, ``main`` and the other branches by name, since a publish and a branch drop
may have moved the commit off its branch by the time the worker looks.

Works on pyiceberg ``Table`` objects (the caller loads them, so nothing here imports pyiceberg).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_iceberg.catalog.new_snapshots import snapshots_by_id
from airflow_iceberg.jobs.record_counts import may_count_dead_rows, summary_counts
from airflow_iceberg.jobs.spec.request import COMMIT_ID_PROPERTY, committed_at

#: Why a result found in the catalog has no ``deleted_records``/``record_count_change`` when the
#: summary alone cannot vouch for them (the job reads the commit's manifests to decide; the
#: worker does not).
UNCHECKED_COUNT_REASON = (
    "the commit removed data files from a table with delete files; in cluster deploy mode the "
    "result comes from the snapshot summary, which may count rows deleted earlier"
)


def search_order(table: Any, ref: str) -> list[str]:
    """The branches to search for a commit made to ``ref``: ``ref``, then ``main``, then the rest by name."""
    branches = [ref]
    if ref != "main":
        others = {name for name, head in table.metadata.refs.items() if _is_branch(head)}
        branches += ["main", *sorted(others - {ref, "main"})]
    return branches


def find_tagged_commit(table: Any, commit_id: str, branches: Sequence[str]) -> tuple[str, Any] | None:
    """The first of ``branches`` whose history holds the snapshot tagged ``commit_id``: (branch, snapshot)."""
    by_id = snapshots_by_id(table)
    seen: set[int] = set()
    for branch in branches:
        ref = table.metadata.refs.get(branch)
        current = ref.snapshot_id if ref is not None and _is_branch(ref) else None
        while current is not None and current not in seen:
            seen.add(current)
            snapshot = by_id.get(current)
            if snapshot is None:  # expired ancestors: the history kept ends here
                break
            if _summary_properties(snapshot).get(COMMIT_ID_PROPERTY) == commit_id:
                return branch, snapshot
            current = snapshot.parent_snapshot_id
    return None


def describe_commit(snapshot: Any) -> dict[str, Any]:
    """A pyiceberg snapshot described as the job describes its commit (``snapshot_id``, counts ...).

    The same keys and values as :func:`airflow_iceberg.jobs.table_state.describe_java_snapshot`
    followed by its count check; where that check would read manifests, the counts it could not
    vouch for are None, with :data:`UNCHECKED_COUNT_REASON`.
    """
    summary = _summary_properties(snapshot)
    reason = UNCHECKED_COUNT_REASON if may_count_dead_rows(summary) else None
    return {
        "snapshot_id": int(snapshot.snapshot_id),
        "parent_snapshot_id": snapshot.parent_snapshot_id,
        "operation": snapshot.summary.operation.value if snapshot.summary is not None else None,
        "committed_at": committed_at(int(snapshot.timestamp_ms)),
        "summary": summary,
        **summary_counts(summary, reason),
    }


def committed_by(table: Any, commit_id: str, ref: str) -> dict[str, Any]:
    """``committed`` and the described snapshot the job tagged ``commit_id`` made to ``ref``.

    ``{"committed": False, "snapshot_id": None}`` when no snapshot carries the id: Iceberg made no
    commit (an empty dynamic overwrite, a delete Spark folded to false), as the job reports it.
    ``found_on_branch`` names where it was found when that is not ``ref``.
    """
    found = find_tagged_commit(table, commit_id, search_order(table, ref))
    if found is None:
        return {"committed": False, "snapshot_id": None}
    branch, snapshot = found
    described = {"committed": True, **describe_commit(snapshot)}
    return described if branch == ref else {**described, "found_on_branch": branch}


def _summary_properties(snapshot: Any) -> dict[str, str]:
    summary = snapshot.summary
    return {str(k): str(v) for k, v in summary.additional_properties.items()} if summary is not None else {}


def _is_branch(ref: Any) -> bool:
    kind = getattr(ref, "snapshot_ref_type", "branch")
    return str(getattr(kind, "value", kind)).lower() == "branch"

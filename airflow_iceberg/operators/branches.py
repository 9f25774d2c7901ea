"""Write-audit-publish: publish an audited branch to ``main``, and tag snapshots.

Write with ``branch="audit_{{ ds_nodash }}"`` (every write, merge and delete operator takes it),
audit with a read of that branch, then :class:`IcebergPublishOperator` fast-forwards ``main`` to
it. A failed audit stops the DAG before publishing, and ``main`` never saw the rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_iceberg.jobs.action_specs import PublishSpec, TagSpec
from airflow_iceberg.operators.base import IcebergSparkSubmitOperator
from airflow_iceberg.timestamps import to_snapshot_id


class IcebergPublishOperator(IcebergSparkSubmitOperator):
    """Fast-forward ``main`` (or ``target_branch``) to an audited branch: one atomic metadata commit.

    Fails clearly, changing nothing, when the target moved since the branch was made (it is not an
    ancestor of the branch any more). Idempotent by nature: fast-forwarding to where the target
    already is changes nothing. With ``drop_branch`` a retry after the drop fails, saying the
    branch does not exist, since nothing then tells a published branch from a mistyped one.

    XCom: ``{"table", "branch", "target_branch", "previous_snapshot_id", "snapshot_id",
    "branch_dropped"}``.

    :param branch: The audited branch to publish. (templated)
    :param target_branch: The branch to move. Default ``main``. (templated)
    :param drop_branch: Drop ``branch`` once published. Default False.
    """

    writes_table = True

    template_fields: Sequence[str] = (*IcebergSparkSubmitOperator.template_fields, "branch", "target_branch")

    def __init__(
        self, *, branch: str, target_branch: str = "main", drop_branch: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.branch = branch
        self.target_branch = target_branch
        self.drop_branch = drop_branch

    def build_spec(self) -> PublishSpec:
        return PublishSpec(
            table=self.table,
            branch=self.branch,
            target_branch=self.target_branch,
            drop_branch=self.drop_branch,
        )

    def log_result(self, result: Mapping[str, Any]) -> None:
        self.log.info(
            "Published branch %s of %s: %s moved from snapshot %s to %s",
            result.get("branch"),
            result.get("table"),
            result.get("target_branch"),
            result.get("previous_snapshot_id"),
            result.get("snapshot_id"),
        )


class IcebergTagOperator(IcebergSparkSubmitOperator):
    """Create or replace a tag on a snapshot, e.g. an end-of-day tag that expiry keeps.

    Idempotent by nature with ``replace`` (the default): a retry sets the same tag again.

    :param tag: The tag's name, e.g. ``"eod_{{ ds_nodash }}"``. (templated)
    :param snapshot_id: The snapshot to tag; default ``main``'s current one. Accepts an upstream
        XCom such as ``"{{ ti.xcom_pull(task_ids='merge')['snapshot_id'] }}"``. (templated)
    :param retain_days: Keep the tag (and its snapshot) this many days; default forever.
    :param replace: Move an existing tag of that name (default True); False fails if it exists.
    """

    template_fields: Sequence[str] = (*IcebergSparkSubmitOperator.template_fields, "tag", "snapshot_id")

    def __init__(
        self,
        *,
        tag: str,
        snapshot_id: Any = None,
        retain_days: int | None = None,
        replace: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.tag = tag
        self.snapshot_id = snapshot_id
        self.retain_days = retain_days
        self.replace = replace

    def build_spec(self) -> TagSpec:
        return TagSpec(
            table=self.table,
            tag=self.tag,
            snapshot_id=to_snapshot_id(self.snapshot_id),
            retain_days=self.retain_days,
            replace=self.replace,
        )

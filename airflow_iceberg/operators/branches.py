"""Write-audit-publish: publish an audited branch to ``main``, and tag snapshots.

Write with ``branch="audit_{{ ds_nodash }}"`` (every write, merge and delete operator takes it),
audit with a read of that branch, then :class:`IcebergPublishOperator` fast-forwards ``main`` to
the audited snapshot. A failed audit stops the DAG before publishing, and ``main`` never saw the
rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_iceberg.exceptions import InvalidSpecError
from airflow_iceberg.jobs.spec.branches import PublishSpec, TagSpec
from airflow_iceberg.operators.base import IcebergSparkSubmitOperator
from airflow_iceberg.operators.metadata_steps import IcebergRefStepOperator
from airflow_iceberg.timestamps import to_snapshot_id


class IcebergPublishOperator(IcebergRefStepOperator):
    """Fast-forward ``main`` (or ``target_branch``) to the audited snapshot of a branch: one atomic commit.

    Pin what was audited with ``expected_snapshot_id`` (the audit's snapshot, e.g. an upstream
    XCom): the branch must still be at it, else nothing is published, so a commit that lands on
    the branch after the audit is never published unaudited. Refused, changing nothing, when the
    target moved since the branch was made (a fast-forward would drop its newer commits) and when
    the target does not exist (unless ``create_target_branch``). A retry whose earlier try
    published (the snapshot is already in the target's history, even after other writers
    committed on top) succeeds with ``"already_published": true`` and changes nothing; after
    ``drop_branch`` dropped the branch only a pinned publish can tell, so pin it.

    XCom: ``{"table", "branch", "target_branch", "previous_snapshot_id", "snapshot_id" (the
    published snapshot), "already_published", "target_branch_created", "branch_dropped",
    "branch_snapshot_id", "branch_holds_unpublished_commits"}``.

    :param branch: The audited branch to publish. (templated)
    :param target_branch: The branch to move. Default ``main``. (templated)
    :param expected_snapshot_id: The audited snapshot: publish exactly it, and only while the
        branch is still at it. Accepts an upstream XCom such as
        ``"{{ ti.xcom_pull(task_ids='check')['audited_snapshot_id'] }}"``; a template that
        renders to nothing (``None``, ``"None"``, ``""``: a missing XCom) is refused before
        Spark starts. Default: the branch's head. (templated)
    :param drop_branch: Drop ``branch`` once published. Default False.
    :param create_target_branch: Create ``target_branch`` at the published snapshot when it
        does not exist. Default False: a missing target is refused (a typo would otherwise take
        the audited rows, and ``main`` would never get them).
    :param engine: ``"auto"`` (default) publishes from the worker through pyiceberg where the
        catalog allows it exactly (REST, Hive, Glue, JDBC), else as the Spark job; ``"spark"``
        always the Spark job; ``"pyiceberg"`` never the Spark job (see :mod:`.metadata_steps`).
    """

    writes_table = True

    template_fields: Sequence[str] = (
        *IcebergSparkSubmitOperator.template_fields,
        "branch",
        "target_branch",
        "expected_snapshot_id",
    )

    def __init__(
        self,
        *,
        branch: str,
        target_branch: str = "main",
        expected_snapshot_id: Any = None,
        drop_branch: bool = False,
        create_target_branch: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.branch = branch
        self.target_branch = target_branch
        self.expected_snapshot_id = expected_snapshot_id
        self.drop_branch = drop_branch
        self.create_target_branch = create_target_branch
        #: As given, before rendering: a pin asked for must not render to nothing (see build_spec).
        self._expected_snapshot_id_given = expected_snapshot_id

    def build_spec(self) -> PublishSpec:
        return PublishSpec(
            table=self.table,
            branch=self.branch,
            target_branch=self.target_branch,
            drop_branch=self.drop_branch,
            expected_snapshot_id=self._pinned_snapshot_id(),
            create_target_branch=self.create_target_branch,
        )

    def _pinned_snapshot_id(self) -> int | None:
        """The rendered pin; refused when one was given and it rendered to nothing.

        A template whose XCom is missing renders to ``None`` (native rendering), ``"None"`` or
        ``""``: publishing unpinned then would publish whatever the branch holds, the very thing
        the pin is there to prevent.
        """
        given, rendered = self._expected_snapshot_id_given, self.expected_snapshot_id
        if given is not None and (rendered is None or str(rendered).strip() in ("", "None")):
            template = f"; {given!r} rendered to nothing" if given != rendered else ""
            raise InvalidSpecError(
                f"expected_snapshot_id must be an integer snapshot id, got {rendered!r} (did the upstream "
                f"XCom exist?{template}): no audited snapshot to pin, so nothing is published (unpinned, "
                "the branch's head would be, audited or not). Check that the upstream task pushed the XCom "
                "the template reads"
            )
        return to_snapshot_id(rendered, "expected_snapshot_id")

    def log_result(self, result: Mapping[str, Any]) -> None:
        if result.get("already_published"):
            self.log.info(
                "Snapshot %s of %s is already in %s's history (an earlier try of this task published it, "
                "or it was there before): nothing was published",
                result.get("snapshot_id"),
                result.get("table"),
                result.get("target_branch"),
            )
            if result.get("branch_holds_unpublished_commits"):
                self.log.warning(
                    "Branch %s is at snapshot %s, with commits after snapshot %s: they were not audited, "
                    "and were not published",
                    result.get("branch"),
                    result.get("branch_snapshot_id"),
                    result.get("snapshot_id"),
                )
            return
        self.log.info(
            "Published branch %s of %s: %s moved from snapshot %s to %s",
            result.get("branch"),
            result.get("table"),
            result.get("target_branch"),
            result.get("previous_snapshot_id"),
            result.get("snapshot_id"),
        )


class IcebergTagOperator(IcebergRefStepOperator):
    """Create or replace a tag on a snapshot, e.g. an end-of-day tag that expiry keeps.

    A retry never moves the tag to another snapshot. With ``snapshot_id`` every try tags that
    snapshot. Without it the tag names ``main``'s head as the first try saw it: that try records
    it in a marker tag ``airflow_iceberg_pin_<hash of the commit id>`` (kept a week for the
    retries, see docs/operators.md), and every retry tags the recorded snapshot, whatever
    ``main`` points at by then. Tag a snapshot you know (the publish's or a write's XCom
    ``snapshot_id``) rather than "main now", which may be another writer's commit.

    XCom: ``{"table", "tag", "snapshot_id", "retain_days", "already_tagged"}``.

    :param tag: The tag's name, e.g. ``"eod_{{ ds_nodash }}"``. (templated)
    :param snapshot_id: The snapshot to tag; default ``main``'s current one (as the first try saw
        it). Accepts an upstream XCom such as
        ``"{{ ti.xcom_pull(task_ids='publish')['snapshot_id'] }}"``. (templated)
    :param retain_days: Keep the tag (and its snapshot) this many days; default forever.
    :param replace: Move an existing tag of that name (default True); False fails if it exists.
    :param engine: ``"auto"`` (default), ``"spark"`` or ``"pyiceberg"``: where the tag is made,
        as for :class:`IcebergPublishOperator`.
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

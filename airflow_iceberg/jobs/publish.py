"""Publishing an audited branch: move the target branch (``main``) to exactly the audited snapshot, once.

What is published is a snapshot, not "whatever the branch holds now": with
``expected_snapshot_id`` (the snapshot the audit read) the branch must still be at it, and only
it is published, so a commit that lands on the branch after the audit is never published
unaudited. The move is a fast-forward only: the target's head must be an ancestor of the
published snapshot, so no commit of the target is ever dropped. A target that does not exist is
refused unless ``create_target_branch`` asks for it, so a mistyped target cannot swallow the
audited rows while the task reports success.

A retry recognises its earlier try by ancestry: if the published snapshot (the pin, or without
one the branch's head) is already the target's head or one of its ancestors, the publish
happened, and the retry says so (``already_published``) and changes nothing, even after other
writers committed on top, and with a pin even after ``drop_branch`` dropped the branch. A pin
that was published and then expired is still found while a snapshot of the target's history
names it as its parent; when none does, the refusal says it may have been published.

A fast-forward never brings back what ``main`` rolled back: a branch made before a rollback
holds the rolled-back snapshot in its history, and publishing it would make that snapshot's rows
current again. ``main``'s snapshot log says which snapshots were in its history once
(:meth:`~.snapshot_history.TableHistory.rolled_out_of_main`); such a publish is refused.
Iceberg keeps that log for ``main`` only, so the check covers a publish to ``main``.

The move is atomic against concurrent commits, in both execution modes:

- with a driver JVM (spark-submit), the checks and the change are one Iceberg transaction: the
  refs are read from its base, and the ref update (move, and the branch drop with
  ``drop_branch``) commits against that base, so any concurrent commit makes it fail, never
  clobber (``UpdateSnapshotReferencesOperation`` has a fixed base);
- over Spark Connect (SQL only), the pin becomes a marker tag (:mod:`.retry_markers`) and
  Iceberg's ``fast_forward`` moves the target to that tag, checking the ancestry against its own
  base; the tag is dropped afterwards. The branch drop is a statement of its own, made only if
  the branch still holds the published snapshot;
- in the Airflow worker, without Spark (:mod:`airflow_iceberg.catalog.pyiceberg_publish`), the
  same :func:`decide` on the metadata pyiceberg loaded, and one commit whose requirements name
  the target's and the branch's heads as decided on, which the catalog checks atomically.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_iceberg.jobs.branches import SparkTableRefs, procedure_call
from airflow_iceberg.jobs.retry_markers import create_marker, drop_marker, marker_name
from airflow_iceberg.jobs.snapshot_history import TableHistory, history_of_java_table, load_history
from airflow_iceberg.jobs.spec.branches import PublishSpec
from airflow_iceberg.jobs.spec.identifiers import quote_identifier
from airflow_iceberg.jobs.table_state import (
    TableStateError,
    commit_outcome_unknown,
    has_driver_jvm,
    iceberg_error_reason,
    iceberg_table,
    ref_snapshot_id,
    require_table,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class PublishError(TableStateError):
    """The branch cannot be published as asked; nothing was changed."""


@dataclass(frozen=True)
class Decision:
    """What publishing means in the current state of the table."""

    published: int  # the snapshot the target gets (or already has in its history)
    previous: int | None  # the target's head now; None when the target is to be created
    already: bool  # an earlier try (or anyone) already published it: no move
    drop: bool  # drop the branch: asked for, and it holds nothing the target lacks
    branch_head: int | None = None  # the branch's head as decided on; None when it does not exist
    branch_ahead: bool = False  # the branch holds commits the target lacks (after the published snapshot)


def publish_branch(
    spark: SparkSession,
    spec: PublishSpec,
    commit_id: str | None = None,
    reuse_commit: bool = False,
) -> dict[str, Any]:
    """Fast-forward ``spec.target_branch`` to the audited snapshot of ``spec.branch``; maybe drop the branch.

    Returns ``snapshot_id`` (the published snapshot), ``previous_snapshot_id`` (the target's head
    before, None when nothing moved or the target was created), ``already_published``,
    ``target_branch_created``, ``branch_dropped``, ``branch_snapshot_id`` (the branch's head as
    decided on) and ``branch_holds_unpublished_commits`` (the branch has commits after the
    published snapshot, which this publish left out).
    """
    require_table(spark, spec.table)
    if has_driver_jvm(spark):
        decision, dropped = _publish_in_one_commit(spark, spec)
    else:
        decision, dropped = _publish_with_sql(spark, spec, commit_id or uuid.uuid4().hex)
    if decision.already:
        print(f"airflow-iceberg: {already_published_note(spec, decision)}", flush=True)
    return publish_result(spec, decision, dropped)


def publish_result(spec: PublishSpec, decision: Decision, dropped: bool) -> dict[str, Any]:
    """The publish's result (its XCom) for what was decided and done, the same in every execution mode."""
    return {
        "table": spec.table,
        "branch": spec.branch,
        "target_branch": spec.target_branch,
        "previous_snapshot_id": None if decision.already else decision.previous,
        "snapshot_id": decision.published,
        "already_published": decision.already,
        "target_branch_created": not decision.already and decision.previous is None,
        "branch_dropped": dropped,
        "branch_snapshot_id": decision.branch_head,
        "branch_holds_unpublished_commits": decision.branch_ahead,
    }


def already_published_note(spec: PublishSpec, decision: Decision) -> str:
    """Why nothing was published (the snapshot is in the target's history), and what the branch holds."""
    note = (
        f"snapshot {decision.published} of {spec.table} is already in {spec.target_branch}'s history (an "
        "earlier try of this task published it, or it was there before): nothing was published"
    )
    if decision.branch_ahead:
        note += (
            f". Branch {spec.branch} is at {decision.branch_head}, with commits after snapshot "
            f"{decision.published}: they were not audited, and were not published"
        )
    return note


def decide(history: TableHistory, spec: PublishSpec) -> Decision:
    """Decide from one consistent view of the refs; raise :class:`PublishError` for every refusal."""
    target, head = history.branch(spec.target_branch), history.branch(spec.branch)
    pin = spec.expected_snapshot_id
    if history.tag(spec.target_branch) is not None:
        raise PublishError(
            f"cannot publish to {spec.target_branch!r} of {history.table}: it is a tag, not a branch. "
            "Nothing was changed; give the branch to move as target_branch"
        )
    published = pin if pin is not None else head
    if target is not None and published is not None and history.was_in_history_of(published, of=target):
        keeps_nothing = head is not None and history.is_ancestor(head, of=target)
        if spec.drop_branch and head is not None and not keeps_nothing:
            print(
                f"airflow-iceberg: not dropping branch {spec.branch} of {history.table}: its head "
                f"{head} has commits after the published snapshot {published}",
                flush=True,
            )
        drop, ahead = spec.drop_branch and keeps_nothing, head is not None and not keeps_nothing
        return Decision(published, target, already=True, drop=drop, branch_head=head, branch_ahead=ahead)
    if pin is not None and not history.has_snapshot(pin):
        raise _unknown_pin(history, spec)
    if head is None:
        raise _missing_branch(history, spec)
    if pin is not None and head != pin:
        raise _branch_moved(history, spec, head)
    if target is None and not spec.create_target_branch:
        raise _missing_target(history, spec)
    if target is not None and not history.is_ancestor(target, of=head):
        raise PublishError(
            f"cannot publish branch {spec.branch!r} of {history.table}: {spec.target_branch} moved since "
            f"the branch was made ({spec.target_branch} is at snapshot {target}, which is not an ancestor "
            f"of {spec.branch}'s {head}), and a fast-forward would drop its newer commits. "
            f"{spec.target_branch} is unchanged and nothing was published; redo the branch's changes "
            f"on a branch made from {spec.target_branch}'s current snapshot, audit and publish that"
        )
    if spec.target_branch == "main":
        _refuse_bringing_back_rolled_out(history, spec, head, target)
    return Decision(head, target, already=False, drop=spec.drop_branch, branch_head=head)


def _refuse_bringing_back_rolled_out(
    history: TableHistory, spec: PublishSpec, head: int, target: int | None
) -> None:
    """Refuse a fast-forward of ``main`` that would bring back a snapshot taken out of its history."""
    rolled_out = history.rolled_out_of_main()
    brought = [s for s in history.ancestors(head) if not history.is_ancestor(s, of=target)]
    back = [s for s in brought if s in rolled_out]
    if not back:
        return
    named = ", ".join(str(s) for s in back[:5]) + (", ..." if len(back) > 5 else "")
    raise PublishError(
        f"cannot publish branch {spec.branch!r} of {history.table}: its history holds snapshot {named}, "
        f"which was in main's history once and was taken out of it (rolled back, or the table replaced; "
        f"see main's snapshot log). The branch was made before that, and publishing its {head} would "
        f"bring those rows back to main. Nothing was published; main is unchanged (at {target}). Start "
        "the branch afresh from main's current snapshot (reset_branch=True on its first write), audit "
        "it and publish that"
    )


def _unknown_pin(history: TableHistory, spec: PublishSpec) -> PublishError:
    pin, target = spec.expected_snapshot_id, spec.target_branch
    return PublishError(
        f"expected_snapshot_id {pin} is not a snapshot of table {history.table}: either it never was one "
        f"(check the XCom the pin comes from), or it was published to {target} and has expired since "
        f"(expire_snapshots), leaving no snapshot of {target}'s history that names it as its parent, so "
        "this task cannot tell which. This try changed nothing. If an earlier try of this task "
        f"published it, its rows are in {target}: check the table's history metadata table before "
        "publishing anything again"
    )


def _missing_branch(history: TableHistory, spec: PublishSpec) -> PublishError:
    table, branch = history.table, spec.branch
    if spec.expected_snapshot_id is None:
        return PublishError(
            f"branch {branch!r} does not exist in table {table}: nothing was published and nothing "
            "changed. Either an earlier try published it and dropped it (drop_branch), or it was never "
            "made (check the name). Without expected_snapshot_id the task cannot tell which: pass the "
            "audited snapshot as expected_snapshot_id, and a retry then knows it was published"
        )
    return PublishError(
        f"branch {branch!r} does not exist in table {table}, and the audited snapshot "
        f"{spec.expected_snapshot_id} is not in {spec.target_branch}'s history (at "
        f"{history.branch(spec.target_branch)}): it was never published. Nothing changed; check the "
        "branch name"
    )


def _branch_moved(history: TableHistory, spec: PublishSpec, head: int) -> PublishError:
    pin = int(spec.expected_snapshot_id or 0)
    why = (
        "a commit landed on the branch after the audit"
        if history.is_ancestor(pin, of=head)
        else f"snapshot {pin} is not in the branch's history"
    )
    return PublishError(
        f"cannot publish branch {spec.branch!r} of {history.table}: it is at snapshot {head}, not at the "
        f"audited snapshot {pin} (expected_snapshot_id): {why}. Nothing was published; "
        f"{spec.target_branch} is unchanged. Audit the branch's new head and publish that, or remove the "
        "unaudited commit from the branch"
    )


def _missing_target(history: TableHistory, spec: PublishSpec) -> PublishError:
    return PublishError(
        f"target branch {spec.target_branch!r} does not exist in table {history.table} (its branches: "
        f"{', '.join(history.branches())}): nothing was published and nothing changed. Check the name "
        "(publishing to a new branch would leave main without the audited rows), or pass "
        "create_target_branch=True to create it at the audited snapshot"
    )


def _publish_in_one_commit(spark: SparkSession, spec: PublishSpec) -> tuple[Decision, bool]:
    """Decide and move in one Iceberg transaction (driver JVM): checked and committed against one base."""
    transaction = iceberg_table(spark, spec.table).newTransaction()
    decision = decide(history_of_java_table(spark, spec.table, transaction.table()), spec)
    if decision.already and not decision.drop:
        return decision, False
    manage = transaction.manageSnapshots()
    if not decision.already:
        if decision.previous is None:
            manage.createBranch(spec.target_branch, decision.published)
        else:
            manage.replaceBranch(spec.target_branch, decision.published)  # a fast-forward: checked above
    if decision.drop:
        manage.removeBranch(spec.branch)
    try:
        manage.commit()
        transaction.commitTransaction()
    except Exception as error:
        raise publish_failure(spec, decision, error) from None
    return decision, decision.drop


def _publish_with_sql(
    spark: SparkSession, spec: PublishSpec, commit_id: str
) -> tuple[Decision, bool]:
    """Decide from the metadata tables, then move with SQL statements pinned to the decided snapshot."""
    table = quote_identifier(spec.table)
    history = load_history(spark, spec.table)
    decision = decide(history, spec)
    pin = marker_name(commit_id)
    if history.tag(pin) is not None:  # left by an earlier try killed while publishing
        drop_marker(spark, spec.table, pin)
    if not decision.already and decision.previous is None:
        try:  # made at the snapshot itself; fails if someone made the branch meanwhile
            spark.sql(
                f"ALTER TABLE {table} CREATE BRANCH {spec.target_branch} AS OF VERSION {decision.published}"
            )
        except Exception as error:
            raise publish_failure(spec, decision, error) from None
    elif not decision.already:
        create_marker(SparkTableRefs(spark, spec.table), history, pin, decision.published)
        try:  # fast_forward checks the ancestry against its own base, and moves to the tag: the pin
            procedure_call(
                spark, spec.table, "fast_forward", {"branch": f"'{spec.target_branch}'", "to": f"'{pin}'"}
            )
        except Exception as error:
            raise publish_failure(spec, decision, error) from None
        finally:
            drop_marker(spark, spec.table, pin)
    if not decision.drop:
        return decision, False
    head = ref_snapshot_id(spark, spec.table, spec.branch, "BRANCH")
    if head is not None and head != history.branch(spec.branch):
        print(
            f"airflow-iceberg: not dropping branch {spec.branch} of {spec.table}: a commit ({head}) landed "
            f"on it while publishing {decision.published}",
            flush=True,
        )
        return decision, False
    spark.sql(f"ALTER TABLE {table} DROP BRANCH IF EXISTS {spec.branch}")
    return decision, True


def publish_failure(spec: PublishSpec, decision: Decision, error: BaseException) -> PublishError:
    """The publish's commit failed: most likely a concurrent commit to the table; say so plainly."""
    reason = iceberg_error_reason(error)
    if commit_outcome_unknown(error):
        return PublishError(
            f"publishing snapshot {decision.published} of branch {spec.branch!r} of {spec.table} to "
            f"{spec.target_branch}: the outcome is unknown ({reason}): {spec.target_branch} may or may "
            "not have moved. Retrying the task is safe: the retry finds the snapshot in "
            f"{spec.target_branch}'s history if this try published it, and publishes it otherwise"
        )
    if "not an ancestor" in reason:
        what = (
            f"{spec.target_branch} moved while publishing (it is no longer an ancestor of "
            f"{decision.published})"
        )
    else:
        what = f"another commit to the table landed while publishing ({reason})"
    return PublishError(
        f"could not publish snapshot {decision.published} of branch {spec.branch!r} of {spec.table} to "
        f"{spec.target_branch}: {what}. Nothing was changed; retry the task, which checks the branch "
        "and the target again"
    )

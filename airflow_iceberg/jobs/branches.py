"""Write-audit-publish: writing to a branch, and tagging snapshots.

A write, merge or delete with ``branch`` lands on that branch only: readers of ``main`` see
nothing until :func:`~airflow_iceberg.jobs.publish.publish_branch` fast-forwards ``main`` to the
audited snapshot.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from airflow_iceberg.jobs.retry_markers import record_snapshot, recorded_snapshot
from airflow_iceberg.jobs.snapshot_history import TableHistory, load_history
from airflow_iceberg.jobs.spec.branches import TagSpec
from airflow_iceberg.jobs.spec.identifiers import quote_identifier, quote_name, split_identifier
from airflow_iceberg.jobs.table_refs import Retention, TableRefs
from airflow_iceberg.jobs.table_state import (
    SnapshotNotFoundError,
    TableStateError,
    ref_snapshot_id,
    require_table,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def branch_identifier(table: str, branch: str | None) -> str:
    """The quoted identifier Spark writes to: ``table.branch_<name>`` for a branch, else the table."""
    return (
        f"{quote_identifier(table)}.{quote_name(f'branch_{branch}')}" if branch else quote_identifier(table)
    )


#: Snapshot-summary keys of the Airflow task instance that made a commit (see operators/base.py).
TASK_IDENTITY = ("airflow.dag-id", "airflow.run-id", "airflow.task-id", "airflow.map-index")


@contextmanager
def branch_for_commit(
    spark: SparkSession,
    table: str,
    branch: str | None,
    reset: bool = False,
    task: Mapping[str, str] | None = None,
) -> Iterator[None]:
    """Run the block with ``branch`` ready for a commit; undo that if the block fails.

    Ready means made from ``main``'s current snapshot if missing, or, with ``reset``, pointed at
    that snapshot whatever it held (:func:`reset_branch`; ``task`` is the Airflow identity of the
    task writing, see :data:`TASK_IDENTITY`). The commit that fails in the block leaves the
    table as it was, and so does this: a branch it created is dropped again, and a branch it
    reset points back where it was, as long as it still points where this left it (no commit on
    it since). A branch this job did not create or move is never touched.
    """
    if not branch:
        yield
        return
    previous = ref_snapshot_id(spark, table, branch, "BRANCH")
    moved_to = reset_branch(spark, table, branch, task) if reset else ensure_branch(spark, table, branch)
    try:
        yield
    except BaseException:
        if moved_to is not None and ref_snapshot_id(spark, table, branch, "BRANCH") == moved_to:
            _undo_branch_move(spark, table, branch, previous)
        raise


def _undo_branch_move(spark: SparkSession, table: str, branch: str, previous: int | None) -> None:
    name = quote_identifier(table)
    if previous is None:
        spark.sql(f"ALTER TABLE {name} DROP BRANCH IF EXISTS {branch}")
    else:
        spark.sql(f"ALTER TABLE {name} REPLACE BRANCH {branch} AS OF VERSION {int(previous)}")


def ensure_branch(spark: SparkSession, table: str, branch: str) -> int | None:
    """Create ``branch`` from ``main``'s current snapshot unless it exists; that snapshot if this made it.

    ``CREATE BRANCH`` without ``IF NOT EXISTS``: Iceberg refuses it, against the commit's own base,
    when the branch exists, so of two writers creating one branch exactly one is its creator. The
    other (this job, when another writer made the branch since the check above) writes on the
    branch it found and returns None: the branch is not this job's to drop should its write fail.
    """
    if ref_snapshot_id(spark, table, branch, "BRANCH") is not None:
        return None
    main = _main_to_branch_from(spark, table, branch)
    try:
        spark.sql(f"ALTER TABLE {quote_identifier(table)} CREATE BRANCH {branch} AS OF VERSION {int(main)}")
    except Exception:
        if ref_snapshot_id(spark, table, branch, "BRANCH") is None:
            raise
        print(
            f"airflow-iceberg: branch {branch} of {table} was created by another writer meanwhile", flush=True
        )
        return None
    print(
        f"airflow-iceberg: created branch {branch} of {table} at main's current snapshot {main}", flush=True
    )
    return main


def reset_branch(
    spark: SparkSession, table: str, branch: str, task: Mapping[str, str] | None = None
) -> int | None:
    """Point ``branch`` at main's current snapshot (made if missing); return that snapshot if it moved.

    This is how a repaired write-audit-publish run starts again from ``main``: the commits a
    failed audit left on the branch are no longer on it (they stay in the table's snapshots,
    readable by id, until expired), so the new write lands on ``main`` exactly. A branch that
    already points at ``main``'s snapshot is left alone (no metadata commit). A reset that would
    drop another task's commit of this same run is refused (:func:`refuse_dropping_a_neighbours_commit`).
    """
    main = _main_to_branch_from(spark, table, branch)
    head = ref_snapshot_id(spark, table, branch, "BRANCH")
    if head == main:
        return None
    if head is not None and task:
        refuse_dropping_a_neighbours_commit(load_history(spark, table), branch, task)
    spark.sql(f"ALTER TABLE {quote_identifier(table)} CREATE OR REPLACE BRANCH {branch} AS OF VERSION {main}")
    was = f"it was at snapshot {head}" if head is not None else "it did not exist"
    print(
        f"airflow-iceberg: reset branch {branch} of {table} to main's current snapshot {main} ({was})",
        flush=True,
    )
    return main


def refuse_dropping_a_neighbours_commit(history: TableHistory, branch: str, task: Mapping[str, str]) -> None:
    """Refuse a reset that would drop a commit another task of this run made on the branch.

    ``reset_branch`` belongs on the first task of a run that writes the branch; on a later one it
    drops the earlier tasks' commits, and the audit then passes on what is left. So the commits
    on the branch and not in ``main``'s history are read (their summaries carry the Airflow
    identity of the task that made them): one of this DAG run by another task instance (task id
    or map index), with none by this task instance, means a neighbour wrote the branch first in
    this run. A commit by this task instance among them means this is a cleared re-run (a repair
    of the run), whose reset is meant to drop the run's earlier work, its neighbours' included.
    """
    run = {key: task.get(key) for key in TASK_IDENTITY}
    if not run["airflow.run-id"] or not run["airflow.task-id"]:
        return
    in_main = set(history.ancestors(history.branch("main")))
    mine, theirs = False, []
    for snapshot in history.ancestors(history.branch(branch)):
        if snapshot in in_main:
            break
        summary = history.summaries.get(snapshot, {})
        if (summary.get("airflow.dag-id"), summary.get("airflow.run-id")) != (
            run["airflow.dag-id"],
            run["airflow.run-id"],
        ):
            continue
        if (summary.get("airflow.task-id"), summary.get("airflow.map-index")) == (
            run["airflow.task-id"],
            run["airflow.map-index"],
        ):
            mine = True
        else:
            theirs.append((snapshot, summary.get("airflow.task-id"), summary.get("airflow.map-index")))
    if theirs and not mine:
        snapshot, task_id, map_index = theirs[0]
        who = f"task {task_id!r}" + (f" (map index {map_index})" if map_index not in (None, "-1") else "")
        raise TableStateError(
            f"reset_branch would drop snapshot {snapshot} that {who} of this DAG run "
            f"({run['airflow.run-id']}) committed on branch {branch!r} of {history.table}"
            + (f", and {len(theirs) - 1} more" if len(theirs) > 1 else "")
            + ": nothing changed. Set reset_branch only on the first task of the run that writes the branch"
        )


def _main_to_branch_from(spark: SparkSession, table: str, branch: str) -> int:
    """``main``'s current snapshot, which a new or reset ``branch`` starts from; refuses a tag's name."""
    if ref_snapshot_id(spark, table, branch, "TAG") is not None:
        raise TableStateError(
            f"{branch!r} is a tag of table {table}, not a branch: choose another branch name"
        )
    main = ref_snapshot_id(spark, table, "main", "BRANCH")
    if main is None:
        raise SnapshotNotFoundError(
            f"table {table} has no snapshot on main to branch {branch!r} from: write to main first"
        )
    return main


def procedure_call(spark: SparkSession, table: str, procedure: str, arguments: dict[str, str]) -> list[Any]:
    """``CALL <catalog>.system.<procedure>(table => '<ns.table>', ...)``; returns the output rows.

    The procedure parses its ``table`` string as a multipart identifier, so the string holds the
    quoted parts (```sales-eu`.`Orders```), itself escaped as a SQL string literal. ``arguments``
    values are SQL literals the caller built from validated input.
    """
    parts = split_identifier(table)
    catalog, name = (parts[0], parts[1:]) if len(parts) > 2 else (spark.catalog.currentCatalog(), parts)
    named = ", ".join(
        [
            f"table => {sql_string(quote_identifier(name))}",
            *(f"{key} => {value}" for key, value in arguments.items()),
        ]
    )
    return spark.sql(f"CALL {quote_name(catalog)}.system.{procedure}({named})").collect()


def sql_string(value: str) -> str:
    """A Spark SQL string literal holding ``value`` exactly."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class SparkTableRefs:
    """A table's refs in a Spark session (:class:`~.table_refs.TableRefs`): Iceberg's SQL and procedures."""

    def __init__(self, spark: SparkSession, table: str) -> None:
        self.spark = spark
        self.table = table

    def history(self) -> TableHistory:
        return load_history(self.spark, self.table)

    def create_tag(self, name: str, snapshot_id: int, *, replace: bool, retain: Retention | None) -> None:
        verb = "CREATE OR REPLACE TAG" if replace else "CREATE TAG"
        sql = f"ALTER TABLE {quote_identifier(self.table)} {verb} {name} AS OF VERSION {int(snapshot_id)}"
        if retain is not None:
            sql += f" RETAIN {int(retain.amount)} {retain.unit}"
        self.spark.sql(sql)

    def rollback_main(self, snapshot_id: int) -> None:
        procedure_call(self.spark, self.table, "rollback_to_snapshot", {"snapshot_id": str(int(snapshot_id))})


def tag_snapshot(
    spark: SparkSession,
    spec: TagSpec,
    commit_id: str | None = None,
    reuse_commit: bool = False,
) -> dict[str, Any]:
    """``ALTER TABLE ... CREATE [OR REPLACE] TAG name AS OF VERSION id [RETAIN n DAYS]``, once per task."""
    require_table(spark, spec.table)
    return tag_with(SparkTableRefs(spark, spec.table), spec, commit_id if reuse_commit else None)


def tag_with(refs: TableRefs, spec: TagSpec, marker_id: str | None) -> dict[str, Any]:
    """Tag ``spec``'s snapshot through ``refs`` (the Spark job's or the worker's), once per task.

    With ``snapshot_id`` every try tags that snapshot, so a retry sets the same tag again.
    Without one the tag names ``main``'s current snapshot as the first try saw it: that try
    records it in a marker tag named from ``marker_id`` (the task's commit id, :mod:`.retry_markers`)
    and every retry tags the recorded snapshot, not whatever ``main`` points at by then. A tag
    already on the snapshot (with the asked retention) is left as it is (``already_tagged``).
    """
    table = spec.table
    history = refs.history()
    if history.branch(spec.tag) is not None:
        raise TableStateError(
            f"{spec.tag!r} is a branch of table {table}, not a tag: nothing changed; choose another tag name"
        )
    snapshot_id = spec.snapshot_id
    if snapshot_id is None:
        snapshot_id = _snapshot_to_tag(refs, history, marker_id)
    elif not history.has_snapshot(snapshot_id):
        raise SnapshotNotFoundError(
            f"snapshot_id {snapshot_id} is not a snapshot of table {table} (never made, or expired): "
            f"tag {spec.tag!r} was not set; nothing changed"
        )
    result = {"table": table, "tag": spec.tag, "snapshot_id": snapshot_id, "retain_days": spec.retain_days}
    current = history.refs.get(spec.tag)
    retain = Retention(spec.retain_days, "DAYS") if spec.retain_days is not None else None
    if (
        current is not None
        and current.snapshot_id == snapshot_id
        and (retain is None or retain.ms == current.max_ref_age_ms or not spec.replace)
    ):
        print(f"airflow-iceberg: tag {spec.tag} of {table} already names snapshot {snapshot_id}", flush=True)
        return {**result, "already_tagged": True}
    if current is not None and not spec.replace:
        raise TableStateError(
            f"tag {spec.tag!r} of table {table} already names snapshot {current.snapshot_id}, not "
            f"{snapshot_id}, and replace=False: nothing changed. Use another tag name, or replace=True"
        )
    refs.create_tag(spec.tag, snapshot_id, replace=spec.replace, retain=retain)
    return {**result, "already_tagged": False}


def _snapshot_to_tag(refs: TableRefs, history: TableHistory, marker_id: str | None) -> int:
    """``main``'s head, recorded for this task's retries; or what an earlier try recorded."""
    recorded = recorded_snapshot(history, marker_id)
    if recorded is not None:
        print(
            f"airflow-iceberg: tagging snapshot {recorded} of {history.table}, which an earlier try of this "
            "task resolved (main may have moved since)",
            flush=True,
        )
        return recorded
    head = history.branch("main")
    if head is None:
        raise SnapshotNotFoundError(f"table {history.table} has no snapshot to tag; nothing changed")
    return record_snapshot(refs, history, marker_id, head) if marker_id else head

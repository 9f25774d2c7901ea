"""Upkeep procedures, checked with pyiceberg: compaction keeps rows, expiry drops snapshots, rollback."""

from __future__ import annotations

import time

import pytest

from airflow_iceberg.jobs import iceberg_runtime, upkeep
from airflow_iceberg.jobs.branches import procedure_call, tag_snapshot
from airflow_iceberg.jobs.iceberg_job import run
from airflow_iceberg.jobs.merges import delete_from
from airflow_iceberg.jobs.publish import publish_branch
from airflow_iceberg.jobs.spec.branches import PublishSpec, RollbackSpec, TagSpec
from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.request import JobRequest
from airflow_iceberg.jobs.spec.row_changes import DeleteSpec, MergeSpec
from airflow_iceberg.jobs.spec.upkeep import (
    ExpireSnapshotsSpec,
    RewriteDataFilesSpec,
    RewriteManifestsSpec,
    RewritePositionDeletesSpec,
)
from airflow_iceberg.jobs.table_state import TableStateError
from airflow_iceberg.jobs.upkeep import (
    expire_snapshots,
    rewrite_data_files,
    rewrite_manifests,
    rewrite_position_deletes,
)
from airflow_iceberg.jobs.writes import write_table
from tests.jobs.helpers import unknown_outcome, values_query, write_spec

#: The commit id the operator gives every try of one rollback task instance.
COMMIT_ID = "repair:rollback:manual__2024-01-02:-1:1:2024-01-02T00:00:00+00:00"


def rollback(spark, spec, commit_id: str | None = None) -> dict:
    """One try of a rollback task, through the job's dispatch; with ``commit_id``, as a retryable task."""
    return run(spark, JobRequest(spec=spec, commit_id=commit_id, reuse_commit=commit_id is not None))


class Killed(BaseException):
    """What a try sees when its process is killed: it runs nothing more."""


def _small_files(spark, table: str, batches: int = 4, **properties: str) -> None:
    write_table(
        spark,
        write_spec(
            table,
            "create",
            values_query([(0, "d0")], "id, day"),
            table_properties={"format-version": "2", **properties},
        ),
    )
    for batch in range(1, batches + 1):
        write_table(spark, write_spec(table, "append", values_query([(batch, f"d{batch % 2}")], "id, day")))


def test_compaction_keeps_every_row_in_fewer_larger_files(spark, lake, table):
    _small_files(spark, table)
    rows, files = lake.rows(table), lake.data_files(table)

    result = rewrite_data_files(
        spark, RewriteDataFilesSpec(table, options={"min-input-files": "2"}).validated()
    )

    compacted = lake.data_files(table)
    assert lake.rows(table) == rows
    assert (len(files), len(compacted)) == (5, 1)
    assert compacted[0].file_size_in_bytes > max(f.file_size_in_bytes for f in files)
    assert (result["rewritten_data_files_count"], result["added_data_files_count"]) == (5, 1)
    assert result["rewritten_bytes_count"] == sum(f.file_size_in_bytes for f in files)
    assert result["snapshot_id"] == lake.current_snapshot_id(table) != result["previous_snapshot_id"]


def test_sort_compaction_of_one_partition_only(spark, lake, table):
    _small_files(spark, table)
    rows = lake.rows(table)
    result = rewrite_data_files(
        spark,
        RewriteDataFilesSpec(
            table,
            strategy="sort",
            sort_order="id DESC NULLS LAST",
            where="day = 'd1'",
            options={"min-input-files": "2"},
        ).validated(),
    )
    assert lake.rows(table) == rows
    assert (result["rewritten_data_files_count"], result["added_data_files_count"]) == (2, 1)  # ids 1 and 3
    assert len(lake.data_files(table)) == 4


def test_expiry_drops_old_snapshots_but_keeps_the_tagged_one_for_time_travel(spark, lake, table):
    _small_files(spark, table, batches=3)
    first, second, *_ = [s.snapshot_id for s in lake.snapshots(table)]
    tag_snapshot(spark, TagSpec(table, tag="month_end", snapshot_id=second).validated())
    current = lake.current_snapshot_id(table)

    result = expire_snapshots(
        spark,
        ExpireSnapshotsSpec(table, older_than=int(time.time() * 1000) + 1000, retain_last=1).validated(),
    )

    kept = {s.snapshot_id for s in lake.snapshots(table)}
    assert kept == {second, current} and first not in kept
    assert result["expired_snapshots_count"] == 2
    assert result["deleted_manifest_lists_count"] == 2
    assert lake.ids(table, second) == [0, 1]  # time travel to the kept snapshot still works
    assert lake.ids(table) == [0, 1, 2, 3]


def test_rewrite_manifests_and_position_deletes_keep_the_rows(spark, lake, table):
    write_table(
        spark,
        write_spec(
            table,
            "create",
            values_query([(i, "d") for i in range(6)], "id, day"),
            table_properties={
                "format-version": "2",
                "write.delete.mode": "merge-on-read",
                "write.distribution-mode": "none",
            },
        ),
    )
    for condition in ("id = 1", "id = 4"):  # a row of each data file: position deletes, not file drops
        delete_from(spark, DeleteSpec(table, condition=condition).validated())
    rows = lake.rows(table)
    assert [r["id"] for r in rows] == [0, 2, 3, 5]

    deletes = rewrite_position_deletes(
        spark, RewritePositionDeletesSpec(table, options={"rewrite-all": "true"}).validated()
    )
    manifests = rewrite_manifests(spark, RewriteManifestsSpec(table).validated())

    assert lake.rows(table) == rows
    assert deletes["rewritten_delete_files_count"] == 2
    assert manifests["rewritten_manifests_count"] > manifests["added_manifests_count"] >= 1


def test_rollback_to_a_snapshot_and_to_a_timestamp_makes_it_current(spark, lake, table):
    _small_files(spark, table, batches=2)
    first, second, third = [s.snapshot_id for s in lake.snapshots(table)]
    second_at = lake.snapshot(table, second).timestamp_ms

    by_time = rollback(spark, RollbackSpec(table, timestamp=second_at + 1).validated())
    assert lake.current_snapshot_id(table) == second == by_time["current_snapshot_id"]
    assert by_time["previous_snapshot_id"] == third
    by_id = rollback(spark, RollbackSpec(table, snapshot_id=first).validated())
    assert lake.current_snapshot_id(table) == first == by_id["snapshot_id"]
    assert lake.ids(table) == [0]
    again = rollback(spark, RollbackSpec(table, snapshot_id=first).validated())  # a retry
    assert again["snapshot_id"] == first


def _target(spec_field: str, lake, table, snapshot_id: int) -> RollbackSpec:
    if spec_field == "snapshot_id":
        return RollbackSpec(table, snapshot_id=snapshot_id).validated()
    just_after = lake.snapshot(table, snapshot_id).timestamp_ms + 1
    return RollbackSpec(table, timestamp=just_after).validated()


@pytest.mark.parametrize("spec_field", ["snapshot_id", "timestamp"])
def test_a_retried_rollback_never_undoes_a_commit_made_after_it(spark, lake, table, spec_field):
    _small_files(spark, table, batches=2)
    first, _, third = [s.snapshot_id for s in lake.snapshots(table)]
    spec = _target(spec_field, lake, table, first)
    done = rollback(spark, spec, COMMIT_ID)
    assert lake.current_snapshot_id(table) == first
    time.sleep(0.01)  # the other writer's commit is later than the timestamp by more than its millisecond
    later = write_table(spark, write_spec(table, "append", values_query([(9, "d9")], "id, day")))
    state = lake.state(table)

    retried = rollback(spark, spec, COMMIT_ID)  # the first try's success was lost: Airflow retries it
    assert lake.state(table) == state and lake.ids(table) == [0, 9]  # the later commit stays
    assert (done["previous_snapshot_id"], done["current_snapshot_id"], done["already_rolled_back"]) == (
        third,
        first,
        False,
    )
    assert (retried["previous_snapshot_id"], retried["current_snapshot_id"]) == (third, first)
    assert (retried["snapshot_id"], retried["already_rolled_back"]) == (later["snapshot_id"], True)


def test_a_rollback_killed_after_recording_where_main_was_is_finished_by_its_retry(
    spark, lake, table, monkeypatch
):
    from airflow_iceberg.jobs import rollback as rollback_module

    _small_files(spark, table, batches=2)
    first, _, third = [s.snapshot_id for s in lake.snapshots(table)]
    record = rollback_module.record_snapshot

    def record_then_die(*args):
        record(*args)
        raise Killed

    monkeypatch.setattr(rollback_module, "record_snapshot", record_then_die)
    spec = RollbackSpec(table, snapshot_id=first).validated()
    with pytest.raises(Killed):
        rollback(spark, spec, COMMIT_ID)
    refs = lake.load(table).metadata.refs
    assert refs["main"].snapshot_id == third  # not rolled back yet; the marker says from where
    assert [r.snapshot_id for name, r in refs.items() if name.startswith("airflow_iceberg_pin_")] == [third]
    monkeypatch.undo()

    retried = rollback(spark, spec, COMMIT_ID)
    assert (retried["already_rolled_back"], retried["snapshot_id"]) == (False, first)
    assert lake.current_snapshot_id(table) == first and lake.ids(table) == [0]


def test_a_rollback_to_a_snapshot_outside_mains_history_is_refused_clearly(spark, lake, table):
    _small_files(spark, table, batches=1)
    branched = write_table(
        spark, write_spec(table, "append", values_query([(7, "d7")], "id, day"), branch="audit")
    )["snapshot_id"]
    first_at = lake.snapshots(table)[0].timestamp_ms
    state = lake.state(table)
    with pytest.raises(
        TableStateError,
        match=rf"cannot roll back table {table} to snapshot {branched}: it is not in main's history "
        r"\(it is on branch audit\); main is at \d+, .* Nothing changed. Roll back to an ancestor",
    ):
        rollback(spark, RollbackSpec(table, snapshot_id=branched).validated(), COMMIT_ID)
    with pytest.raises(TableStateError, match=rf"back table {table} to snapshot 12345: it is not a snapshot"):
        rollback(spark, RollbackSpec(table, snapshot_id=12345).validated())
    with pytest.raises(
        TableStateError, match=r"no snapshot of main's history was committed before it .* Nothing changed"
    ):
        rollback(spark, RollbackSpec(table, timestamp=first_at).validated())
    assert lake.state(table) == state


def test_a_where_that_is_not_one_expression_is_refused(spark, lake, table):
    _small_files(spark, table, batches=1)
    state = lake.state(table)
    with pytest.raises(InvalidSpecError, match="not one SQL expression"):
        rewrite_data_files(spark, RewriteDataFilesSpec(table, where="id = 1 OR").validated())
    assert lake.state(table) == state


def _snapshot_ids(lake, table) -> set[int]:
    return {s.snapshot_id for s in lake.snapshots(table)}


def test_expiry_counts_the_snapshots_that_went_even_when_a_commit_lands_meanwhile(
    spark, lake, table, monkeypatch
):
    _small_files(spark, table, batches=3)
    before = _snapshot_ids(lake, table)
    real_call = upkeep.procedure_call

    def expire_then_another_writer_commits(spark_, table_, procedure, arguments):
        rows = real_call(spark_, table_, procedure, arguments)
        write_table(spark, write_spec(table, "append", values_query([(9, "d1")], "id, day")))
        return rows

    monkeypatch.setattr(upkeep, "procedure_call", expire_then_another_writer_commits)
    result = expire_snapshots(
        spark,
        ExpireSnapshotsSpec(table, older_than=int(time.time() * 1000) + 1000, retain_last=1).validated(),
    )

    after = _snapshot_ids(lake, table)
    assert len(before - after) == 3 and len(after - before) == 1  # three went, another writer's arrived
    assert result["expired_snapshots_count"] == 3


def _pending_audit(spark, lake, table) -> tuple[int, int]:
    """Small files on main; a stale and a foreign branch; ``audit_20240102`` pending publish."""
    _small_files(spark, table, batches=3, **{"write.delete.mode": "merge-on-read"})
    first = lake.snapshots(table)[0].snapshot_id
    spark.sql(f"ALTER TABLE {table} CREATE BRANCH audit_old AS OF VERSION {first}")  # main moved past it
    write_table(spark, write_spec(table, "append", values_query([(7, "d1")], "id, day"), branch="dev"))
    delete_from(spark, DeleteSpec(table, condition="id = 1", branch="audit_20240102").validated())
    refs = lake.load(table).metadata.refs
    return refs["main"].snapshot_id, refs["audit_20240102"].snapshot_id


WAITING_SPECS = [
    (rewrite_data_files, RewriteDataFilesSpec, {"options": {"min-input-files": "2"}}),
    (rewrite_position_deletes, RewritePositionDeletesSpec, {"options": {"rewrite-all": "true"}}),
    (rewrite_manifests, RewriteManifestsSpec, {}),
]
#: The procedure each of them would have run.
PROCEDURES = ["rewrite_data_files", "rewrite_position_delete_files", "rewrite_manifests"]


def test_compaction_waits_while_a_matching_branch_is_pending_publish_and_runs_once_it_is_published(
    spark, lake, table
):
    main, pending = _pending_audit(spark, lake, table)
    state, rows = lake.state(table), lake.rows(table)
    for (rewrite, spec_class, fields), procedure in zip(WAITING_SPECS, PROCEDURES, strict=True):
        spec = spec_class(table, wait_for_branches=("audit_*", "staging"), **fields).validated()
        waited = rewrite(spark, spec)
        assert (waited["skipped"], waited["procedure"]) == (True, procedure)
        assert waited["waiting_for_branches"] == [{"branch": "audit_20240102", "snapshot_id": pending}]
        assert (waited["previous_snapshot_id"], waited["snapshot_id"]) == (main, main)
    assert lake.state(table) == state  # nothing ran: no snapshot, no metadata change

    published = publish_branch(spark, PublishSpec(table, branch="audit_20240102").validated())
    assert published["snapshot_id"] == pending  # the fast-forward still works: main did not move
    spec = RewriteDataFilesSpec(
        table, wait_for_branches=("audit_*",), options={"min-input-files": "2"}
    ).validated()
    # Published but not dropped, the branch is at main's head: a branch write in flight looks so.
    left = rewrite_data_files(spark, spec)
    assert left["skipped"]
    assert left["waiting_for_branches"] == [{"branch": "audit_20240102", "snapshot_id": pending}]
    spark.sql(f"ALTER TABLE {table} DROP BRANCH audit_20240102")
    compacted = rewrite_data_files(spark, spec)  # the branch is gone: nothing is pending any more
    assert "skipped" not in compacted and compacted["rewritten_data_files_count"] >= 2
    assert lake.load(table).metadata.refs["main"].snapshot_id == compacted["snapshot_id"] != pending
    assert lake.rows(table) == [row for row in rows if row["id"] != 1]
    assert len(lake.data_files(table)) == 1


#: The commit id of the rollback task in the write-audit-publish scenarios below.
ROLLBACK_TASK = "wap:rollback_bad_load:manual__2024-01-02:-1:1:2024-01-02T00:00:00+00:00"


def test_a_retried_rollback_never_undoes_a_commit_that_brought_its_snapshot_back(
    spark, lake, table, publish_path
):
    """main good->R; a branch made from R; rollback to good; the branch gets C; C reaches main.

    Ancestry cannot tell the retry "my earlier try rolled back" from "it did not yet": R is in
    main's history again either way. main's snapshot log can: good was made current after R.
    The publish that would bring R back is refused (R was rolled back out of main); another
    tool's fast-forward still can, and the retry must not undo it.
    """
    from tests.jobs.test_branches import run_ref_action

    write_table(spark, write_spec(table, "create", values_query([(1, "a"), (2, "b")], "id, name")))
    good = lake.current_snapshot_id(table)
    bad = write_table(spark, write_spec(table, "append", values_query([(66, "bad")], "id, name")))
    write_table(spark, write_spec(table, "append", values_query([(3, "c")], "id, name"), branch="audit"))
    spec = RollbackSpec(table, snapshot_id=good)
    first = run_ref_action(spark, spec, commit_id=ROLLBACK_TASK)  # its success is lost
    assert lake.current_snapshot_id(table) == good and first["previous_snapshot_id"] == bad["snapshot_id"]
    after = write_table(
        spark, write_spec(table, "append", values_query([(4, "d")], "id, name"), branch="audit")
    )["snapshot_id"]
    state = lake.state(table)
    publish = PublishSpec(table, branch="audit", expected_snapshot_id=after, drop_branch=True)
    with pytest.raises(
        TableStateError,
        match=rf"its history holds snapshot {bad['snapshot_id']}, which was in main's history once and was "
        rf"taken out of it .* Nothing was published; main is unchanged \(at {good}\)",
    ):
        run_ref_action(spark, publish, commit_id="wap:publish")
    assert lake.state(table) == state and 66 not in lake.ids(table)  # the bad load stays rolled back
    procedure_call(spark, table, "fast_forward", {"branch": "'main'", "to": "'audit'"})  # another tool
    assert lake.current_snapshot_id(table) == after
    state = lake.state(table)

    retried = run_ref_action(spark, spec, commit_id=ROLLBACK_TASK)  # Airflow retries the rollback

    assert 4 in lake.ids(table), "the retry rolled main back again, dropping the published commit"
    assert lake.state(table) == state and retried["already_rolled_back"] is True
    assert (retried["previous_snapshot_id"], retried["snapshot_id"]) == (bad["snapshot_id"], after)


def test_a_rollback_retry_after_the_table_was_replaced_is_refused_and_changes_nothing(
    spark, lake, table, publish_path, monkeypatch
):
    """The first try recorded main and was killed; the table was replaced; nothing was rolled back."""
    from airflow_iceberg.jobs import branches
    from tests.jobs.test_branches import run_ref_action

    write_table(spark, write_spec(table, "create", values_query([(1, "a"), (2, "b")], "id, name")))
    good = lake.current_snapshot_id(table)
    bad = write_table(spark, write_spec(table, "append", values_query([(66, "bad")], "id, name")))
    spec = RollbackSpec(table, snapshot_id=good)

    def killed_before_rolling_back(*args, **kwargs):
        raise Killed

    monkeypatch.setattr(branches, "procedure_call", killed_before_rolling_back)
    with pytest.raises(Killed):
        run_ref_action(spark, spec, commit_id=ROLLBACK_TASK)  # the marker is made, then the kill
    monkeypatch.setattr(branches, "procedure_call", procedure_call)
    replaced = write_table(
        spark, write_spec(table, "create_or_replace", values_query([(9, "new")], "id, name"))
    )["snapshot_id"]
    state = lake.state(table)
    with pytest.raises(
        TableStateError,
        match=rf"this task's first try recorded main at snapshot {bad['snapshot_id']}, which is no longer "
        rf"in main's history \(main is at {replaced}\), and main's snapshot log shows no rollback to it "
        r"since: the table was replaced, .* Nothing changed",
    ):
        run_ref_action(spark, spec, commit_id=ROLLBACK_TASK)
    assert lake.state(table) == state and lake.ids(table) == [9]


def test_a_rollback_whose_outcome_is_unknown_says_so_and_its_retry_finishes_it(
    spark, lake, table, monkeypatch
):
    """The catalog did not answer the rollback's commit (it landed): never "nothing was changed"."""
    from airflow_iceberg.jobs import branches

    _small_files(spark, table, batches=1)
    first, second = [s.snapshot_id for s in lake.snapshots(table)]
    spec = RollbackSpec(table, snapshot_id=first).validated()

    def commits_then_the_answer_is_lost(spark_, *args):
        procedure_call(spark_, *args)
        raise unknown_outcome()

    monkeypatch.setattr(branches, "procedure_call", commits_then_the_answer_is_lost)
    with pytest.raises(
        TableStateError, match=r"the outcome is unknown .* Retrying the task is safe"
    ) as raised:
        rollback(spark, spec, COMMIT_ID)
    assert "Nothing was changed" not in str(raised.value)
    monkeypatch.undo()
    state = lake.state(table)
    retried = rollback(spark, spec, COMMIT_ID)
    assert (retried["already_rolled_back"], retried["previous_snapshot_id"]) == (True, second)
    assert lake.state(table) == state and lake.current_snapshot_id(table) == first


def test_compaction_waiting_for_branches_waits_for_a_branch_write_in_flight(spark, lake, table, monkeypatch):
    """The branch write makes its branch at main's head, then runs its MERGE (minutes, on real data).

    A compaction starting meanwhile sees a matching branch at main's head: it waits, and the
    day's publish then fast-forwards main. After the publish (drop_branch) it compacts.
    """
    from airflow_iceberg.jobs import merges
    from airflow_iceberg.jobs.spec.sources import Source
    from tests.jobs.test_branches import run_ref_action

    write_table(spark, write_spec(table, "create", values_query([(1, "a"), (2, "b")], "id, name")))
    write_table(spark, write_spec(table, "append", values_query([(3, "c")], "id, name")))
    main = lake.current_snapshot_id(table)
    compaction = RewriteDataFilesSpec(
        table, wait_for_branches=("audit_*",), options={"min-input-files": "2"}
    ).validated()
    commit_sql = merges._commit_sql
    compacted: list[dict] = []

    def the_daily_compaction_runs_while_the_merge_runs(*args):
        compacted.append(rewrite_data_files(spark, compaction))
        commit_sql(*args)

    monkeypatch.setattr(merges, "_commit_sql", the_daily_compaction_runs_while_the_merge_runs)
    source = Source(query=values_query([(1, "A"), (4, "d")], "id, name"))
    merged = merges.merge_into(
        spark, MergeSpec(table, source=source, keys=("id",), branch="audit_20240102").validated()
    )
    monkeypatch.undo()
    assert compacted[0]["skipped"] is True and compacted[0]["snapshot_id"] == main
    assert compacted[0]["waiting_for_branches"] == [{"branch": "audit_20240102", "snapshot_id": main}]
    assert "blocks compaction until it is published with drop_branch, or dropped" in compacted[0]["reason"]
    publish = PublishSpec(
        table, branch="audit_20240102", expected_snapshot_id=merged["snapshot_id"], drop_branch=True
    )
    run_ref_action(spark, publish)
    assert lake.current_snapshot_id(table) == merged["snapshot_id"]
    done = rewrite_data_files(spark, compaction)
    assert "skipped" not in done and done["rewritten_data_files_count"] >= 2
    assert [(r["id"], r["name"]) for r in lake.rows(table)] == [(1, "A"), (2, "b"), (3, "c"), (4, "d")]


AUDIT = "audit_20240102"


def _audit_branch_of_small_files(spark, lake, table) -> tuple[int, int]:
    """Small files on main; ``audit_20240102`` made from it and given three small appends of its own."""
    _small_files(spark, table, batches=3)
    for batch in range(10, 13):
        rows = values_query([(batch, f"d{batch % 2}")], "id, day")
        write_table(spark, write_spec(table, "append", rows, branch=AUDIT))
    return lake.branch_head(table, "main"), lake.branch_head(table, AUDIT)


def test_compacting_an_audit_branch_leaves_main_alone_and_its_publish_brings_the_compacted_files(
    spark, lake, table
):
    main, head = _audit_branch_of_small_files(spark, lake, table)
    main_state, main_rows, main_files = lake.state(table), lake.rows(table), lake.data_files(table)
    branch_rows, branch_files = lake.rows(table, head), lake.files_at(table, head)
    options = {"min-input-files": "2"}
    spec = RewriteDataFilesSpec(table, branch=AUDIT, options=options).validated()

    compacted = rewrite_data_files(spark, spec)

    new_head = lake.branch_head(table, AUDIT)
    assert (compacted["branch"], compacted["previous_snapshot_id"], compacted["snapshot_id"]) == (
        AUDIT,
        head,
        new_head,
    )
    assert new_head != head and lake.snapshot(table, new_head).parent_snapshot_id == head
    assert lake.summary(table, new_head)["operation"] == "replace"
    assert compacted["rewritten_data_files_count"] == len(branch_files)
    assert len(lake.files_at(table, new_head)) < len(branch_files)
    assert lake.rows(table, new_head) == branch_rows
    # main is untouched: same head (the metadata version moved with the branch), files and rows
    assert (lake.state(table)[1], lake.branch_head(table, "main")) == (main_state[1], main)
    assert lake.data_files(table) == main_files and lake.rows(table) == main_rows

    # A retry of a try that committed finds nothing left to compact: the branch stays where it is.
    retried = rewrite_data_files(spark, spec)
    assert retried["rewritten_data_files_count"] == 0
    assert retried["previous_snapshot_id"] == retried["snapshot_id"] == new_head
    assert lake.branch_head(table, AUDIT) == new_head
    assert lake.rows(table, new_head) == branch_rows

    # The branch still descends from main: its publish fast-forwards main to the compacted files.
    published = publish_branch(
        spark, PublishSpec(table, branch=AUDIT, expected_snapshot_id=new_head).validated()
    )
    assert published["snapshot_id"] == lake.branch_head(table, "main") == new_head
    assert lake.rows(table) == branch_rows and len(lake.data_files(table)) < len(branch_files)


def test_a_branch_compaction_that_cannot_run_is_refused_and_changes_nothing(spark, lake, table, monkeypatch):
    _, head = _audit_branch_of_small_files(spark, lake, table)
    state = lake.state(table)
    with pytest.raises(TableStateError, match=r"has no branch 'audit_gone' to compact"):
        rewrite_data_files(spark, RewriteDataFilesSpec(table, branch="audit_gone").validated())
    # a tag of that name is no branch to compact: the error says which it is
    tag_snapshot(spark, TagSpec(table, tag="audit_tagged", snapshot_id=head).validated())
    state = lake.state(table)
    tagged = r"'audit_tagged' is a tag, not a branch: .*nothing was changed"
    with pytest.raises(TableStateError, match=tagged):
        rewrite_data_files(spark, RewriteDataFilesSpec(table, branch="audit_tagged").validated())
    with pytest.raises(InvalidSpecError, match=r"give branch or wait_for_branches"):
        RewriteDataFilesSpec(table, branch=AUDIT, wait_for_branches=("audit_*",)).validated()
    with pytest.raises(InvalidSpecError, match=r"branch 'main' is the table itself"):
        RewriteDataFilesSpec(table, branch="main").validated()
    with pytest.raises(InvalidSpecError, match=r"not a valid"):
        RewriteDataFilesSpec(table, branch="audit;DROP").validated()

    # The runtime answers for itself: this session's is the jar the suite loaded ...
    loaded = iceberg_runtime.runtime_version(spark, table)
    runtime_jars = [jar for jar in spark.conf.get("spark.jars").split(",") if "iceberg-spark-runtime" in jar]
    assert loaded is not None and [jar.endswith(f"-{loaded}.jar") for jar in runtime_jars] == [True]
    # (the session catalog's function is out of reach on Spark 3.5: the driver's JVM answers)
    assert iceberg_runtime.runtime_version(spark, "spark_catalog.db.any") == loaded
    # ... and one before 1.11 (a Spark Connect server's own, say) is refused before anything runs.
    monkeypatch.setattr(iceberg_runtime, "runtime_version", lambda spark, table: "1.10.2")
    refusal = r"of branch 'audit_20240102' needs Iceberg 1.11 or later, and .* runs Iceberg 1.10.2"
    with pytest.raises(InvalidSpecError, match=refusal):
        rewrite_data_files(spark, RewriteDataFilesSpec(table, branch=AUDIT).validated())
    assert lake.state(table) == state and lake.branch_head(table, AUDIT) == head

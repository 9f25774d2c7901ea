"""Write-audit-publish: writes, merges and deletes on a branch leave main alone until published.

Publishing and tagging are also checked as the operators run them, through the job's dispatch
(:func:`run_ref_action`, a :class:`JobRequest` with the task's commit id), including their
retries. Each publish test runs both ways the job can move refs: through the driver's Iceberg
transaction (spark-submit) and through SQL statements only (as over Spark Connect, see
``publish_path``); tests/integration/test_spark_connect.py runs the same cases on a real Connect
server.
"""

from __future__ import annotations

import time

import pytest

from airflow_iceberg.jobs.branches import procedure_call, reset_branch, tag_snapshot
from airflow_iceberg.jobs.iceberg_job import run
from airflow_iceberg.jobs.merges import MergeSourceError, delete_from, merge_into
from airflow_iceberg.jobs.publish import publish_branch
from airflow_iceberg.jobs.reads import read_table
from airflow_iceberg.jobs.spec.branches import PublishSpec, RollbackSpec, TagSpec
from airflow_iceberg.jobs.spec.request import JobRequest
from airflow_iceberg.jobs.spec.row_changes import DeleteSpec, MergeSpec
from airflow_iceberg.jobs.spec.sources import Source
from airflow_iceberg.jobs.table_state import TableStateError, ref_snapshot_id
from airflow_iceberg.jobs.writes import write_table
from tests.jobs.helpers import read_spec, values_query, write_spec

ROWS = values_query([(1, "a"), (2, "b")], "id, name")
OTHER_WRITER = values_query([(5, "e")], "id, name")
#: The commit id the operator gives every try of one task instance (see operators/base.py).
COMMIT_ID = "wap:publish:manual__2024-01-02:-1:1:2024-01-02T00:00:00+00:00"
MARKER_PREFIX = "airflow_iceberg_pin_"


def _refs(lake, table) -> dict[str, int]:
    return {name: ref.snapshot_id for name, ref in lake.load(table).metadata.refs.items()}


def run_ref_action(spark, spec, commit_id: str = COMMIT_ID) -> dict:
    """Run ``spec`` as one try of a task: through the job's dispatch, with the task's commit id."""
    return run(spark, JobRequest(spec=spec.validated(), commit_id=commit_id, reuse_commit=True))


class Killed(BaseException):
    """What a try sees when its process is killed: it runs nothing more."""


def _audited_branch(spark, table) -> int:
    """A table with two rows on main and a third on branch ``audit``: return the branch's snapshot."""
    write_table(spark, write_spec(table, "create", ROWS))
    staged = values_query([(3, "c")], "id, name")
    return write_table(spark, write_spec(table, "append", staged, branch="audit"))["snapshot_id"]


def test_branch_write_merge_and_delete_leave_main_untouched_until_published(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS, table_properties={"format-version": "2"}))
    main_before = lake.current_snapshot_id(table)

    appended = write_table(
        spark,
        write_spec(table, "append", values_query([(3, "c")], "id, name"), branch="audit_20240102"),
        commit_id="wap:append",
        reuse_commit=True,
    )
    merge_into(
        spark,
        MergeSpec(
            table,
            source=Source(query=values_query([(1, "A")], "id, name")),
            keys=("id",),
            branch="audit_20240102",
        ).validated(),
    )
    delete_from(
        spark, DeleteSpec(table, condition="id = 2", branch="audit_20240102").validated()
    )

    refs = _refs(lake, table)
    assert refs["main"] == main_before and lake.ids(table) == [1, 2]  # main: untouched
    assert appended["branch"] == "audit_20240102"
    assert [(r["id"], r["name"]) for r in lake.rows(table, refs["audit_20240102"])] == [(1, "A"), (3, "c")]
    audit = read_table(spark, read_spec(table, branch="audit_20240102", filter="id = 3"))
    assert audit["row_count"] == 1

    retried = write_table(
        spark,
        write_spec(table, "append", values_query([(3, "c")], "id, name"), branch="audit_20240102"),
        commit_id="wap:append",
        reuse_commit=True,
    )
    assert retried["reused_earlier_commit"] is True

    publish = PublishSpec(table, branch="audit_20240102", drop_branch=True)
    published = run_ref_action(spark, publish)
    assert (published["previous_snapshot_id"], published["snapshot_id"]) == (
        main_before,
        refs["audit_20240102"],
    )
    assert _refs(lake, table) == {"main": refs["audit_20240102"]}  # branch dropped
    assert [(r["id"], r["name"]) for r in lake.rows(table)] == [(1, "A"), (3, "c")]


def test_publish_fails_clearly_when_main_moved_and_changes_nothing(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS))
    write_table(spark, write_spec(table, "append", ROWS, branch="audit"))
    write_table(spark, write_spec(table, "append", ROWS))  # main moves on
    state = lake.state(table)
    with pytest.raises(TableStateError, match=r"main moved since the branch was made.*main is unchanged"):
        run_ref_action(spark, PublishSpec(table, branch="audit", drop_branch=True))
    assert lake.state(table) == state and "audit" in _refs(lake, table)


def test_publish_to_a_missing_target_is_refused_and_creates_it_only_when_asked(
    spark, lake, table, publish_path
):
    audited = _audited_branch(spark, table)
    state, refs = lake.state(table), _refs(lake, table)
    with pytest.raises(
        TableStateError,
        match=r"target branch 'mian' does not exist in table .*\(its branches: audit, main\): nothing was "
        r"published and nothing changed.*create_target_branch=True",
    ):
        run_ref_action(
            spark, PublishSpec(table, branch="audit", target_branch="mian", drop_branch=True)
        )
    assert lake.state(table) == state and _refs(lake, table) == refs  # no 'mian', the branch kept

    spec = PublishSpec(
        table, branch="audit", target_branch="release", expected_snapshot_id=audited,
        create_target_branch=True,
    )  # fmt: skip
    created = run_ref_action(spark, spec)
    assert (created["target_branch_created"], created["snapshot_id"], created["previous_snapshot_id"]) == (
        True,
        audited,
        None,
    )
    assert _refs(lake, table) == {**refs, "release": audited}  # main unchanged, no marker left


def test_a_commit_on_the_branch_after_the_audit_is_never_published(spark, lake, table, publish_path):
    audited = _audited_branch(spark, table)
    late = values_query([(4, "d")], "id, name")
    unaudited = write_table(spark, write_spec(table, "append", late, branch="audit"))["snapshot_id"]
    state = lake.state(table)
    spec = PublishSpec(table, branch="audit", expected_snapshot_id=audited, drop_branch=True)
    with pytest.raises(
        TableStateError,
        match=rf"it is at snapshot {unaudited}, not at the audited snapshot {audited} "
        r"\(expected_snapshot_id\): a commit landed on the branch after the audit. Nothing was published; "
        "main is unchanged",
    ):
        run_ref_action(spark, spec)
    assert lake.state(table) == state and _refs(lake, table)["audit"] == unaudited
    assert lake.ids(table) == [1, 2]


def test_a_publish_retried_after_main_moved_on_reports_it_published_and_keeps_the_newer_commit(
    spark, lake, table, publish_path
):
    audited = _audited_branch(spark, table)
    spec = PublishSpec(table, branch="audit")
    first = run_ref_action(spark, spec)
    assert lake.current_snapshot_id(table) == audited == first["snapshot_id"]
    other = write_table(spark, write_spec(table, "append", OTHER_WRITER))["snapshot_id"]
    state = lake.state(table)

    retried = run_ref_action(spark, spec)  # the earlier try's success was lost: Airflow retries it
    assert lake.state(table) == state and lake.current_snapshot_id(table) == other
    assert lake.ids(table) == [1, 2, 3, 5]
    assert first["already_published"] is False
    assert (retried["already_published"], retried["snapshot_id"], retried["previous_snapshot_id"]) == (
        True,
        audited,
        None,
    )


def test_a_pinned_publish_retried_after_its_branch_was_dropped_reports_it_published(
    spark, lake, table, publish_path
):
    audited = _audited_branch(spark, table)
    spec = PublishSpec(table, branch="audit", expected_snapshot_id=audited, drop_branch=True)
    first = run_ref_action(spark, spec)
    assert first["branch_dropped"] is True and _refs(lake, table) == {"main": audited}
    other = write_table(spark, write_spec(table, "append", OTHER_WRITER))["snapshot_id"]
    state = lake.state(table)

    retried = run_ref_action(spark, spec)
    assert (retried["already_published"], retried["snapshot_id"]) == (True, audited)
    assert retried["branch_dropped"] is False
    assert lake.state(table) == state and _refs(lake, table) == {"main": other}
    # Without the pin, a dropped branch and a mistyped one look the same: refused, saying why.
    with pytest.raises(
        TableStateError,
        match=r"branch 'audit' does not exist .* nothing changed. Either an earlier try published it and "
        r"dropped it .* cannot tell which: pass the audited snapshot as expected_snapshot_id",
    ):
        run_ref_action(spark, PublishSpec(table, branch="audit", drop_branch=True))
    assert lake.state(table) == state


@pytest.mark.parametrize("lands_on", ["main", "audit"])
def test_a_commit_landing_while_publishing_is_neither_dropped_nor_published(
    spark, lake, table, publish_path, monkeypatch, lands_on
):
    """Fault: another writer commits between the publish's checks and its move."""
    from airflow_iceberg.jobs import publish

    audited = _audited_branch(spark, table)
    main_before = lake.current_snapshot_id(table)
    landed: list[int] = []
    decide = publish.decide

    def decide_then_another_writer_commits(history, spec):
        decision = decide(history, spec)
        branch = None if lands_on == "main" else "audit"
        landed.append(write_table(spark, write_spec(table, "append", ROWS, branch=branch))["snapshot_id"])
        return decision

    monkeypatch.setattr(publish, "decide", decide_then_another_writer_commits)
    spec = PublishSpec(table, branch="audit", expected_snapshot_id=audited, drop_branch=True)
    try:
        run_ref_action(spark, spec)
    except TableStateError as error:  # the move failed: it said so, and changed nothing
        assert "Nothing was changed; retry the task" in str(error)
    refs = _refs(lake, table)
    assert not [name for name in refs if name.startswith(MARKER_PREFIX)]
    if lands_on == "main":  # the fast-forward would drop it: refused, main keeps the other commit
        assert refs == {"main": landed[0], "audit": audited}
    else:  # never published, and the branch that holds it is kept
        assert refs["audit"] == landed[0] and refs["main"] in (main_before, audited)


def test_a_failed_merge_into_a_new_branch_leaves_no_branch_behind(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS))
    main = lake.current_snapshot_id(table)
    duplicates = Source(query=values_query([(1, "x"), (1, "y")], "id, name"))
    with pytest.raises(MergeSourceError):
        merge_into(
            spark, MergeSpec(table, source=duplicates, keys=("id",), branch="audit").validated()
        )
    assert _refs(lake, table) == {"main": main}


def test_tag_with_retention_and_replace(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS))
    first = lake.current_snapshot_id(table)
    tag_snapshot(spark, TagSpec(table, tag="eod_20240102", retain_days=7).validated())
    write_table(spark, write_spec(table, "append", ROWS))
    result = tag_snapshot(spark, TagSpec(table, tag="eod_20240102").validated())

    ref = lake.load(table).metadata.refs["eod_20240102"]
    assert result["snapshot_id"] == ref.snapshot_id == lake.current_snapshot_id(table) != first
    assert ref_snapshot_id(spark, table, "eod_20240102", "TAG") == ref.snapshot_id
    retained = tag_snapshot(
        spark, TagSpec(table, tag="keep", snapshot_id=first, retain_days=7).validated()
    )
    assert retained["snapshot_id"] == first
    assert lake.load(table).metadata.refs["keep"].max_ref_age_ms == 7 * 24 * 3600 * 1000


def _markers(lake, table) -> dict[str, int]:
    return {name: snapshot for name, snapshot in _refs(lake, table).items() if name.startswith(MARKER_PREFIX)}


def test_a_retried_tag_never_moves_the_tag_to_a_later_snapshot(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS))
    first = lake.current_snapshot_id(table)
    spec = TagSpec(table, tag="eod_20240102", retain_days=7)
    assert run_ref_action(spark, spec)["snapshot_id"] == first
    write_table(spark, write_spec(table, "append", ROWS))  # another writer: main moves on
    state = lake.state(table)

    retried = run_ref_action(spark, spec)
    assert _refs(lake, table)["eod_20240102"] == first and lake.state(table) == state
    assert (retried["snapshot_id"], retried["already_tagged"]) == (first, True)
    assert list(_markers(lake, table).values()) == [first]  # what the retry read
    # The marker stays a week from now for later retries: Iceberg ages a tag from its snapshot's time.
    marker = lake.load(table).metadata.refs[next(iter(_markers(lake, table)))]
    expires_at = lake.snapshot(table, first).timestamp_ms + marker.max_ref_age_ms
    assert abs(expires_at - (time.time() * 1000 + 7 * 24 * 3600 * 1000)) < 5 * 60 * 1000


def test_a_marker_on_an_old_snapshot_still_lives_a_week_from_when_it_was_made():
    """Iceberg ages a tag from its snapshot's commit time: the marker's RETAIN adds that age."""
    from airflow_iceberg.jobs import retry_markers
    from airflow_iceberg.jobs.branches import SparkTableRefs
    from airflow_iceberg.jobs.snapshot_history import TableHistory

    class RecordingSession:
        statements: list[str] = []

        def sql(self, text):
            self.statements.append(text)

    month_ago = int(time.time() * 1000) - 30 * 24 * 3600 * 1000
    history = TableHistory("lake.db.t", parents={7: None}, timestamps={7: month_ago})
    session = RecordingSession()
    assert retry_markers.record_snapshot(SparkTableRefs(session, "lake.db.t"), history, COMMIT_ID, 7) == 7
    (statement,) = session.statements
    name = retry_markers.marker_name(COMMIT_ID)
    minutes = int(statement.rsplit("RETAIN ", 1)[1].split()[0])
    assert statement.startswith(f"ALTER TABLE `lake`.`db`.`t` CREATE TAG {name} AS OF VERSION 7 RETAIN ")
    assert (30 + 7) * 24 * 60 <= minutes <= (30 + 7) * 24 * 60 + 2


def test_a_tag_try_killed_after_recording_its_snapshot_is_finished_by_its_retry(
    spark, lake, table, monkeypatch
):
    from airflow_iceberg.jobs import branches

    write_table(spark, write_spec(table, "create", ROWS))
    first = lake.current_snapshot_id(table)
    record = branches.record_snapshot

    def record_then_die(*args):
        record(*args)
        raise Killed

    monkeypatch.setattr(branches, "record_snapshot", record_then_die)
    spec = TagSpec(table, tag="eod_20240102")
    with pytest.raises(Killed):
        run_ref_action(spark, spec)
    assert "eod_20240102" not in _refs(lake, table) and list(_markers(lake, table).values()) == [first]
    monkeypatch.undo()
    write_table(spark, write_spec(table, "append", ROWS))  # main moves before the retry runs

    retried = run_ref_action(spark, spec)
    assert (retried["snapshot_id"], retried["already_tagged"]) == (first, False)
    assert _refs(lake, table)["eod_20240102"] == first


def test_a_tag_of_a_given_snapshot_is_idempotent_by_itself_and_never_replaced_unasked(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS))
    first = lake.current_snapshot_id(table)
    second = write_table(spark, write_spec(table, "append", ROWS))["snapshot_id"]
    spec = TagSpec(table, tag="keep", snapshot_id=first, replace=False)
    run_ref_action(spark, spec)
    state = lake.state(table)
    retried = run_ref_action(spark, spec)
    assert (retried["snapshot_id"], retried["already_tagged"]) == (first, True)
    assert lake.state(table) == state and _markers(lake, table) == {}  # a given snapshot needs no marker
    with pytest.raises(
        TableStateError,
        match=rf"tag 'keep' of table .* already names snapshot {first}, not {second}, and replace=False: "
        "nothing changed",
    ):
        other_task = TagSpec(table, tag="keep", snapshot_id=second, replace=False)
        run_ref_action(spark, other_task, commit_id="another:task")
    assert lake.state(table) == state


def _branch_change(kind: str, branch: str = "audit", **fields):
    """A write, merge or delete on ``branch``, as (function, spec)."""
    if kind == "append":
        return write_table, write_spec(
            table=fields.pop("table"), mode="append", query=ROWS, branch=branch, **fields
        )
    if kind == "merge":
        source = Source(query=fields.pop("source", values_query([(1, "A"), (9, "i")], "id, name")))
        return merge_into, MergeSpec(
            fields.pop("table"), source=source, keys=("id",), branch=branch, **fields
        ).validated()
    return delete_from, DeleteSpec(
        fields.pop("table"), condition="id = 2", branch=branch, **fields
    ).validated()


@pytest.mark.parametrize("kind", ["append", "merge", "delete"])
def test_a_branch_write_retried_after_its_branch_was_published_and_dropped_reuses_its_commit(
    spark, lake, table, kind
):
    """The try committed, the audit passed, publish moved main and dropped the branch; then the retry."""
    write_table(spark, write_spec(table, "create", ROWS, table_properties={"format-version": "2"}))
    change, spec = _branch_change(kind, table=table)
    first = change(spark, spec, commit_id=f"wap:{kind}", reuse_commit=True)
    publish_branch(spark, PublishSpec(table, branch="audit", drop_branch=True).validated())
    state, rows = lake.state(table), lake.rows(table)

    retried = change(spark, spec, commit_id=f"wap:{kind}", reuse_commit=True)

    assert lake.state(table) == state and lake.rows(table) == rows  # no second write, no branch made again
    assert _refs(lake, table) == {"main": first["snapshot_id"]}
    assert retried["reused_earlier_commit"] is True and retried["snapshot_id"] == first["snapshot_id"]
    assert retried["found_on_branch"] == "main"


def test_a_branch_write_finds_its_commit_on_another_branch_after_main(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS))
    first = write_table(
        spark, write_spec(table, "append", ROWS, branch="audit"), commit_id="wap:x", reuse_commit=True
    )
    spark.sql(f"ALTER TABLE {table} CREATE BRANCH kept AS OF VERSION {first['snapshot_id']}")
    spark.sql(f"ALTER TABLE {table} DROP BRANCH audit")
    state = lake.state(table)

    retried = write_table(
        spark, write_spec(table, "append", ROWS, branch="audit"), commit_id="wap:x", reuse_commit=True
    )

    assert (retried["snapshot_id"], retried["found_on_branch"]) == (first["snapshot_id"], "kept")
    assert lake.state(table) == state
    # A write to main looks at main alone: the commit of a branch never published is not main's.
    on_main = write_table(spark, write_spec(table, "append", ROWS), commit_id="wap:x", reuse_commit=True)
    assert "reused_earlier_commit" not in on_main and lake.ids(table) == [1, 1, 2, 2]


STALE = values_query([(1, "bad")], "id, name")
GOOD = values_query([(1, "good"), (4, "d")], "id, name")


def _failed_audit(spark, lake, table, branch: str = "audit_20240103") -> int:
    """Main with rows 1, 2, 3; the branch holding the failed audit's merge on top of an older main."""
    write_table(spark, write_spec(table, "create", ROWS, table_properties={"format-version": "2"}))
    merge_into(
        spark,
        MergeSpec(table, source=Source(query=STALE), keys=("id",), branch=branch).validated(),
        commit_id="wap:merge_changes:run:1",
    )
    write_table(spark, write_spec(table, "append", values_query([(3, "c")], "id, name")))  # main moves on
    return lake.current_snapshot_id(table)


def _names(lake, table, snapshot_id=None) -> list[tuple[int, str]]:
    return [(row["id"], row["name"]) for row in lake.rows(table, snapshot_id)]


@pytest.mark.parametrize("kind", ["merge", "append"])
def test_reset_branch_starts_a_stale_branch_afresh_from_main_and_a_retry_reuses_its_commit(
    spark, lake, table, kind
):
    main = _failed_audit(spark, lake, table)
    change, spec = _branch_change(
        kind,
        branch="audit_20240103",
        table=table,
        reset_branch=True,
        **({"source": GOOD} if kind == "merge" else {}),
    )
    repaired = change(spark, spec, commit_id="wap:merge_changes:run:2", reuse_commit=True)

    head = _refs(lake, table)["audit_20240103"]
    assert head == repaired["snapshot_id"] and lake.snapshot(table, head).parent_snapshot_id == main
    assert _names(lake, table, head) == (
        [(1, "good"), (2, "b"), (3, "c"), (4, "d")]
        if kind == "merge"
        else [(1, "a"), (1, "a"), (2, "b"), (2, "b"), (3, "c")]
    )
    assert _names(lake, table) == [(1, "a"), (2, "b"), (3, "c")]  # main: untouched
    state = lake.state(table)
    retried = change(spark, spec, commit_id="wap:merge_changes:run:2", reuse_commit=True)
    assert retried["reused_earlier_commit"] is True and retried["snapshot_id"] == head
    assert lake.state(table) == state  # found before any reset: the branch is not reset again
    publish_branch(
        spark, PublishSpec(table, branch="audit_20240103", drop_branch=True).validated()
    )
    again = change(spark, spec, commit_id="wap:merge_changes:run:2", reuse_commit=True)  # after the publish
    assert (again["snapshot_id"], again["found_on_branch"]) == (head, "main")
    assert _refs(lake, table) == {"main": head}


def test_a_try_killed_between_the_reset_and_its_write_is_completed_once_by_its_retry(spark, lake, table):
    reset_at = _failed_audit(spark, lake, table)
    reset_branch(spark, table, "audit_20240103")  # all the killed try did
    assert _refs(lake, table)["audit_20240103"] == reset_at
    write_table(spark, write_spec(table, "append", values_query([(5, "e")], "id, name")))  # main moves on
    main = lake.current_snapshot_id(table)
    _, spec = _branch_change("merge", branch="audit_20240103", table=table, reset_branch=True, source=GOOD)

    retried = merge_into(spark, spec, commit_id="wap:merge_changes:run:2", reuse_commit=True)

    assert lake.snapshot(table, retried["snapshot_id"]).parent_snapshot_id == main  # reset again, once
    assert _names(lake, table, retried["snapshot_id"]) == [
        (1, "good"),
        (2, "b"),
        (3, "c"),
        (4, "d"),
        (5, "e"),
    ]


def test_a_reset_write_that_fails_leaves_the_stale_branch_as_it_was(spark, lake, table):
    _failed_audit(spark, lake, table)
    state, refs = lake.state(table), _refs(lake, table)
    duplicates = values_query([(5, "x"), (5, "y")], "id, name")
    _, spec = _branch_change(
        "merge", branch="audit_20240103", table=table, reset_branch=True, source=duplicates
    )
    with pytest.raises(MergeSourceError):
        merge_into(spark, spec, commit_id="wap:merge_changes:run:2")
    assert _refs(lake, table) == refs  # the branch is back where it was, for inspection
    assert lake.current_snapshot_id(table) == state[1]


def test_a_reset_write_with_isolation_validates_from_mains_snapshot_not_the_stale_branchs(spark, lake, table):
    """The stale head is no ancestor of the reset branch: validating from it would always fail."""
    main = _failed_audit(spark, lake, table)
    spec = write_spec(
        table,
        "overwrite_partitions",
        values_query([(7, "g")], "id, name"),
        branch="audit_20240103",
        reset_branch=True,
        write_options={"isolation-level": "serializable"},
    )
    written = write_table(spark, spec, commit_id="wap:overwrite:run:2")
    assert lake.snapshot(table, written["snapshot_id"]).parent_snapshot_id == main
    assert _names(lake, table, written["snapshot_id"]) == [(7, "g")]  # unpartitioned: all rows replaced


def test_a_failed_branch_write_never_drops_a_branch_another_writer_created_meanwhile(
    spark, lake, table, monkeypatch
):
    """Another writer makes the branch (and commits) between ensure_branch's check and its CREATE BRANCH.

    The CREATE BRANCH then fails (Iceberg refuses an existing ref against its own base): the
    branch is the other writer's, and this job's failed merge leaves it, and its commit, alone.
    """
    from airflow_iceberg.jobs import branches

    write_table(spark, write_spec(table, "create", ROWS))
    original = branches._main_to_branch_from
    other: list[int] = []

    def another_writer_creates_the_branch_meanwhile(spark_, table_, branch):
        main = original(spark_, table_, branch)
        if not other:  # between ensure_branch's check and its CREATE BRANCH
            other.append(0)
            spark.sql(f"ALTER TABLE {table} CREATE BRANCH {branch}")
            staged = values_query([(7, "other writer")], "id, name")
            other[0] = write_table(spark, write_spec(table, "append", staged, branch=branch))["snapshot_id"]
        return main

    monkeypatch.setattr(branches, "_main_to_branch_from", another_writer_creates_the_branch_meanwhile)
    duplicates = Source(query=values_query([(5, "x"), (5, "y")], "id, name"))
    with pytest.raises(MergeSourceError):
        merge_into(
            spark, MergeSpec(table, source=duplicates, keys=("id",), branch="audit").validated()
        )
    assert _refs(lake, table).get("audit") == other[0], "the other writer's branch and commit were dropped"
    assert lake.ids(table, other[0]) == [1, 2, 7]


@pytest.mark.parametrize("mode", ["overwrite_partitions", "overwrite"])
def test_an_isolated_overwrite_of_a_new_branch_validates_from_mains_head(spark, lake, table, mode):
    """With isolation-level alone, the write fails only if a conflicting commit lands meanwhile.

    The branch does not exist before the write: its pin is main's head, where the branch starts
    (with no pin Iceberg validates against the whole history, and the table's own files conflict).
    """
    write_table(spark, write_spec(table, "create", ROWS, partition_by=["id"]))
    main = lake.current_snapshot_id(table)
    spec = write_spec(
        table,
        mode,
        values_query([(1, "fixed")], "id, name"),
        branch="audit",
        write_options={"isolation-level": "serializable"},
        **({"condition": "id = 1"} if mode == "overwrite" else {}),
    )
    written = write_table(spark, spec, commit_id="wap:overwrite:run:1")
    assert lake.snapshot(table, written["snapshot_id"]).parent_snapshot_id == main
    assert [(r["id"], r["name"]) for r in lake.rows(table, written["snapshot_id"])] == [
        (1, "fixed"),
        (2, "b"),
    ]
    assert lake.current_snapshot_id(table) == main  # main untouched


def test_an_isolated_overwrite_of_a_new_branch_still_fails_on_a_conflict_landing_meanwhile(
    spark, lake, table, monkeypatch
):
    """The pin is main's head as the job starts: a conflict on main before the branch is made fails it."""
    from airflow_iceberg.jobs import writes

    write_table(spark, write_spec(table, "create", ROWS, partition_by=["id"]))
    load_source = writes.load_source
    landed: list[int] = []

    def a_conflicting_commit_lands_while_the_source_is_read(spark_, *source):
        if not landed:  # once: the conflicting write reads its own source through here too
            landed.append(0)
            overwrite = write_spec(table, "overwrite_partitions", values_query([(1, "other")], "id, name"))
            landed[0] = write_table(spark, overwrite)["snapshot_id"]
        return load_source(spark_, *source)

    monkeypatch.setattr(writes, "load_source", a_conflicting_commit_lands_while_the_source_is_read)
    spec = write_spec(
        table,
        "overwrite_partitions",
        values_query([(1, "fixed")], "id, name"),
        branch="audit",
        write_options={"isolation-level": "serializable"},
    )
    with pytest.raises(Exception, match="Found conflicting files"):
        write_table(spark, spec)
    assert _refs(lake, table) == {"main": landed[0]}  # the branch this write made is dropped again


def test_a_pinned_publish_retried_after_its_snapshot_expired_never_says_it_was_not_published(
    spark, lake, table, publish_path
):
    """Published (and dropped), main moved on, expiry removed the pin: the retry must not deny the publish.

    While a snapshot of main's history names the pin as its parent, the retry knows it was
    published; once that is expired too, it says it may have been, and changes nothing.
    """
    audited = _audited_branch(spark, table)
    spec = PublishSpec(table, branch="audit", expected_snapshot_id=audited, drop_branch=True)
    run_ref_action(spark, spec)  # published and dropped; Airflow lost the success
    child = write_table(spark, write_spec(table, "append", OTHER_WRITER))["snapshot_id"]
    expire = (
        f"CALL lake.system.expire_snapshots(table => '{table.split('.', 1)[1]}', retain_last => 1, "
        "older_than => TIMESTAMP '2999-01-01 00:00:00')"
    )
    spark.sql(expire)
    assert audited not in {s.snapshot_id for s in lake.snapshots(table)}
    assert lake.snapshot(table, child).parent_snapshot_id == audited and 3 in lake.ids(table)
    state = lake.state(table)
    retried = run_ref_action(spark, spec)
    assert (retried["already_published"], retried["snapshot_id"], retried["branch_dropped"]) == (
        True,
        audited,
        False,
    )
    assert lake.state(table) == state

    write_table(spark, write_spec(table, "append", values_query([(6, "f")], "id, name")))
    spark.sql(expire)  # now nothing left names the audited snapshot
    state = lake.state(table)
    with pytest.raises(TableStateError) as refused:
        run_ref_action(spark, spec)
    message = str(refused.value)
    assert "nothing was published" not in message.lower()
    assert f"expected_snapshot_id {audited} is not a snapshot" in message
    assert "or it was published to main and has expired since" in message and "changed nothing" in message
    assert lake.state(table) == state


def test_a_pin_already_in_mains_history_with_newer_commits_on_the_branch_says_they_were_not_audited(
    spark, lake, table, publish_path, capsys
):
    """The pin is main's head (nothing staged yet, or published already); the branch has a newer commit."""
    write_table(spark, write_spec(table, "create", ROWS))
    main = lake.current_snapshot_id(table)
    newer = write_table(spark, write_spec(table, "append", OTHER_WRITER, branch="audit"))["snapshot_id"]
    state = lake.state(table)
    result = run_ref_action(
        spark, PublishSpec(table, branch="audit", expected_snapshot_id=main, drop_branch=True)
    )
    assert lake.state(table) == state and _refs(lake, table) == {"main": main, "audit": newer}
    assert (result["already_published"], result["snapshot_id"], result["previous_snapshot_id"]) == (
        True,
        main,
        None,
    )
    assert (result["branch_snapshot_id"], result["branch_holds_unpublished_commits"]) == (newer, True)
    assert result["branch_dropped"] is False
    logged = capsys.readouterr().out
    assert f"snapshot {main} of {table} is already in main's history" in logged
    assert f"Branch audit is at {newer}, with commits after snapshot {main}: they were not audited" in logged
    assert "holds nothing new" not in logged


def test_a_publish_whose_outcome_is_unknown_says_so_and_its_retry_finds_it_published(
    spark, lake, table, monkeypatch
):
    """The Connect stream broke while fast_forward committed: never "Nothing was changed"."""
    from airflow_iceberg.jobs import publish, snapshot_history

    monkeypatch.setattr(publish, "has_driver_jvm", lambda spark: False)
    monkeypatch.setattr(snapshot_history, "driver_table", lambda spark, table: None)
    audited = _audited_branch(spark, table)

    class RetriesExceeded(Exception):  # pyspark-client's error when the stream to the server is gone
        pass

    def fast_forward_then_the_stream_drops(*args):
        procedure_call(*args)
        raise RetriesExceeded(
            "<_MultiThreadedRendezvous of RPC that terminated with: StatusCode.UNAVAILABLE>"
        )

    monkeypatch.setattr(publish, "procedure_call", fast_forward_then_the_stream_drops)
    spec = PublishSpec(table, branch="audit", expected_snapshot_id=audited)
    with pytest.raises(
        TableStateError, match=r"the outcome is unknown .* Retrying the task is safe"
    ) as raised:
        run_ref_action(spark, spec)
    assert "Nothing was changed" not in str(raised.value)
    monkeypatch.setattr(publish, "procedure_call", procedure_call)
    retried = run_ref_action(spark, spec)
    assert retried["already_published"] is True and lake.current_snapshot_id(table) == audited


#: The Airflow identity the operator stamps on a commit (operators/base.py), for two tasks of one run.
def _identity(task_id: str, run_id: str = "scheduled__2024-01-02", map_index: str = "-1") -> dict[str, str]:
    return {
        "airflow.dag-id": "wap",
        "airflow.task-id": task_id,
        "airflow.run-id": run_id,
        "airflow.map-index": map_index,
        "airflow.try-number": "1",
    }


def test_reset_branch_refuses_to_drop_a_commit_another_task_of_the_run_made_on_the_branch(spark, lake, table):
    """reset_branch on a second task of one run would drop the first task's commit: refused.

    A cleared re-run of the run (the first task finds its own earlier commit on the branch)
    still resets, dropping the run's earlier work, its neighbours' included.
    """
    write_table(spark, write_spec(table, "create", ROWS))
    first = merge_into(
        spark,
        MergeSpec(
            table, source=Source(query=OTHER_WRITER), keys=("id",), branch="audit", reset_branch=True
        ).validated(),
        commit_id="wap:merge:run:1",
        commit_properties=_identity("merge"),
    )["snapshot_id"]
    state = lake.state(table)
    second = write_spec(
        table, "append", values_query([(6, "f")], "id, name"), branch="audit", reset_branch=True
    )
    with pytest.raises(
        TableStateError,
        match=rf"reset_branch would drop snapshot {first} that task 'merge' of this DAG run "
        r"\(scheduled__2024-01-02\) committed on branch 'audit' .* nothing changed. Set reset_branch only on "
        "the first task",
    ):
        write_table(spark, second, commit_id="wap:append:run:1", commit_properties=_identity("append"))
    assert lake.state(table) == state
    mapped = write_spec(
        table, "append", values_query([(8, "h")], "id, name"), branch="audit", reset_branch=True
    )
    with pytest.raises(TableStateError, match="task 'merge' of this DAG run"):  # another map index, too
        write_table(spark, mapped, commit_properties=_identity("merge", map_index="1"))
    assert lake.state(table) == state

    # The run is cleared and re-run: the first task finds its own commit there, and resets.
    append = write_table(
        spark,
        write_spec(table, "append", values_query([(6, "f")], "id, name"), branch="audit"),
        commit_properties=_identity("append"),
    )
    again = merge_into(
        spark,
        MergeSpec(
            table, source=Source(query=OTHER_WRITER), keys=("id",), branch="audit", reset_branch=True
        ).validated(),
        commit_id="wap:merge:run:2",
        commit_properties=_identity("merge"),
    )
    assert append["snapshot_id"] != again["snapshot_id"]
    assert lake.snapshot(table, again["snapshot_id"]).parent_snapshot_id == state[1]
    assert lake.ids(table, again["snapshot_id"]) == [1, 2, 5]
    # Another run's commits on the branch are a failed audit's: a reset drops them, as before.
    other_run = write_spec(
        table, "append", values_query([(9, "i")], "id, name"), branch="audit", reset_branch=True
    )
    reset = write_table(
        spark, other_run, commit_properties=_identity("append", run_id="scheduled__2024-01-03")
    )
    assert lake.ids(table, reset["snapshot_id"]) == [1, 2, 9]


HOSTILE_TABLE = "lake.`we'ird ns`.`t``ick -- /* x */ été`"


def test_a_hostile_table_name_survives_every_ref_action(spark, lake, publish_path):
    """Regression: backticks, quotes, comments, unicode in the name reach CREATE TAG, fast_forward, CALL."""
    import uuid

    table = HOSTILE_TABLE.replace("été`", f"été {uuid.uuid4().hex[:6]}`")
    write_table(spark, write_spec(table, "create", ROWS))
    good = lake.current_snapshot_id(table)
    audited = write_table(
        spark,
        write_spec(table, "append", values_query([(3, "c")], "id, name"), branch="audit"),
        commit_id="wap:w",
        reuse_commit=True,
    )["snapshot_id"]
    published = run_ref_action(
        spark, PublishSpec(table, branch="audit", expected_snapshot_id=audited, drop_branch=True)
    )
    assert published["snapshot_id"] == audited and _refs(lake, table) == {"main": audited}
    run_ref_action(spark, TagSpec(table, tag="eod"), commit_id="wap:tag")
    assert _refs(lake, table)["eod"] == audited
    run_ref_action(spark, RollbackSpec(table, snapshot_id=good), commit_id="wap:rb")
    assert lake.current_snapshot_id(table) == good and lake.ids(table) == [1, 2]
    merged = merge_into(
        spark,
        MergeSpec(
            table,
            source=Source(query=values_query([(1, "A")], "id, name")),
            keys=("id",),
            branch="audit",
            reset_branch=True,
        ).validated(),
    )
    assert lake.snapshot(table, merged["snapshot_id"]).parent_snapshot_id == good


def test_a_pin_on_another_branch_and_a_target_created_meanwhile_are_refused(
    spark, lake, table, publish_path, monkeypatch
):
    """Regression: the pin must be on the published branch; a target made between decision and move wins."""
    from airflow_iceberg.jobs import publish

    write_table(spark, write_spec(table, "create", ROWS))
    audited = write_table(
        spark, write_spec(table, "append", values_query([(3, "c")], "id, name"), branch="audit")
    )["snapshot_id"]
    elsewhere = write_table(
        spark, write_spec(table, "append", values_query([(8, "h")], "id, name"), branch="other")
    )["snapshot_id"]
    state = lake.state(table)
    with pytest.raises(TableStateError, match=rf"snapshot {elsewhere} is not in the branch's history"):
        run_ref_action(spark, PublishSpec(table, branch="audit", expected_snapshot_id=elsewhere))
    assert lake.state(table) == state

    decide = publish.decide

    def decide_then_another_task_creates_the_target(history, spec):
        decision = decide(history, spec)
        spark.sql(f"ALTER TABLE {table} CREATE BRANCH release AS OF VERSION {elsewhere}")
        return decision

    monkeypatch.setattr(publish, "decide", decide_then_another_task_creates_the_target)
    spec = PublishSpec(
        table,
        branch="audit",
        target_branch="release",
        expected_snapshot_id=audited,
        create_target_branch=True,
    )
    with pytest.raises(TableStateError, match="Nothing was changed"):
        run_ref_action(spark, spec)
    refs = _refs(lake, table)
    assert refs["release"] == elsewhere and refs["audit"] == audited
    assert not [name for name in refs if name.startswith("airflow_iceberg_pin_")]


def test_two_tag_tries_racing_to_record_both_tag_the_snapshot_the_winner_recorded(
    spark, lake, table, monkeypatch
):
    """Regression: of two tries recording at once, the loser follows the winner's marker."""
    from airflow_iceberg.jobs import retry_markers

    write_table(spark, write_spec(table, "create", ROWS))
    first = lake.current_snapshot_id(table)
    create_marker = retry_markers.create_marker
    raced: list[int] = []

    def a_zombie_try_records_first(refs, history, name, snapshot_id):
        if not raced:  # the other try saw main one commit later, and recorded first
            raced.append(write_table(spark, write_spec(table, "append", ROWS))["snapshot_id"])
            create_marker(refs, refs.history(), name, raced[0])
        create_marker(refs, history, name, snapshot_id)

    monkeypatch.setattr(retry_markers, "create_marker", a_zombie_try_records_first)
    tagged = run_ref_action(spark, TagSpec(table, tag="eod"), commit_id="eod:tag")
    assert tagged["snapshot_id"] == raced[0] == _refs(lake, table)["eod"] != first

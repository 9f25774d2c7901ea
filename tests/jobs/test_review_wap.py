"""Hostile review of write-audit-publish refs, retries, row-level changes and counts.

Each test states a promise of docs/guarantees.md (or docs/operators.md) and injects the fault
that breaks it, against the real job code on the shared SparkSession, and reads the result back
with pyiceberg (:class:`~tests.jobs.helpers.Lake`). A failing test here is a reproduced break.
"""

from __future__ import annotations

import contextlib

import pytest

from airflow_iceberg.jobs import action_specs
from airflow_iceberg.jobs.job_spec import Source
from airflow_iceberg.jobs.merges import MergeSourceError, merge_into
from airflow_iceberg.jobs.table_state import TableStateError
from airflow_iceberg.jobs.writes import write_table
from tests.jobs import test_branches
from tests.jobs.helpers import values_query, write_spec
from tests.jobs.test_branches import ROWS, _refs, run_ref_action

#: Both ways the job reads and moves refs: the driver's metadata, or SQL and metadata tables (Connect).
publish_path = test_branches.publish_path

ROLLBACK_TASK = "wap:rollback_bad_load:manual__2024-01-02:-1:1:2024-01-02T00:00:00+00:00"


def test_review_rollback_retry_undoes_a_commit_published_after_it(spark, lake, table, publish_path):
    """Promise: a retried rollback never undoes a commit made after its first try rolled back.

    The retry takes "the snapshot main was at is still in main's history" to mean "not rolled
    back yet". A publish after the rollback of a branch made before it brings that snapshot back
    into main's history (main, rolled back to an ancestor of the branch, fast-forwards to it).
    Both ways the job reads refs (driver metadata, metadata tables as over Connect).
    """
    write_table(spark, write_spec(table, "create", ROWS))
    good = lake.current_snapshot_id(table)
    bad = write_table(spark, write_spec(table, "append", values_query([(66, "bad")], "id, name")))
    # A write-audit-publish branch made from main while it held the bad load.
    write_table(spark, write_spec(table, "append", values_query([(3, "c")], "id, name"), branch="audit"))
    spec = action_specs.RollbackSpec(table, snapshot_id=good)
    first = run_ref_action(spark, spec, commit_id=ROLLBACK_TASK)  # its success is lost
    assert lake.current_snapshot_id(table) == good and first["previous_snapshot_id"] == bad["snapshot_id"]
    # After the rollback: the branch gets a commit and is published (main, at `good`, is its ancestor).
    after = write_table(
        spark, write_spec(table, "append", values_query([(4, "d")], "id, name"), branch="audit")
    )["snapshot_id"]
    run_ref_action(
        spark,
        action_specs.PublishSpec(table, branch="audit", expected_snapshot_id=after, drop_branch=True),
        commit_id="wap:publish",
    )
    assert lake.current_snapshot_id(table) == after
    state = lake.state(table)

    retried = run_ref_action(spark, spec, commit_id=ROLLBACK_TASK)  # Airflow retries the rollback

    assert 4 in lake.ids(table), "the retry rolled main back again, dropping the published commit"
    assert lake.state(table) == state and retried["already_rolled_back"] is True


def test_review_failed_write_drops_a_branch_another_writer_created_meanwhile(spark, lake, table, monkeypatch):
    """Promise: a failed job leaves the table as it was (a branch it created is dropped, no other)."""
    from airflow_iceberg.jobs import branches

    write_table(spark, write_spec(table, "create", ROWS))
    original = branches._main_to_branch_from
    other: list[int] = []

    def another_writer_creates_the_branch_meanwhile(spark_, table_, branch):
        main = original(spark_, table_, branch)
        if not other:  # between ensure_branch's check and its CREATE BRANCH IF NOT EXISTS
            other.append(0)
            spark.sql(f"ALTER TABLE {table} CREATE BRANCH {branch}")
            staged = values_query([(7, "other writer")], "id, name")
            other[0] = write_table(spark, write_spec(table, "append", staged, branch=branch))["snapshot_id"]
        return main

    monkeypatch.setattr(branches, "_main_to_branch_from", another_writer_creates_the_branch_meanwhile)
    duplicates = Source(query=values_query([(5, "x"), (5, "y")], "id, name"))
    with pytest.raises(MergeSourceError):
        merge_into(
            spark, action_specs.MergeSpec(table, source=duplicates, keys=("id",), branch="audit").validated()
        )
    assert _refs(lake, table).get("audit") == other[0], "the other writer's branch and commit were dropped"


@pytest.mark.parametrize(
    "source_type, values",
    [
        ("double", ["2.1D", "2.2D"]),
        ("timestamp", ["TIMESTAMP'2024-01-02 10:00:00'", "TIMESTAMP'2024-01-02 11:00:00'"]),
    ],
)
def test_review_merge_by_keys_inserts_a_key_twice_when_the_source_type_differs(
    spark, lake, table, source_type, values
):
    """Promise: a merge by keys never inserts a key twice."""
    column_type = "int" if source_type == "double" else "date"
    spark.sql(f"CREATE TABLE {table} (k {column_type}, name string) USING iceberg")
    source = f"SELECT {values[0]} AS k, 'x' AS name UNION ALL SELECT {values[1]} AS k, 'y' AS name"
    with contextlib.suppress(MergeSourceError):  # refused: the promise holds
        merge_into(spark, action_specs.MergeSpec(table, source=Source(query=source), keys=("k",)).validated())
    keys = [row["k"] for row in lake.rows(table, sort_by="k")]
    assert len(keys) == len(set(keys)), f"key inserted twice: {keys}"


def test_review_a_merge_key_in_backticks_is_found(spark, lake, table):
    """docs/operators.md: merge keys are written bare or in backticks (a name holding a space)."""
    spark.sql(f"CREATE TABLE {table} (`order id` int, name string) USING iceberg")
    source = Source(query="SELECT 1 AS `order id`, 'a' AS name")
    merge_into(spark, action_specs.MergeSpec(table, source=source, keys=("`order id`",)).validated())
    assert [row["order id"] for row in lake.rows(table, sort_by="order id")] == [1]


@pytest.mark.parametrize("version", [2, 3])
def test_review_record_count_change_of_a_copy_on_write_merge_on_a_table_whose_deletes_are_merge_on_read(
    spark, lake, table, version
):
    """Promise: record_count_change is how many rows the commit added, on both write modes.

    The documented limit names a table *switched* from merge-on-read to copy-on-write; a table
    that always deletes merge-on-read and merges copy-on-write (a common split) hits it too.
    """
    properties = {
        "format-version": str(version),
        "write.delete.mode": "merge-on-read",
        "write.merge.mode": "copy-on-write",
    }
    start = values_query([(i, f"n{i}") for i in range(1, 11)], "id, name")
    write_table(spark, write_spec(table, "create", start, table_properties=properties))
    from airflow_iceberg.jobs.merges import delete_from

    delete_from(spark, action_specs.DeleteSpec(table, condition="id IN (1, 2, 3)").validated())
    live = len(lake.rows(table))
    upsert = Source(query=values_query([(5, "five")], "id, name"))  # one update, no insert
    merged = merge_into(spark, action_specs.MergeSpec(table, source=upsert, keys=("id",)).validated())
    assert len(lake.rows(table)) == live == 7
    assert merged["record_count_change"] == 0, (
        f"record_count_change {merged['record_count_change']} for an update of one row "
        f"(summary {merged['summary']})"
    )


def test_review_a_pinned_publish_retried_after_expiry_says_nothing_was_published(spark, lake, table):
    """A retried publish whose earlier try published must not say it never did (and advise a redo)."""
    write_table(spark, write_spec(table, "create", ROWS))
    audited = write_table(
        spark, write_spec(table, "append", values_query([(3, "c")], "id, name"), branch="audit")
    )["snapshot_id"]
    spec = action_specs.PublishSpec(table, branch="audit", expected_snapshot_id=audited, drop_branch=True)
    run_ref_action(spark, spec)  # published and dropped; Airflow lost the success
    write_table(spark, write_spec(table, "append", values_query([(5, "e")], "id, name")))
    spark.sql(
        f"CALL lake.system.expire_snapshots(table => '{table.split('.', 1)[1]}', retain_last => 1, "
        "older_than => TIMESTAMP '2999-01-01 00:00:00')"
    )
    assert audited not in {s.snapshot_id for s in lake.snapshots(table)}
    assert 3 in lake.ids(table)  # the audited rows are on main
    try:
        run_ref_action(spark, spec)
    except TableStateError as error:
        assert "nothing was published" not in str(error), f"false: {error}"


def test_review_compaction_waiting_for_branches_runs_under_a_branch_write_in_flight(
    spark, lake, table, monkeypatch
):
    """Promise: compaction with wait_for_branches does not break a pending publish.

    The branch write makes its branch at main's head, then runs its MERGE (minutes, on real
    data). A compaction that starts meanwhile sees a branch at main's head ("nothing to
    publish"), commits, and the day's publish then fails.
    """
    from airflow_iceberg.jobs import merges
    from airflow_iceberg.jobs.upkeep import rewrite_data_files

    write_table(spark, write_spec(table, "create", ROWS))
    write_table(spark, write_spec(table, "append", values_query([(3, "c")], "id, name")))
    compaction = action_specs.RewriteDataFilesSpec(
        table, wait_for_branches=("audit_*",), options={"min-input-files": "2"}
    ).validated()
    commit_sql = merges._commit_sql
    compacted: list[dict] = []

    def the_daily_compaction_runs_while_the_merge_runs(*args):
        compacted.append(rewrite_data_files(spark, compaction))
        commit_sql(*args)

    monkeypatch.setattr(merges, "_commit_sql", the_daily_compaction_runs_while_the_merge_runs)
    source = Source(query=values_query([(1, "A"), (4, "d")], "id, name"))
    merged = merge_into(
        spark, action_specs.MergeSpec(table, source=source, keys=("id",), branch="audit_20240102").validated()
    )
    monkeypatch.undo()
    publish = action_specs.PublishSpec(
        table, branch="audit_20240102", expected_snapshot_id=merged["snapshot_id"]
    )
    try:
        run_ref_action(spark, publish)
    except TableStateError as error:
        pytest.fail(
            f"the compaction ran under the branch write ({compacted[0]}), and the publish fails: {error}"
        )
    assert lake.current_snapshot_id(table) == merged["snapshot_id"]


def test_review_a_rollback_retry_after_the_table_was_replaced_says_it_rolled_back(spark, lake, table):
    """A retried rollback says ``already_rolled_back`` only when its earlier try rolled back."""
    from airflow_iceberg.jobs import rollback as rollback_module

    write_table(spark, write_spec(table, "create", ROWS))
    good = lake.current_snapshot_id(table)
    write_table(spark, write_spec(table, "append", values_query([(66, "bad")], "id, name")))
    spec = action_specs.RollbackSpec(table, snapshot_id=good)
    procedure_call = rollback_module.procedure_call

    class Killed(BaseException):
        pass

    def killed_before_rolling_back(*args, **kwargs):
        raise Killed

    rollback_module.procedure_call = killed_before_rolling_back
    try:
        with pytest.raises(Killed):
            run_ref_action(spark, spec, commit_id=ROLLBACK_TASK)  # the marker is made, then the kill
    finally:
        rollback_module.procedure_call = procedure_call
    write_table(spark, write_spec(table, "create_or_replace", values_query([(9, "new")], "id, name")))
    state = lake.state(table)
    try:
        retried = run_ref_action(spark, spec, commit_id=ROLLBACK_TASK)
    except TableStateError:
        return  # refused: honest
    assert lake.state(table) == state
    assert retried["already_rolled_back"] is False, (
        f"reported an earlier try rolled back, but none did; main is at the replace's snapshot: {retried}"
    )


HOSTILE_TABLE = "lake.`we'ird ns`.`t``ick -- /* x */ été`"


def test_held_hostile_table_name_through_every_ref_action(spark, lake, publish_path):
    """Backticks, quotes, comment markers and unicode in the name reach CREATE TAG, fast_forward, CALL."""
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
        spark, action_specs.PublishSpec(table, branch="audit", expected_snapshot_id=audited, drop_branch=True)
    )
    assert published["snapshot_id"] == audited and _refs(lake, table) == {"main": audited}
    run_ref_action(spark, action_specs.TagSpec(table, tag="eod"), commit_id="wap:tag")
    assert _refs(lake, table)["eod"] == audited
    run_ref_action(spark, action_specs.RollbackSpec(table, snapshot_id=good), commit_id="wap:rb")
    assert lake.current_snapshot_id(table) == good and lake.ids(table) == [1, 2]
    merged = merge_into(
        spark,
        action_specs.MergeSpec(
            table,
            source=Source(query=values_query([(1, "A")], "id, name")),
            keys=("id",),
            branch="audit",
            reset_branch=True,
        ).validated(),
    )
    assert lake.snapshot(table, merged["snapshot_id"]).parent_snapshot_id == good


def _equality_delete(spark, table: str, ids: list[int]) -> None:
    """Commit an equality delete file on ``id``, as Flink's upserts write them (Iceberg's Java API)."""
    from airflow_iceberg.jobs.table_state import iceberg_table

    jvm, gateway = spark.sparkContext._jvm, spark.sparkContext._gateway
    loaded = iceberg_table(spark, table)
    schema = loaded.schema()
    field_ids = gateway.new_array(jvm.int, 1)
    field_ids[0] = schema.findField("id").fieldId()
    names = jvm.java.util.ArrayList()
    names.add("id")
    delete_schema = schema.select(names)
    factory = jvm.org.apache.iceberg.data.GenericAppenderFactory(
        schema, loaded.spec(), field_ids, delete_schema, None
    )
    out = loaded.io().newOutputFile(f"{loaded.location()}/data/flink-eq-deletes.parquet")
    encrypted = jvm.org.apache.iceberg.encryption.EncryptedFiles.plainAsEncryptedOutput(out)
    writer = factory.newEqDeleteWriter(encrypted, jvm.org.apache.iceberg.FileFormat.PARQUET, None)
    for value in ids:
        record = jvm.org.apache.iceberg.data.GenericRecord.create(delete_schema)
        record.setField("id", jvm.java.lang.Integer(value))
        writer.write(record)
    writer.close()
    loaded.newRowDelta().addDeletes(writer.toDeleteFile()).commit()


@pytest.mark.parametrize("version", [2, 3])
def test_review_record_count_change_on_a_table_with_another_engines_equality_deletes(
    spark, lake, table, version
):
    """Promise: record_count_change is how many rows the commit added (documented limit: v2, MOR->COW).

    Another engine (Flink upserts) wrote equality deletes; a copy-on-write merge then rewrites
    the file. pyiceberg cannot read equality deletes, so the live rows are counted by Spark; the
    summary is pyiceberg's.
    """
    properties = {"format-version": str(version), "write.merge.mode": "copy-on-write"}
    start = values_query([(i, f"n{i}") for i in range(1, 11)], "id, name")
    write_table(spark, write_spec(table, "create", start, table_properties=properties))
    _equality_delete(spark, table, [1, 2, 3])
    live = spark.table(table).count()
    upsert = Source(query=values_query([(5, "five")], "id, name"))  # one update, no insert
    merged = merge_into(spark, action_specs.MergeSpec(table, source=upsert, keys=("id",)).validated())
    summary = lake.summary(table, merged["snapshot_id"])
    assert spark.table(table).count() == live == 7 and int(summary["total-equality-deletes"]) == 3
    assert merged["record_count_change"] == 0, (
        f"record_count_change {merged['record_count_change']} for an update of one row (summary {summary})"
    )


UPSERT_A = values_query([(1, "A")], "id, name")


@pytest.mark.parametrize(
    "source, clause",
    [
        (UPSERT_A, {"when": "matched", "then": "update", "set": {"name": "s.nmae"}}),  # held
        (UPSERT_A, {"when": "matched", "condition": "rand() < 2", "then": "update"}),  # held
        (UPSERT_A, {"when": "matched", "then": "update", "set": {"id": "array(1)"}}),  # held
        (UPSERT_A, {"when": "matched", "condition": "s.name = array(1)", "then": "update"}),
        ("SELECT CAST(rand() * 0 + 1 AS INT) AS id, 'A' AS name", {"when": "matched", "then": "update"}),
    ],
    ids=[
        "misspelt-column",
        "non-deterministic-condition",
        "incompatible-assignment",
        "type-mismatch-in-condition",
        "non-deterministic-source",
    ],
)
def test_review_an_invalid_merge_is_reported_as_a_duplicate_or_null_key(spark, lake, table, source, clause):
    """A refused merge must say why: Spark's refusal of the statement is not "a duplicate or NULL key".

    Some of Spark's analysis errors print the plan, which holds the key guard's message text
    (``airflow-iceberg merge key check failed:``), so the job takes them for a failed key check
    and names no key ("it has a duplicate or NULL key").
    """
    write_table(spark, write_spec(table, "create", ROWS))
    state = lake.state(table)
    spec = action_specs.MergeSpec(
        table, source=Source(query=source), keys=("id",), clauses=(clause,)
    ).validated()
    with pytest.raises(Exception) as raised:
        merge_into(spark, spec)
    assert lake.state(table) == state
    assert not isinstance(raised.value, MergeSourceError), f"misreported: {raised.value}"


@pytest.mark.parametrize("mode", ["overwrite_partitions", "overwrite"])
def test_review_an_isolated_overwrite_of_a_new_branch_fails_with_no_conflicting_commit(
    spark, lake, table, mode
):
    """Promise: with isolation-level alone the write fails only if a conflicting commit lands meanwhile.

    The pin is the head of the ref written, read before the branch exists: none, so Iceberg
    validates against the whole history and the table's own files count as conflicts.
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


def test_held_a_pin_on_another_branch_and_a_target_created_meanwhile_are_refused(
    spark, lake, table, publish_path, monkeypatch
):
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
        run_ref_action(spark, action_specs.PublishSpec(table, branch="audit", expected_snapshot_id=elsewhere))
    assert lake.state(table) == state

    decide = publish.decide

    def decide_then_another_task_creates_the_target(history, spec):
        decision = decide(history, spec)
        spark.sql(f"ALTER TABLE {table} CREATE BRANCH release AS OF VERSION {elsewhere}")
        return decision

    monkeypatch.setattr(publish, "decide", decide_then_another_task_creates_the_target)
    spec = action_specs.PublishSpec(
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


def test_held_two_tag_tries_racing_to_record_tag_the_same_snapshot(spark, lake, table, monkeypatch):
    from airflow_iceberg.jobs import branches, retry_markers

    write_table(spark, write_spec(table, "create", ROWS))
    first = lake.current_snapshot_id(table)
    create_marker = retry_markers.create_marker
    raced: list[int] = []

    def a_zombie_try_records_first(spark_, history, name, snapshot_id):
        if not raced:  # the other try saw main one commit later, and recorded first
            raced.append(write_table(spark, write_spec(table, "append", ROWS))["snapshot_id"])
            create_marker(spark_, branches.load_history(spark_, table), name, raced[0])
        create_marker(spark_, history, name, snapshot_id)

    monkeypatch.setattr(retry_markers, "create_marker", a_zombie_try_records_first)
    tagged = run_ref_action(spark, action_specs.TagSpec(table, tag="eod"), commit_id="eod:tag")
    assert tagged["snapshot_id"] == raced[0] == _refs(lake, table)["eod"] != first

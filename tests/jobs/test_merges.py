"""MERGE INTO and DELETE FROM: results row by row (pyiceberg), both merge modes, retries, bad sources."""

from __future__ import annotations

import pytest

from airflow_iceberg.jobs.merges import MergeSourceError, delete_from, merge_into
from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.row_changes import DeleteSpec, MergeSpec
from airflow_iceberg.jobs.spec.sources import Source
from airflow_iceberg.jobs.table_state import SchemaMismatchError
from airflow_iceberg.jobs.writes import write_table
from tests.jobs.helpers import values_query, write_spec

TRY_KEY = "customers:merge:manual__2024-01-02:-1"
START = values_query([(1, "ann", 10), (2, "bob", 20), (3, "cid", 30)], "id, name, score")
# A CDC batch: update 1, insert 4, delete 3 (op 'D').
CHANGES = values_query([(1, "ANN", 11, "U"), (4, "dee", 40, "I"), (3, "cid", 30, "D")], "id, name, score, op")


def _table(spark, table: str, mode: str) -> str:
    properties = {
        "format-version": "2",
        "write.merge.mode": mode,
        "write.delete.mode": mode,
        "write.update.mode": mode,
    }
    write_table(spark, write_spec(table, "create", START, table_properties=properties))
    return table


def _merge(table: str, query: str, **fields) -> MergeSpec:
    return MergeSpec(table, source=Source(query=query), **fields).validated()


CDC_CLAUSES = (
    {"when": "matched", "condition": "s.op = 'D'", "then": "delete"},
    {"when": "matched", "then": "update", "set": {"name": "s.name", "score": "s.score"}},
    {
        "when": "not_matched",
        "condition": "s.op <> 'D'",
        "then": "insert",
        "values": {"id": "s.id", "name": "s.name", "score": "s.score"},
    },
)


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_cdc_merge_updates_inserts_and_deletes_row_by_row(spark, lake, table, mode):
    _table(spark, table, mode)
    result = merge_into(
        spark,
        _merge(table, CHANGES, keys=("id",), clauses=CDC_CLAUSES),
        commit_id=TRY_KEY,
        commit_properties={"airflow.task-id": "merge"},
    )

    assert lake.rows(table) == [
        {"id": 1, "name": "ANN", "score": 11},
        {"id": 2, "name": "bob", "score": 20},
        {"id": 4, "name": "dee", "score": 40},
    ]
    summary = lake.summary(table)
    assert result["snapshot_id"] == lake.current_snapshot_id(table) and result["committed"] is True
    assert summary["airflow-iceberg.commit-id"] == TRY_KEY and summary["airflow.task-id"] == "merge"
    assert result["total_records"] == int(summary["total-records"])
    if mode == "merge-on-read":  # deletes are written as position delete files, data files stay
        assert int(summary["added-position-deletes"]) == 2 and "deleted-data-files" not in summary
    else:  # the touched data file is rewritten
        assert int(summary["deleted-data-files"]) >= 1 and "added-position-deletes" not in summary


def test_default_merge_is_an_upsert_and_a_retry_returns_the_earlier_commit(spark, lake, table):
    _table(spark, table, "copy-on-write")
    spec = _merge(table, values_query([(2, "BOB", 21), (5, "eve", 50)], "id, name, score"), keys=("id",))
    first = merge_into(spark, spec, commit_id=TRY_KEY, reuse_commit=True)
    state = lake.state(table)
    retried = merge_into(spark, spec, commit_id=TRY_KEY, reuse_commit=True)

    assert lake.state(table) == state
    assert retried["snapshot_id"] == first["snapshot_id"] and retried["reused_earlier_commit"] is True
    assert retried["committed"] is True and first["committed"] is True  # the XCom says so either way
    assert [(r["id"], r["name"]) for r in lake.rows(table)] == [
        (1, "ann"),
        (2, "BOB"),
        (3, "cid"),
        (5, "eve"),
    ]


def test_not_matched_by_source_deletes_rows_missing_from_a_full_snapshot_source(spark, lake, table):
    _table(spark, table, "merge-on-read")
    clauses = (
        {"when": "matched", "then": "update"},
        {"when": "not_matched", "then": "insert"},
        {"when": "not_matched_by_source", "condition": "t.id > 1", "then": "delete"},
    )
    merge_into(
        spark,
        _merge(table, values_query([(3, "CID", 33)], "id, name, score"), on="t.id = s.id", clauses=clauses),
    )
    assert lake.rows(table) == [{"id": 1, "name": "ann", "score": 10}, {"id": 3, "name": "CID", "score": 33}]


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_two_source_rows_for_one_table_row_fail_clearly_and_change_nothing(spark, lake, table, mode):
    """With ``on``, Spark's own cardinality check: a table row matched by two source rows."""
    _table(spark, table, mode)
    state = lake.state(table)
    duplicates = values_query([(1, "x", 1), (1, "y", 2)], "id, name, score")
    with pytest.raises(
        MergeSourceError, match=r"more than one row for a row of .*keep the latest row per key"
    ):
        merge_into(spark, _merge(table, duplicates, on="t.id = s.id"), commit_id=TRY_KEY)
    assert lake.state(table) == state


@pytest.mark.parametrize(
    ("mode", "rows", "offending"),
    [
        ("copy-on-write", [(7, "x", 1), (7, "y", 2), (8, "z", 3)], r"\(id=7\) 2 rows"),  # a new key, twice
        ("merge-on-read", [(7, "x", 1), (7, "y", 2), (8, "z", 3)], r"\(id=7\) 2 rows"),
        ("merge-on-read", [(1, "x", 1), (1, "y", 2)], r"\(id=1\) 2 rows"),  # a key the table has, twice
        ("copy-on-write", [(None, "n", 0), (2, "B", 2)], r"\(id=NULL\) 1 row"),
        ("merge-on-read", [(None, "n", 0), (None, "m", 1)], r"\(id=NULL\) 2 rows"),
    ],
)
def test_an_upsert_by_keys_refuses_duplicate_or_null_source_keys_and_changes_nothing(
    spark, lake, table, mode, rows, offending
):
    """Spark checks only table rows matched twice: a new key twice, or a NULL key, would be inserted."""
    _table(spark, table, mode)
    state = lake.state(table)
    source = values_query(rows, "id, name, score")
    with pytest.raises(MergeSourceError, match=rf"one row per key \(id\) and no NULL key.*{offending}"):
        merge_into(spark, _merge(table, source, keys=("id",)), commit_id=TRY_KEY, reuse_commit=True)
    assert lake.state(table) == state
    assert [(r["id"], r["name"]) for r in lake.rows(table)] == [(1, "ann"), (2, "bob"), (3, "cid")]


def test_the_key_check_names_a_few_offending_keys_of_a_composite_key(spark, lake, table):
    _table(spark, table, "copy-on-write")
    rows = [(k % 2, f"n{k % 3}", k) for k in range(12)] + [(5, None, 1)]  # 6 pairs twice, a NULL name
    with pytest.raises(MergeSourceError) as refused:
        merge_into(spark, _merge(table, values_query(rows, "id, name, score"), keys=("id", "name")))
    message = str(refused.value)
    assert "one row per key (id, name) and no NULL key" in message
    assert "but it has (id=5, name=NULL) 1 row, (id=" in message  # NULL keys first, then the most rows
    assert message.count(" 2 rows") == 4 and "and more" in message  # a few of them, not every one


def test_a_key_missing_from_the_source_is_named(spark, lake, table):
    _table(spark, table, "copy-on-write")
    state = lake.state(table)
    with pytest.raises(SchemaMismatchError, match=r"merge key 'ID2' is not a column of the source"):
        merge_into(spark, _merge(table, values_query([(1, "a", 1)], "id, name, score"), keys=("ID2",)))
    assert lake.state(table) == state


def test_keys_match_source_columns_whatever_their_case(spark, lake, table):
    _table(spark, table, "merge-on-read")
    merge_into(spark, _merge(table, values_query([(2, "BOB", 2)], "ID, name, score"), keys=("Id",)))
    assert [(r["id"], r["name"]) for r in lake.rows(table)] == [(1, "ann"), (2, "BOB"), (3, "cid")]


@pytest.mark.parametrize(
    "fields",
    [
        {"on": "t.id = s.id WHEN MATCHED THEN DELETE"},  # a clause smuggled into the match
        {
            "keys": ("id",),
            "clauses": ({"when": "matched", "then": "update", "set": {"name": "s.name) x ("}},),
        },
    ],
)
def test_text_that_is_not_one_expression_is_refused_before_anything_runs(spark, lake, table, fields):
    _table(spark, table, "copy-on-write")
    state = lake.state(table)
    with pytest.raises(InvalidSpecError, match="is not one SQL expression"):
        merge_into(spark, _merge(table, values_query([(1, "z", 0)], "id, name, score"), **fields))
    assert lake.state(table) == state


def test_a_merge_source_query_with_dml_is_refused(spark, lake, table):
    _table(spark, table, "copy-on-write")
    with pytest.raises(InvalidSpecError, match="single statement"):
        _merge(table, f"SELECT 1 AS id; DELETE FROM {table}", keys=("id",))


def test_delete_commits_with_the_commit_id_and_a_retry_returns_that_commit(spark, lake, table):
    _table(spark, table, "merge-on-read")
    deleted = delete_from(
        spark,
        DeleteSpec(table, condition="score >= 20").validated(),
        commit_id=TRY_KEY,
        reuse_commit=True,
    )
    assert lake.ids(table) == [1]
    assert (deleted["committed"], deleted["snapshot_id"]) == (True, lake.current_snapshot_id(table))
    assert lake.summary(table)["airflow-iceberg.commit-id"] == TRY_KEY
    retried = delete_from(
        spark,
        DeleteSpec(table, condition="score >= 20").validated(),
        commit_id=TRY_KEY,
        reuse_commit=True,
    )
    assert retried["reused_earlier_commit"] is True and retried["snapshot_id"] == deleted["snapshot_id"]
    assert retried["committed"] is True


def test_a_delete_condition_that_is_one_parenthesised_name_is_a_condition_not_an_alias(spark, lake, table):
    """``DELETE FROM t WHERE (flag)`` parses as the alias ``WHERE`` with a column list: refused by Spark."""
    _table(spark, table, "copy-on-write")
    deleted = delete_from(spark, DeleteSpec(table, condition="(true)").validated(), commit_id="paren")
    assert lake.ids(table) == []
    assert (deleted["committed"], lake.summary(table)["airflow-iceberg.commit-id"]) == (True, "paren")


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_a_delete_that_matches_nothing_makes_an_empty_commit_unless_spark_folds_it_away(
    spark, lake, table, mode
):
    """What Iceberg really does (1.10, Spark 3.5 and 4.0), and what the XCom says about it."""
    _table(spark, table, mode)
    rows = lake.rows(table)
    # id = 99: file statistics prove no file holds it (a metadata-only delete). length(name) = 99:
    # Iceberg cannot evaluate it on statistics, so Spark scans the rows (a row-level delete).
    for condition, operation in (("id = 99", "delete"), ("length(name) = 99", "overwrite")):
        head = lake.current_snapshot_id(table)
        result = delete_from(
            spark, DeleteSpec(table, condition=condition).validated(), commit_id=condition
        )
        assert result["snapshot_id"] == lake.current_snapshot_id(table)
        assert lake.snapshot(table, result["snapshot_id"]).parent_snapshot_id == head
        summary = lake.summary(table)
        assert (summary["operation"], summary["airflow-iceberg.commit-id"]) == (operation, condition)
        assert not {"added-data-files", "deleted-data-files", "added-delete-files"} & set(summary)
        assert (result["committed"], result["operation"]) == (True, operation)
        counts = ("added_records", "deleted_records", "record_count_change")
        assert [result[count] for count in counts] == [0, 0, 0]
        assert lake.rows(table) == rows
    state = lake.state(table)
    folded = delete_from(spark, DeleteSpec(table, condition="1 = 0").validated(), commit_id="f")
    assert lake.state(table) == state  # Spark drops a delete whose condition is always false
    assert (folded["committed"], folded["snapshot_id"]) == (False, None)


@pytest.mark.parametrize(
    ("mode", "version"), [("copy-on-write", 2), ("merge-on-read", 2), ("merge-on-read", 3)]
)
def test_merge_and_delete_counts_say_how_many_rows_went_on_both_modes(spark, lake, table, mode, version):
    """Merge-on-read deletes are delete-file entries (v3: deletion vectors), not Iceberg's deleted-records."""
    properties = {"format-version": str(version), **{f"write.{op}.mode": mode for op in ("merge", "delete")}}
    write_table(spark, write_spec(table, "create", START, table_properties=properties))
    live = len(lake.rows(table))
    merged = merge_into(spark, _merge(table, CHANGES, keys=("id",), clauses=CDC_CLAUSES), commit_id="cdc")
    summary = lake.summary(table)

    assert merged["record_count_change"] == len(lake.rows(table)) - live == 0  # 1 updated, 1 in, 1 out
    if mode == "merge-on-read":  # the old version of id 1 and id 3 marked deleted; the new 1 and 4 written
        assert (merged["deleted_records"], merged["added_records"]) == (2, 2)
        assert int(summary["added-position-deletes"]) == 2 and "deleted-records" not in summary
    else:  # every row of each rewritten file counts as deleted, and the kept ones as added again
        assert merged["deleted_records"] == int(summary["deleted-records"]) >= 2
        assert merged["added_records"] == int(summary["added-records"]) == merged["deleted_records"]
    # Then a delete in a data file that has deletes already: merge-on-read replaces its delete file
    # (v3: its deletion vector), whose entries repeat the earlier ones (removed-position-deletes).
    for condition, went in (("id = 2", 1), ("id IN (1, 4)", 2)):
        live = len(lake.rows(table))
        deleted = delete_from(spark, DeleteSpec(table, condition=condition).validated())
        assert deleted["record_count_change"] == len(lake.rows(table)) - live == -went
        if mode == "merge-on-read":
            assert (deleted["deleted_records"], deleted["added_records"]) == (went, 0)
    assert lake.rows(table) == []
    assert deleted["summary"] == {k: v for k, v in lake.summary(table).items() if k != "operation"}


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_a_merge_and_a_delete_are_one_commit_each_and_their_retries_change_nothing(spark, lake, table, mode):
    _table(spark, table, mode)
    merge = _merge(table, CHANGES, keys=("id",), clauses=CDC_CLAUSES)
    delete = DeleteSpec(table, condition="id = 2").validated()
    made = []
    for action, spec, commit_id in ((merge_into, merge, "cdc:merge"), (delete_from, delete, "cdc:delete")):
        before = {s.snapshot_id for s in lake.snapshots(table)}
        result = action(spark, spec, commit_id=commit_id, reuse_commit=True)
        assert [s.snapshot_id for s in lake.snapshots(table) if s.snapshot_id not in before] == [
            result["snapshot_id"]
        ]
        made.append(result["snapshot_id"])
    state, rows = lake.state(table), lake.rows(table)
    assert [(r["id"], r["name"]) for r in rows] == [(1, "ANN"), (4, "dee")]

    for action, spec, commit_id in ((merge_into, merge, "cdc:merge"), (delete_from, delete, "cdc:delete")):
        retried = action(spark, spec, commit_id=commit_id, reuse_commit=True)
        assert retried["reused_earlier_commit"] is True and retried["snapshot_id"] in made
    assert (lake.state(table), lake.rows(table)) == (state, rows)


@pytest.mark.parametrize(
    ("source_type", "values", "column_type"),
    [
        ("double", ["2.1D", "2.2D"], "int"),
        ("timestamp", ["TIMESTAMP'2024-01-02 10:00:00'", "TIMESTAMP'2024-01-02 11:00:00'"], "date"),
    ],
)
def test_a_merge_key_whose_source_type_casts_with_loss_is_refused_naming_both_types(
    spark, lake, table, source_type, values, column_type
):
    """2.1 and 2.2 are two keys to the match and the guard, but the insert stores both as 2.

    And 2.1 would not match a table row 2 (the match compares in double), so it would be
    inserted next to it. Refused before the merge runs; the table is unchanged.
    """
    spark.sql(f"CREATE TABLE {table} (k {column_type}, name string) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (CAST({values[0]} AS {column_type}), 'table')")
    state = lake.state(table)
    source = f"SELECT {values[0]} AS k, 'x' AS name UNION ALL SELECT {values[1]} AS k, 'y' AS name"
    with pytest.raises(
        SchemaMismatchError,
        match=rf"merge key 'k' is {source_type} in the source but {column_type} in table {table}: .* cast "
        rf"it in the source query, e.g. CAST\(`k` AS {column_type.upper()}\) AS `k`",
    ):
        merge_into(spark, _merge(table, source, keys=("k",)))
    keys = [row["k"] for row in lake.rows(table, sort_by="k")]
    assert len(keys) == len(set(keys)) == 1, f"key inserted twice: {keys}"
    assert lake.state(table) == state


def test_a_merge_key_of_a_type_that_widens_without_loss_merges(spark, lake, table):
    """An int into a bigint key, a date into a timestamp key: the match sees what the insert stores."""
    spark.sql(f"CREATE TABLE {table} (id bigint, day timestamp, name string) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (1, TIMESTAMP'2024-01-02 00:00:00', 'a')")
    source = "SELECT 1 AS id, DATE'2024-01-02' AS day, 'A' AS name UNION ALL SELECT 2, DATE'2024-01-02', 'b'"
    merge_into(spark, _merge(table, source, keys=("id", "day")))
    assert [(r["id"], r["name"]) for r in lake.rows(table)] == [(1, "A"), (2, "b")]


def test_a_merge_key_in_backticks_is_found(spark, lake, table):
    """docs/operators.md: merge keys are written bare or in backticks (a name holding a space)."""
    spark.sql(f"CREATE TABLE {table} (`order id` int, name string) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'a')")
    source = Source(query="SELECT 1 AS `order id`, 'A' AS name UNION ALL SELECT 2, 'b'")
    merge_into(spark, MergeSpec(table, source=source, keys=("`order id`",)).validated())
    rows = lake.rows(table, sort_by="order id")
    assert [(row["order id"], row["name"]) for row in rows] == [(1, "A"), (2, "b")]
    duplicates = Source(query="SELECT 3 AS `order id`, 'x' AS name UNION ALL SELECT 3, 'y'")
    with pytest.raises(MergeSourceError, match=r"one row per key \(order id\) .* \(order id=3\) 2 rows"):
        merge_into(spark, MergeSpec(table, source=duplicates, keys=("`order id`",)).validated())


UPSERT_A = values_query([(1, "A")], "id, name")


@pytest.mark.parametrize(
    ("source", "clause"),
    [
        (UPSERT_A, {"when": "matched", "then": "update", "set": {"name": "s.nmae"}}),
        (UPSERT_A, {"when": "matched", "condition": "rand() < 2", "then": "update"}),
        (UPSERT_A, {"when": "matched", "then": "update", "set": {"id": "array(1)"}}),
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
def test_an_invalid_merge_is_reported_as_sparks_refusal_not_as_a_duplicate_key(
    spark, lake, table, source, clause
):
    """Spark's analysis errors print the plan, which holds the key guard's message text.

    Only the failure of the merge's running job is the key check's; an analysis error is passed on
    as Spark's own, and the table is unchanged.
    """
    write_table(spark, write_spec(table, "create", values_query([(1, "a"), (2, "b")], "id, name")))
    state = lake.state(table)
    spec = MergeSpec(
        table, source=Source(query=source), keys=("id",), clauses=(clause,)
    ).validated()
    with pytest.raises(Exception) as raised:
        merge_into(spark, spec)
    assert lake.state(table) == state
    assert not isinstance(raised.value, MergeSourceError), f"misreported: {raised.value}"
    assert "duplicate or NULL key" not in str(raised.value)


@pytest.mark.parametrize("version", [2, 3])
def test_record_count_change_of_a_copy_on_write_merge_of_files_with_merge_on_read_deletes(
    spark, lake, table, version
):
    """Deletes merge-on-read, merges copy-on-write (a common split); the merge rewrites a file with deletes.

    v3: the file's deletion vector goes with it and says exactly which of its rows were dead, so
    the count is exact. v2: its position delete file stays and may cover other files too; the
    summary counts the dead rows as deleted again, so the count is unknown (None, with why).
    """
    properties = {
        "format-version": str(version),
        "write.delete.mode": "merge-on-read",
        "write.merge.mode": "copy-on-write",
    }
    start = values_query([(i, f"n{i}") for i in range(1, 11)], "id, name")
    write_table(spark, write_spec(table, "create", start, table_properties=properties))
    delete_from(spark, DeleteSpec(table, condition="id IN (1, 2, 3)").validated())
    live = len(lake.rows(table))
    upsert = Source(query=values_query([(5, "five")], "id, name"))  # one update, no insert
    merged = merge_into(spark, MergeSpec(table, source=upsert, keys=("id",)).validated())
    assert len(lake.rows(table)) == live == 7
    # Copy-on-write rewrites the file holding id 5 with its live rows only (a file per task).
    assert merged["added_records"] == int(lake.summary(table)["added-records"]) > 0
    if version == 3:
        assert merged["record_count_change"] == len(lake.rows(table)) - live == 0
        assert merged["deleted_records"] == merged["added_records"]
        assert "record_count_unknown" not in merged
    else:
        assert (merged["record_count_change"], merged["deleted_records"]) == (None, None), merged
        assert "may have marked rows in (merge-on-read deletes" in merged["record_count_unknown"]
    then = delete_from(spark, DeleteSpec(table, condition="id = 10").validated())
    assert then["record_count_change"] == -1  # merge-on-read again: exact


def _equality_delete(spark, table: str, ids: list[int]) -> None:
    """Commit an equality delete file on ``id``, as Flink's upserts write them (Iceberg's Java API).

    Through ``GenericFileWriterFactory``, whose builder is public from Iceberg 1.11 on (1.12 removed
    the ``GenericAppenderFactory`` this used before).
    """
    from airflow_iceberg.jobs.table_state import iceberg_table

    jvm, gateway = spark.sparkContext._jvm, spark.sparkContext._gateway
    loaded = iceberg_table(spark, table)
    schema = loaded.schema()
    field_ids = gateway.new_array(jvm.int, 1)
    field_ids[0] = schema.findField("id").fieldId()
    names = jvm.java.util.ArrayList()
    names.add("id")
    delete_schema = schema.select(names)
    factory = (
        getattr(jvm.org.apache.iceberg.data, "GenericFileWriterFactory$Builder")(loaded)
        .deleteFileFormat(jvm.org.apache.iceberg.FileFormat.PARQUET)
        .equalityFieldIds(field_ids)
        .equalityDeleteRowSchema(delete_schema)
        .build()
    )
    out = loaded.io().newOutputFile(f"{loaded.location()}/data/flink-eq-deletes.parquet")
    encrypted = jvm.org.apache.iceberg.encryption.EncryptedFiles.plainAsEncryptedOutput(out)
    writer = factory.newEqualityDeleteWriter(encrypted, loaded.spec(), None)
    for value in ids:
        record = jvm.org.apache.iceberg.data.GenericRecord.create(delete_schema)
        record.setField("id", jvm.java.lang.Integer(value))
        writer.write(record)
    writer.close()
    loaded.newRowDelta().addDeletes(writer.toDeleteFile()).commit()


@pytest.mark.parametrize("version", [2, 3])
def test_record_count_change_is_unknown_after_another_engines_equality_deletes_on_the_rewritten_file(
    spark, lake, table, version
):
    """Another engine (Flink upserts) wrote equality deletes; a copy-on-write merge rewrites the file.

    The summary counts the file's dead rows as deleted again, and no metadata says how many
    there were: None, with why. pyiceberg cannot read equality deletes, so Spark counts the live
    rows; the summary is pyiceberg's.
    """
    properties = {"format-version": str(version), "write.merge.mode": "copy-on-write"}
    start = values_query([(i, f"n{i}") for i in range(1, 11)], "id, name")
    write_table(spark, write_spec(table, "create", start, table_properties=properties))
    _equality_delete(spark, table, [1, 2, 3])
    live = spark.table(table).count()
    upsert = Source(query=values_query([(5, "five")], "id, name"))  # one update, no insert
    merged = merge_into(spark, MergeSpec(table, source=upsert, keys=("id",)).validated())
    summary = lake.summary(table, merged["snapshot_id"])
    assert spark.table(table).count() == live == 7 and int(summary["total-equality-deletes"]) == 3
    assert (merged["record_count_change"], merged["deleted_records"]) == (None, None), merged
    assert "equality delete file" in merged["record_count_unknown"]
    assert merged["added_records"] == int(summary["added-records"]) > 0

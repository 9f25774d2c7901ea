"""MERGE INTO and DELETE FROM: results row by row (pyiceberg), both merge modes, retries, bad sources."""

from __future__ import annotations

import pytest

from airflow_iceberg.jobs import action_specs
from airflow_iceberg.jobs.job_spec import InvalidSpecError, Source
from airflow_iceberg.jobs.merges import MergeSourceError, delete_from, merge_into
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


def _merge(table: str, query: str, **fields) -> action_specs.MergeSpec:
    return action_specs.MergeSpec(table, source=Source(query=query), **fields).validated()


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
def test_two_source_rows_for_one_key_fail_clearly_and_change_nothing(spark, lake, table, mode):
    _table(spark, table, mode)
    state = lake.state(table)
    duplicates = values_query([(1, "x", 1), (1, "y", 2)], "id, name, score")
    with pytest.raises(
        MergeSourceError, match=r"more than one row for a row of .*keep the latest row per key"
    ):
        merge_into(spark, _merge(table, duplicates, keys=("id",)), commit_id=TRY_KEY)
    assert lake.state(table) == state


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
        action_specs.DeleteSpec(table, condition="score >= 20").validated(),
        commit_id=TRY_KEY,
        reuse_commit=True,
    )
    assert lake.ids(table) == [1]
    assert (deleted["committed"], deleted["snapshot_id"]) == (True, lake.current_snapshot_id(table))
    assert lake.summary(table)["airflow-iceberg.commit-id"] == TRY_KEY
    retried = delete_from(
        spark,
        action_specs.DeleteSpec(table, condition="score >= 20").validated(),
        commit_id=TRY_KEY,
        reuse_commit=True,
    )
    assert retried["reused_earlier_commit"] is True and retried["snapshot_id"] == deleted["snapshot_id"]

    rows = lake.rows(table)
    nothing = delete_from(
        spark, action_specs.DeleteSpec(table, condition="id = 99").validated(), commit_id="another-task"
    )
    assert (nothing["deleted_records"], nothing["summary"]["airflow-iceberg.commit-id"]) == (
        0,
        "another-task",
    )
    assert lake.rows(table) == rows

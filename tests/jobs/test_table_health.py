"""Health-driven upkeep against the procedures it stands for: the verdict read from metadata with
pyiceberg must agree with what Iceberg's procedure then does on the same table and options.

(The decisions' own cases, on tables pyiceberg writes, are in tests/unit/test_table_health.py;
these need Spark: merge-on-read deletes, and the procedures themselves.)
"""

from __future__ import annotations

from airflow_iceberg.catalog.table_health import assess
from airflow_iceberg.jobs.merges import delete_from
from airflow_iceberg.jobs.spec.row_changes import DeleteSpec
from airflow_iceberg.jobs.spec.upkeep import RewriteDataFilesSpec, RewritePositionDeletesSpec
from airflow_iceberg.jobs.upkeep import rewrite_data_files, rewrite_position_deletes
from airflow_iceberg.jobs.writes import write_table
from tests.jobs.helpers import values_query, write_spec

COMPACT, DELETES = "rewrite_data_files", "rewrite_position_delete_files"


def _compact(spark, table, options):
    return rewrite_data_files(spark, RewriteDataFilesSpec(table, options=options).validated())


def test_small_files_are_judged_needing_compaction_exactly_when_the_procedure_compacts(spark, lake, table):
    write_table(spark, write_spec(table, "create", values_query([(0, "d0")], "id, day")))
    for batch in range(1, 5):
        write_table(spark, write_spec(table, "append", values_query([(batch, "d1")], "id, day")))
    rows, files = lake.rows(table), lake.data_files(table)

    # One more file than there are: healthy, and the procedure with that option agrees.
    too_few = {"min-input-files": "6"}
    verdict = assess(lake.load(table), options=too_few, steps=[COMPACT])["steps"][COMPACT]
    assert verdict["needed"] is False
    assert _compact(spark, table, too_few)["rewritten_data_files_count"] == 0

    enough = {"min-input-files": "2"}
    report = assess(lake.load(table), options=enough, steps=[COMPACT])
    assert report["steps"][COMPACT]["needed"] is True
    assert report["measured"]["small_data_files"] == len(files) == 5
    result = _compact(spark, table, enough)

    assert result["rewritten_data_files_count"] == 5 and len(lake.data_files(table)) == 1  # fewer files
    assert lake.rows(table) == rows  # same rows
    after = assess(lake.load(table), options=enough, steps=[COMPACT])["steps"][COMPACT]
    assert after["needed"] is False  # and healthy now


def test_file_scoped_deletes_past_the_ratio_need_compaction_and_few_delete_files_do_not(spark, lake, table):
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
    data_files = len(lake.data_files(table))
    assert data_files == 2, "the create must have written two files of three rows"

    report = assess(lake.load(table), steps=[COMPACT, DELETES])
    measured = report["measured"]
    assert (measured["position_delete_files"], measured["deleted_records"], measured["data_records"]) == (
        2,
        2,
        6,
    )
    # Each file lost a third of its rows: past Iceberg's delete-ratio-threshold (0.3), so the
    # bin-pack planner rewrites them although they are fewer than min-input-files.
    assert report["steps"][COMPACT]["needed"] is True
    # Two small delete files are fewer than min-input-files (5): the delete-file rewrite has nothing to do.
    assert report["steps"][DELETES]["needed"] is False
    untouched = rewrite_position_deletes(spark, RewritePositionDeletesSpec(table).validated())
    assert untouched["rewritten_delete_files_count"] == 0
    # With min-input-files 2 the health check says it is needed, and the procedure does rewrite them.
    two = {"min-input-files": "2"}
    assert assess(lake.load(table), delete_options=two, steps=[DELETES])["steps"][DELETES]["needed"] is True
    assert assess(lake.load(table), options=two, steps=[DELETES])["steps"][DELETES]["needed"] is False
    compacted = rewrite_position_deletes(spark, RewritePositionDeletesSpec(table, options=two).validated())
    assert compacted["rewritten_delete_files_count"] == 2

    rows = lake.rows(table)
    assert _compact(spark, table, {})["rewritten_data_files_count"] == data_files
    assert lake.rows(table) == rows and [r["id"] for r in rows] == [0, 2, 3, 5]
    healthy = assess(lake.load(table), steps=[COMPACT, DELETES])
    assert (healthy["measured"]["deleted_records"], healthy["steps"][COMPACT]["needed"]) == (0, False)

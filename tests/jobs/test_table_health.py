"""Health-driven upkeep against the procedures it stands for: the verdict read from metadata with
pyiceberg must agree with what Iceberg's procedure then does on the same table and options.

(The decisions' own cases, on tables pyiceberg writes, are in tests/unit/test_table_health.py;
these need Spark: merge-on-read deletes, and the procedures themselves.)
"""

from __future__ import annotations

import time

from airflow_iceberg.catalog.table_health import assess
from airflow_iceberg.jobs.merges import delete_from
from airflow_iceberg.jobs.spec.row_changes import DeleteSpec
from airflow_iceberg.jobs.spec.upkeep import (
    ExpireSnapshotsSpec,
    RewriteDataFilesSpec,
    RewritePositionDeletesSpec,
)
from airflow_iceberg.jobs.upkeep import expire_snapshots, rewrite_data_files, rewrite_position_deletes
from airflow_iceberg.jobs.writes import write_table
from tests.jobs.helpers import values_query, write_spec

COMPACT, DELETES, EXPIRE = "rewrite_data_files", "rewrite_position_delete_files", "expire_snapshots"


def _compact(spark, table, options):
    return rewrite_data_files(spark, RewriteDataFilesSpec(table, options=options).validated())


def two_files_with_a_row_deleted_from_each(spark, table: str, format_version: str = "2") -> None:
    """Six rows in two files of a merge-on-read table, then one row of each deleted: position deletes
    (on format v3, one deletion vector per file)."""
    write_table(
        spark,
        write_spec(
            table,
            "create",
            values_query([(i, "d") for i in range(6)], "id, day"),
            table_properties={
                "format-version": format_version,
                "write.delete.mode": "merge-on-read",
                "write.distribution-mode": "none",
            },
        ),
    )
    for condition in ("id = 1", "id = 4"):  # a row of each data file: position deletes, not file drops
        delete_from(spark, DeleteSpec(table, condition=condition).validated())


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
    two_files_with_a_row_deleted_from_each(spark, table)
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


# --- Review findings: table states where the verdict and the procedure disagree. ---


def _small_files(spark, table, rows, partitioned_by=None, properties=None):
    """One small file per row (each an INSERT of its own)."""
    partitioning = f" PARTITIONED BY ({partitioned_by})" if partitioned_by else ""
    props = ", ".join(f"'{k}' = '{v}'" for k, v in (properties or {}).items())
    tblprops = f" TBLPROPERTIES ({props})" if props else ""
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, day STRING, note STRING) USING iceberg{partitioning}{tblprops}"
    )
    for row in rows:
        spark.sql(f"INSERT INTO {table} VALUES {row}")


def _java_table(spark, table):
    jvm = spark.sparkContext._jvm
    return jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)


def test_files_of_an_old_partition_spec_are_one_group_as_iceberg_plans_them(spark, lake, table):
    # Five small files, one in each of five day partitions; then the spec drops the day.
    _small_files(spark, table, [f"({i}, 'd{i}', 'n')" for i in range(5)], partitioned_by="day")
    spark.sql(f"ALTER TABLE {table} DROP PARTITION FIELD day")
    verdict = assess(lake.load(table), steps=[COMPACT])["steps"][COMPACT]
    # Iceberg's planner puts every file of an older spec into one group (groupByPartition):
    # five files >= min-input-files, so the procedure rewrites them.
    result = _compact(spark, table, {})
    assert result["rewritten_data_files_count"] == 5
    assert verdict["needed"] is True, verdict


def test_rewrite_all_is_judged_as_the_procedure_applies_it(spark, lake, table):
    _small_files(spark, table, ["(1, 'd', 'n')"])
    verdict = assess(lake.load(table), options={"rewrite-all": "true"}, steps=[COMPACT])["steps"][COMPACT]
    assert _compact(spark, table, {"rewrite-all": "true"})["rewritten_data_files_count"] == 1
    assert verdict["needed"] is True, verdict


def test_a_where_on_a_column_named_in_another_case_is_read_as_spark_reads_it(spark, lake, table):
    _small_files(spark, table, [f"({i}, 'd', 'n')" for i in range(5)])
    verdict = assess(lake.load(table), where="ID >= 0", steps=[COMPACT])["steps"][COMPACT]
    assert verdict["needed"] is True
    assert _compact_where(spark, table, "ID >= 0")["rewritten_data_files_count"] == 5


def _compact_where(spark, table, where, options=None):
    spec = RewriteDataFilesSpec(table, where=where, options=options or {}).validated()
    return rewrite_data_files(spark, spec)


def test_the_word_date_inside_a_quoted_string_of_the_where_is_left_alone(spark, lake, table):
    _small_files(spark, table, [f"({i}, 'd', 'UP TO DATE')" for i in range(5)])
    where = "note = 'UP TO DATE'"
    verdict = assess(lake.load(table), where=where, steps=[COMPACT])["steps"][COMPACT]
    assert _compact_where(spark, table, where)["rewritten_data_files_count"] == 5
    assert verdict["needed"] is True, verdict


def test_max_file_group_size_splits_a_partition_into_groups_judged_one_by_one(spark, lake, table):
    _small_files(spark, table, [f"({i}, 'd', 'n')" for i in range(5)])
    largest = max(f.file_size_in_bytes for f in lake.data_files(table))
    options = {"max-file-group-size-bytes": str(2 * largest)}  # groups of two files at most
    verdict = assess(lake.load(table), options=options, steps=[COMPACT])["steps"][COMPACT]
    assert _compact(spark, table, options)["rewritten_data_files_count"] == 0
    assert verdict["needed"] is False, verdict


def test_deletes_of_compacted_files_are_judged_as_the_delete_rewrite_plans_them(spark, lake, table):
    two_files_with_a_row_deleted_from_each(spark, table)
    assert _compact(spark, table, {})["rewritten_data_files_count"] == 2  # the deletes now dangle
    two = {"min-input-files": "2"}
    verdict = assess(lake.load(table), delete_options=two, steps=[DELETES])["steps"][DELETES]
    result = rewrite_position_deletes(spark, RewritePositionDeletesSpec(table, options=two).validated())
    # Held: the data rewrite dropped the file-scoped deletes of the files it rewrote, so neither
    # the verdict nor the procedure finds delete files to compact.
    assert (verdict["needed"], result["rewritten_delete_files_count"]) == (False, 0), verdict


def _expire(spark, table, older_than=None, retain_last=None):
    spec = ExpireSnapshotsSpec(table, older_than=older_than, retain_last=retain_last).validated()
    return expire_snapshots(spark, spec)


def test_a_tag_past_its_max_ref_age_keeps_no_snapshot_as_remove_snapshots_drops_it(spark, lake, table):
    _small_files(spark, table, ["(1, 'd', 'n')"])
    spark.sql(f"ALTER TABLE {table} CREATE TAG old")
    spark.sql(f"INSERT INTO {table} VALUES (2, 'd', 'n')")
    _java_table(spark, table).manageSnapshots().setMaxRefAgeMs("old", 1).commit()
    now = int(time.time() * 1000) + 1000
    verdict = assess(lake.load(table), older_than=now, retain_last=1, steps=[EXPIRE])["steps"][EXPIRE]
    assert _expire(spark, table, older_than=now, retain_last=1)["expired_snapshots_count"] == 1
    assert verdict["needed"] is True, verdict


def test_a_branch_s_own_max_snapshot_age_expires_its_snapshots_younger_than_older_than(spark, lake, table):
    _small_files(spark, table, ["(1, 'd', 'n')"])
    spark.sql(f"ALTER TABLE {table} CREATE BRANCH b")
    for i in (2, 3):
        spark.sql(f"INSERT INTO {table}.branch_b VALUES ({i}, 'd', 'n')")
    _java_table(spark, table).manageSnapshots().setMaxSnapshotAgeMs("b", 1).commit()
    # older_than is Iceberg's default, five days ago: every snapshot is younger; but branch b
    # keeps only what its own max-snapshot-age (1 ms) and its last snapshot allow.
    verdict = assess(lake.load(table), steps=[EXPIRE])["steps"][EXPIRE]
    assert _expire(spark, table)["expired_snapshots_count"] == 1
    assert verdict["needed"] is True, verdict


def test_deletion_vectors_past_the_ratio_need_compaction_as_the_procedure_judges_them(spark, lake, table):
    two_files_with_a_row_deleted_from_each(spark, table, format_version="3")
    assert len(lake.data_files(table)) == 2
    report = assess(lake.load(table), steps=[COMPACT])
    # On v3 the delete rewrite only turns v2 delete files into vectors: with vectors only, nothing.
    two = {"min-input-files": "2"}
    deletes = assess(lake.load(table), delete_options=two, steps=[DELETES])["steps"][DELETES]
    result = rewrite_position_deletes(spark, RewritePositionDeletesSpec(table, options=two).validated())
    assert (deletes["needed"], result.get("rewritten_delete_files_count", 0)) == (False, 0), deletes
    assert _compact(spark, table, {})["rewritten_data_files_count"] == 2
    assert report["steps"][COMPACT]["needed"] is True, report


def test_the_delete_rewrite_selects_delete_files_by_partition_only_as_iceberg_does(spark, lake, table):
    two_files_with_a_row_deleted_from_each(spark, table)
    # No data file holds an id over 100 (their bounds say so), but the position-delete planner
    # filters delete files by the where's projection on the partition (here: all of them).
    where, two = "id > 100", {"min-input-files": "2"}
    verdict = assess(lake.load(table), where=where, delete_options=two, steps=[DELETES])["steps"][DELETES]
    spec = RewritePositionDeletesSpec(table, where=where, options=two).validated()
    assert rewrite_position_deletes(spark, spec)["rewritten_delete_files_count"] == 2
    assert verdict["needed"] is True, verdict

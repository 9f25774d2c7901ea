"""Table properties and Iceberg write options, each checked for its effect with pyiceberg."""

from __future__ import annotations

import re

import pytest

from airflow_iceberg.jobs import writes
from airflow_iceberg.jobs.iceberg_job import describe_error
from airflow_iceberg.jobs.table_state import SnapshotNotFoundError
from airflow_iceberg.jobs.writes import write_table
from tests.jobs.helpers import values_query, write_spec

ROWS = values_query([(1, "a"), (2, "b")], "id, part")
#: One Spark task with 5000 rows: Iceberg checks the file size every 1000 rows.
MANY_ROWS_ONE_TASK = "SELECT /*+ REPARTITION(1) */ id, repeat('x', 50) AS pad FROM range(5000) AS r(id)"


@pytest.mark.parametrize("version", [1, 2])
def test_format_version_property(spark, lake, table, version):
    write_table(spark, write_spec(table, "create", ROWS, table_properties={"format-version": str(version)}))
    assert lake.load(table).metadata.format_version == version


def test_default_file_format_property(spark, lake, table):
    write_table(spark, write_spec(table, "create", ROWS, table_properties={"write.format.default": "avro"}))
    assert lake.load(table).properties["write.format.default"] == "avro"
    files = lake.data_files(table)
    assert {f.file_format.value for f in files} == {"AVRO"}
    assert sum(f.record_count for f in files) == 2


@pytest.mark.parametrize("file_format", ["parquet", "avro", "orc"])
def test_write_format_option_sets_the_data_file_format(spark, lake, table, file_format):
    write_table(spark, write_spec(table, "create", ROWS))
    before = {f.file_path for f in lake.data_files(table)}
    write_table(
        spark,
        write_spec(
            table, "append", values_query([(3, "c")], "id, part"), write_options={"write-format": file_format}
        ),
    )

    added = [f for f in lake.data_files(table) if f.file_path not in before]
    assert [(f.file_format.value, f.record_count) for f in added] == [(file_format.upper(), 1)]
    if file_format != "avro":  # pyiceberg's scan reads Parquet and ORC data files, not Avro
        assert lake.ids(table) == [1, 2, 3]


def test_target_file_size_bytes_rolls_files(spark, lake, new_table):
    small, default = new_table("small"), new_table("default")
    write_table(
        spark, write_spec(small, "create", MANY_ROWS_ONE_TASK, write_options={"target-file-size-bytes": "1"})
    )
    write_table(spark, write_spec(default, "create", MANY_ROWS_ONE_TASK))

    assert len(lake.data_files(default)) == 1
    assert len(lake.data_files(small)) > 1
    assert lake.ids(small) == list(range(5000))


def test_snapshot_property_lands_in_the_summary(spark, lake, table):
    write_table(
        spark, write_spec(table, "create", ROWS, write_options={"snapshot-property.source-system": "crm"})
    )
    assert lake.summary(table)["source-system"] == "crm"


#: Spark resolves a writer's columns itself (by name, adding null checks) unless the table accepts
#: any schema; then Iceberg's own checks decide, and check-nullability / check-ordering matter.
ACCEPTS_ANY_SCHEMA = "TBLPROPERTIES ('write.spark.accept-any-schema'='true')"


@pytest.mark.parametrize("check_nullability", ["true", "false"])
def test_check_nullability_decides_whether_a_nullable_column_may_fill_a_required_one(
    spark, lake, table, check_nullability
):
    spark.sql(f"CREATE TABLE {table} (id INT NOT NULL, part STRING) USING iceberg {ACCEPTS_ANY_SCHEMA}")
    # CAST makes the source column nullable, although no value is null.
    source = "SELECT CAST(x AS INT) AS id, 'a' AS part FROM VALUES ('1'), ('2') AS v(x)"
    spec = write_spec(table, "append", source, write_options={"check-nullability": check_nullability})
    before = lake.state(table)

    if check_nullability == "true":
        with pytest.raises(Exception) as raised:
            write_table(spark, spec)
        assert "id should be required, but is optional" in str(raised.value)
        assert lake.state(table) == before
    else:
        write_table(spark, spec)
        assert lake.ids(table) == [1, 2]
    assert lake.load(table).schema().find_field("id").required


def test_a_null_into_a_required_column_fails_and_commits_nothing(spark, lake, table):
    spark.sql(f"CREATE TABLE {table} (id INT NOT NULL, part STRING) USING iceberg")
    before = lake.state(table)
    with pytest.raises(Exception) as raised:
        write_table(spark, write_spec(table, "append", "SELECT CAST(NULL AS INT) AS id, 'a' AS part"))
    # Spark 3.5 says "Null value ...", Spark 4 "[NOT_NULL_ASSERT_VIOLATION] NULL value ...: \nid"
    assert re.search(r"null value appeared in non-nullable field:? id\b", describe_error(raised.value), re.I)
    assert lake.state(table) == before


def test_fanout_writer_handles_unclustered_partitions(spark, lake, table):
    spark.sql(f"CREATE TABLE {table} (id BIGINT, part BIGINT) USING iceberg PARTITIONED BY (part)")
    source = "SELECT /*+ REPARTITION(1) */ id, id % 3 AS part FROM range(30) AS r(id)"

    write_table(
        spark,
        write_spec(
            table, "append", source, write_options={"fanout-enabled": "true", "distribution-mode": "none"}
        ),
    )

    assert lake.ids(table) == list(range(30))
    assert sorted(f.partition[0] for f in lake.data_files(table)) == [0, 1, 2]


@pytest.mark.parametrize("check_ordering", ["true", "false"])
def test_check_ordering_decides_whether_columns_may_come_in_another_order(spark, lake, table, check_ordering):
    spark.sql(f"CREATE TABLE {table} (id INT, part STRING) USING iceberg {ACCEPTS_ANY_SCHEMA}")
    spec = write_spec(
        table, "append", "SELECT 'z' AS part, 26 AS id", write_options={"check-ordering": check_ordering}
    )
    before = lake.state(table)

    if check_ordering == "true":
        with pytest.raises(Exception) as raised:
            write_table(spark, spec)
        assert "out of order" in str(raised.value)
        assert lake.state(table) == before
    else:
        write_table(spark, spec)
        assert lake.rows(table) == [{"id": 26, "part": "z"}]  # matched by name


@pytest.fixture
def raced(spark, lake, table):
    """A partitioned table where a concurrent append landed in partition 'b' after ``base`` was read."""
    write_table(spark, write_spec(table, "create", ROWS, partition_by=("part",)))
    base = lake.current_snapshot_id(table)
    write_table(spark, write_spec(table, "append", values_query([(3, "b")], "id, part")))
    return table, base


@pytest.mark.parametrize("mode", ["overwrite_partitions", "overwrite"])
def test_serializable_isolation_rejects_a_concurrent_append_and_commits_nothing(spark, lake, raced, mode):
    table, base = raced
    before = lake.state(table)
    spec = write_spec(
        table,
        mode,
        values_query([(20, "b")], "id, part"),
        condition="part = 'b'" if mode == "overwrite" else None,
        write_options={"isolation-level": "serializable", "validate-from-snapshot-id": str(base)},
    )

    with pytest.raises(Exception) as raised:
        write_table(spark, spec)

    assert describe_error(raised.value).startswith("ValidationException: Found conflicting files")
    assert lake.state(table) == before


def test_a_refused_overwrite_is_refused_again_by_its_retry_until_given_a_newer_snapshot(spark, lake, raced):
    table, base = raced
    before = lake.state(table)

    def correction(validate_from: int):
        options = {"isolation-level": "serializable", "validate-from-snapshot-id": str(validate_from)}
        return write_spec(
            table, "overwrite_partitions", values_query([(20, "b")], "id, part"), write_options=options
        )

    for _ in ("the try", "Airflow's retry of it"):
        with pytest.raises(Exception) as raised:
            write_table(spark, correction(base), commit_id="correct:b", reuse_commit=True)
        assert describe_error(raised.value).startswith("ValidationException: Found conflicting files")
        assert lake.state(table) == before

    write_table(spark, correction(lake.current_snapshot_id(table)), commit_id="correct:b", reuse_commit=True)
    assert [(r["id"], r["part"]) for r in lake.rows(table)] == [(1, "a"), (20, "b")]


@pytest.mark.parametrize("mode", ["overwrite_partitions", "overwrite"])
def test_snapshot_isolation_allows_a_concurrent_append(spark, lake, raced, mode):
    table, base = raced
    spec = write_spec(
        table,
        mode,
        values_query([(20, "b")], "id, part"),
        condition="part = 'b'" if mode == "overwrite" else None,
        write_options={"isolation-level": "snapshot", "validate-from-snapshot-id": str(base)},
    )

    write_table(spark, spec)

    assert [(r["id"], r["part"]) for r in lake.rows(table)] == [(1, "a"), (20, "b")]


def test_serializable_isolation_from_the_current_snapshot_commits(spark, lake, raced):
    table, _ = raced
    current = lake.current_snapshot_id(table)
    write_table(
        spark,
        write_spec(
            table,
            "overwrite_partitions",
            values_query([(20, "b")], "id, part"),
            write_options={"isolation-level": "serializable", "validate-from-snapshot-id": str(current)},
        ),
    )
    assert lake.snapshot(table, lake.current_snapshot_id(table)).parent_snapshot_id == current


def test_unknown_validate_from_snapshot_is_caught_before_writing(spark, lake, raced):
    table, _ = raced
    before = lake.state(table)
    with pytest.raises(
        SnapshotNotFoundError, match=f"validate-from-snapshot-id 123 is not a snapshot of table {table}"
    ):
        write_table(
            spark,
            write_spec(
                table,
                "overwrite_partitions",
                ROWS,
                write_options={"isolation-level": "serializable", "validate-from-snapshot-id": "123"},
            ),
        )
    assert lake.state(table) == before


def _another_writer_commits_while_the_job_runs(monkeypatch, spark, table: str, row: str) -> None:
    """The next write's source, once read, is followed by another writer's commit of ``row``."""
    load_source = writes.load_source

    def load_then_another_writer_commits(*args, **kwargs):
        frame = load_source(*args, **kwargs)
        monkeypatch.setattr(writes, "load_source", load_source)  # one commit, for the next write only
        spark.sql(f"INSERT INTO {table} VALUES {row}")
        return frame

    monkeypatch.setattr(writes, "load_source", load_then_another_writer_commits)


@pytest.mark.parametrize("mode", ["overwrite_partitions", "overwrite"])
def test_isolation_level_alone_fails_a_write_only_when_a_conflict_lands_while_it_runs(
    spark, lake, table, mode, monkeypatch
):
    """No validate-from-snapshot-id: the job pins it to main's head before it reads its source."""
    write_table(spark, write_spec(table, "create", ROWS, partition_by=("part",)))
    spec = write_spec(
        table,
        mode,
        values_query([(20, "b")], "id, part"),
        condition="part = 'b'" if mode == "overwrite" else None,
        write_options={"isolation-level": "serializable"},
    )
    write_table(spark, spec)  # nothing landed meanwhile: the overwritten rows' own files are no conflict
    assert [(r["id"], r["part"]) for r in lake.rows(table)] == [(1, "a"), (20, "b")]
    head = lake.current_snapshot_id(table)

    _another_writer_commits_while_the_job_runs(monkeypatch, spark, table, "(3, 'b')")
    with pytest.raises(Exception) as raised:
        write_table(spark, spec)

    assert describe_error(raised.value).startswith("ValidationException: Found conflicting files")
    [landed] = [s for s in lake.snapshots(table) if s.parent_snapshot_id == head]
    assert lake.current_snapshot_id(table) == landed.snapshot_id  # only the other writer's commit
    assert [(r["id"], r["part"]) for r in lake.rows(table)] == [(1, "a"), (3, "b"), (20, "b")]


def test_by_default_an_overwrite_commits_over_a_change_that_landed_while_it_ran(
    spark, lake, table, monkeypatch
):
    """Last writer wins: without isolation-level nothing is validated."""
    write_table(spark, write_spec(table, "create", ROWS, partition_by=("part",)))
    _another_writer_commits_while_the_job_runs(monkeypatch, spark, table, "(3, 'b')")

    correction = values_query([(20, "b")], "id, part")
    result = write_table(spark, write_spec(table, "overwrite_partitions", correction))

    landed = lake.snapshot(table, result["parent_snapshot_id"])
    assert lake.summary(table, landed.snapshot_id)["operation"] == "append"  # the other writer's, under it
    assert [(r["id"], r["part"]) for r in lake.rows(table)] == [(1, "a"), (20, "b")]  # its row replaced

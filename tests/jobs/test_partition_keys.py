"""The partitions a commit changed, as Airflow partition keys, and a partition key as a filter.

Each key set is checked against the partitions pyiceberg finds in the manifest entries the
snapshot wrote (ADDED or DELETED), read from the warehouse, not through Spark.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from airflow_iceberg.jobs.iceberg_job import run
from airflow_iceberg.jobs.partitions import (
    changed_partition_keys,
    changed_partitions,
    described_spec,
    partition_key_of,
)
from airflow_iceberg.jobs.spec.partition_keys import partition_condition
from airflow_iceberg.jobs.spec.request import JobRequest
from airflow_iceberg.jobs.table_state import SchemaMismatchError
from airflow_iceberg.jobs.writes import write_table
from tests.jobs.helpers import read_spec, values_query, write_spec

EVENTS = "id INT, event_ts TIMESTAMP, region STRING"
HOURS = [  # two rows in 05:00, one in 06:00 and one in 07:00 of 2024-01-02, one the next day
    (1, "TIMESTAMP'2024-01-02 05:10:00'", "eu"),
    (2, "TIMESTAMP'2024-01-02 05:50:00'", "us"),
    (3, "TIMESTAMP'2024-01-02 06:00:00'", "eu"),
    (4, "TIMESTAMP'2024-01-02 07:59:59'", "eu"),
    (5, "TIMESTAMP'2024-01-03 00:00:00'", "us"),
]


def _events(rows: list[tuple]) -> str:
    return values_query([(i, _Raw(ts), region) for i, ts, region in rows], "id, event_ts, region")


class _Raw(str):
    """A SQL literal that values_query must not quote."""


def _changed_paths(lake, table: str, snapshot_id: int) -> set[str]:
    """pyiceberg: the partition paths of the entries ``snapshot_id`` added or deleted."""
    from pyiceberg.manifest import ManifestEntryStatus

    loaded = lake.load(table)
    spec, schema = loaded.spec(), loaded.schema()
    paths = set()
    for manifest in loaded.snapshot_by_id(snapshot_id).manifests(loaded.io):
        for entry in manifest.fetch_manifest_entry(loaded.io, discard_deleted=False):
            if entry.snapshot_id == snapshot_id and entry.status != ManifestEntryStatus.EXISTING:
                paths.add(spec.partition_to_path(entry.data_file.partition, schema))
    return paths


def _changed_values(lake, table: str, snapshot_id: int) -> set[tuple]:
    """pyiceberg: the partition values of the entries ``snapshot_id`` added or deleted."""
    from pyiceberg.manifest import ManifestEntryStatus

    loaded = lake.load(table)
    values = set()
    for manifest in loaded.snapshot_by_id(snapshot_id).manifests(loaded.io):
        for entry in manifest.fetch_manifest_entry(loaded.io, discard_deleted=False):
            if entry.snapshot_id == snapshot_id and entry.status != ManifestEntryStatus.EXISTING:
                partition = entry.data_file.partition
                values.add(tuple(partition[i] for i in range(len(partition))))
    return values


@pytest.fixture(autouse=True)
def _literal_values(monkeypatch):
    from tests.jobs import helpers

    original = helpers._literal
    monkeypatch.setattr(helpers, "_literal", lambda v: v if isinstance(v, _Raw) else original(v))


def test_a_create_and_an_append_report_the_hours_they_wrote(spark, lake, table):
    created = write_table(
        spark, write_spec(table, "create", _events(HOURS[:3]), partition_by=("hours(event_ts)",))
    )
    appended = write_table(spark, write_spec(table, "append", _events(HOURS[3:])))

    assert changed_partition_keys(spark, table, created["snapshot_id"]) == ["2024-01-02T05", "2024-01-02T06"]
    assert changed_partition_keys(spark, table, appended["snapshot_id"]) == ["2024-01-02T07", "2024-01-03T00"]
    assert _changed_paths(lake, table, appended["snapshot_id"]) == {
        "event_ts_hour=2024-01-02-07",
        "event_ts_hour=2024-01-03-00",
    }


def test_an_overwrite_reports_the_partitions_it_deleted_and_the_ones_it_added(spark, lake, table):
    write_table(spark, write_spec(table, "create", _events(HOURS), partition_by=("days(event_ts)",)))
    replaced = write_table(
        spark,
        write_spec(
            table,
            "overwrite",
            _events([(9, "TIMESTAMP'2024-01-04 12:00:00'", "eu")]),
            condition="event_ts < TIMESTAMP'2024-01-03 00:00:00'",
        ),
    )

    keys = changed_partition_keys(spark, table, replaced["snapshot_id"])
    assert keys == ["2024-01-02", "2024-01-04"]  # 01-02 emptied, 01-04 new; 01-03 untouched
    assert _changed_paths(lake, table, replaced["snapshot_id"]) == {f"event_ts_day={key}" for key in keys}


@pytest.mark.parametrize(
    ("partition_by", "keys"),
    [
        (("months(event_ts)",), ["2024-01"]),
        (("years(event_ts)",), ["2024"]),
        (("days(event_ts)", "bucket(4, id)"), ["2024-01-02", "2024-01-03"]),  # the time field only
        (("bucket(4, id)", "region"), ["eu", "us"]),  # no time field: the identity field
        (("region", "hours(event_ts)"), ["2024-01-02T05", "2024-01-02T06", "2024-01-02T07", "2024-01-03T00"]),
        (("bucket(4, id)",), []),  # a bucket alone names no partition a run can stand for
        ((), []),
    ],
)
def test_the_key_comes_from_the_time_field_else_the_identity_fields(spark, lake, table, partition_by, keys):
    created = write_table(spark, write_spec(table, "create", _events(HOURS), partition_by=partition_by))

    assert changed_partition_keys(spark, table, created["snapshot_id"]) == keys
    assert len(_changed_paths(lake, table, created["snapshot_id"])) >= len(keys)


def test_an_identity_date_partition_and_two_time_fields_make_a_composite_key(spark, table):
    query = "SELECT 1 AS id, DATE'2024-01-02' AS day, TIMESTAMP'2024-01-05 03:00:00' AS shipped"
    created = write_table(spark, write_spec(table, "create", query, partition_by=("day", "hours(shipped)")))

    assert changed_partition_keys(spark, table, created["snapshot_id"]) == ["2024-01-02|2024-01-05T03"]


def test_the_spec_described_over_connect_names_the_default_fields(spark, table):
    """Spark Connect has no JVM for the spec: DESCRIBE TABLE's transforms give the same keys."""
    write_table(
        spark,
        write_spec(
            table, "create", _events(HOURS), partition_by=("hours(event_ts)", "bucket(4, id)", "region")
        ),
    )

    fields = described_spec(spark, table)

    assert fields == [("event_ts_hour", "hour"), ("id_bucket", "bucket"), ("region", "identity")]
    assert (
        partition_key_of(fields, {"event_ts_hour": 473381, "id_bucket": 2, "region": "eu"}) == "2024-01-02T05"
    )


def test_the_job_adds_the_keys_only_when_asked(spark, table):
    spec = write_spec(table, "create", _events(HOURS[:2]), partition_by=("hours(event_ts)",))
    asked = run(spark, JobRequest(spec=spec, commit_id="c1", partition_keys=True))
    appended = run(spark, JobRequest(spec=write_spec(table, "append", _events(HOURS[2:3])), commit_id="c2"))

    assert asked["partition_keys"] == ["2024-01-02T05"]
    assert "partition_keys" not in appended


def test_a_read_with_a_sink_reports_the_sinks_partitions_not_the_read_snapshots(spark, table, new_table):
    sink = new_table("sink")
    write_table(spark, write_spec(table, "create", _events(HOURS), partition_by=("hours(event_ts)",)))
    filter_ = partition_condition("2024-01-03", "event_ts")
    spec = read_spec(table, filter=filter_, sink_table=sink, sink_mode="create")

    result = run(spark, JobRequest(spec=spec, commit_id="c3", partition_keys=True))

    assert "partition_keys" not in result  # the read's own snapshot changed nothing
    assert result["sink"]["partition_keys"] == []  # the sink is unpartitioned


# ---------------------------------------------------------------- a key as the partition's rows


def test_a_day_key_reads_exactly_that_days_hourly_partitions(spark, lake, table):
    write_table(spark, write_spec(table, "create", _events(HOURS), partition_by=("hours(event_ts)",)))

    day = read_table_rows(spark, table, partition_condition("2024-01-02", "event_ts"))
    hour = read_table_rows(spark, table, partition_condition("2024-01-02T05", "event_ts"))

    expected_day = [r["id"] for r in lake.rows(table) if r["event_ts"].date().isoformat() == "2024-01-02"]
    assert day == expected_day == [1, 2, 3, 4]
    assert hour == [1, 2]


def test_a_key_selects_a_date_column_too(spark, table):
    query = (
        "SELECT * FROM VALUES (1, DATE'2024-01-31'), (2, DATE'2024-02-01'), (3, DATE'2024-02-29') AS v(id, d)"
    )
    write_table(spark, write_spec(table, "create", query, partition_by=("days(d)",)))

    assert read_table_rows(spark, table, partition_condition("2024-02", "d")) == [2, 3]
    assert read_table_rows(spark, table, partition_condition("2024-01-31", "d")) == [1]


def test_an_overwrite_by_key_replaces_exactly_that_partition(spark, lake, table):
    write_table(spark, write_spec(table, "create", _events(HOURS), partition_by=("days(event_ts)",)))
    condition = partition_condition("2024-01-02", "event_ts")
    source = _events([(7, "TIMESTAMP'2024-01-02 23:00:00'", "eu")])

    replaced = write_table(
        spark, write_spec(table, "overwrite", source, condition=condition, source_within_condition=True)
    )

    assert sorted(lake.ids(table)) == [5, 7]  # the next day's row 5 kept
    assert changed_partition_keys(spark, table, replaced["snapshot_id"]) == ["2024-01-02"]


def test_an_overwrite_by_key_refuses_rows_of_another_partition_and_changes_nothing(spark, lake, table):
    write_table(spark, write_spec(table, "create", _events(HOURS), partition_by=("days(event_ts)",)))
    before = lake.state(table)
    source = _events([(7, "TIMESTAMP'2024-01-05 01:00:00'", "eu")])

    condition = partition_condition("2024-01-02", "event_ts")

    with pytest.raises(SchemaMismatchError, match="rows outside the partition being overwritten"):
        write_table(
            spark, write_spec(table, "overwrite", source, condition=condition, source_within_condition=True)
        )

    assert lake.state(table) == before


def test_an_overwrite_by_key_whose_source_changes_after_its_check_commits_nothing(
    spark, lake, table, tmp_path, monkeypatch
):
    """The check and the write are two scans: a source read again (an uncached Iceberg table another
    writer commits to, JDBC) may hold another day's row by the write's. Injected: the row moves to
    2024-01-05 the moment the check has passed."""
    from pyspark.sql import functions as F

    from airflow_iceberg.jobs import writes

    write_table(spark, write_spec(table, "create", _events(HOURS), partition_by=("days(event_ts)",)))
    before = lake.state(table)
    moved = tmp_path / "moved"

    def event_ts():
        return datetime(2024, 1, 5, 12) if moved.exists() else datetime(2024, 1, 2, 12)

    spark.udf.register("changing_event_ts", F.udf(event_ts, "timestamp").asNondeterministic())
    checked = writes.check_source_within_condition

    def check_then_commit_to_the_source(df, condition):
        checked(df, condition)  # passes: the row is on 2024-01-02
        moved.touch()

    monkeypatch.setattr(writes, "check_source_within_condition", check_then_commit_to_the_source)
    source = "SELECT 7 AS id, changing_event_ts() AS event_ts, 'eu' AS region"
    condition = partition_condition("2024-01-02", "event_ts")

    with pytest.raises(SchemaMismatchError, match=r"^the source has rows outside the partition being over"):
        write_table(
            spark, write_spec(table, "overwrite", source, condition=condition, source_within_condition=True)
        )

    assert moved.exists()  # the check ran, and passed
    assert lake.state(table) == before  # pyiceberg: no commit, rows and snapshots unchanged


def test_an_overwrite_by_key_of_a_joined_or_filtered_source_is_guarded_on_the_rows_it_writes(
    spark, lake, table, new_table
):
    """Spark would push a guard it takes for deterministic below the source's join, onto a row of the
    3rd the join drops, and refuse a source of the 2nd only (found by review)."""
    staging, keep = new_table("staging"), new_table("keep")
    write_table(spark, write_spec(staging, "create", _events(HOURS)))  # ids 1-4 on the 2nd, 5 on the 3rd
    write_table(spark, write_spec(keep, "create", "SELECT * FROM VALUES (1), (2) AS v(id)"))
    write_table(spark, write_spec(table, "create", _events(HOURS), partition_by=("days(event_ts)",)))
    condition = partition_condition("2024-01-02", "event_ts")

    for source in (
        f"SELECT s.* FROM {staging} s JOIN {keep} k ON s.id = k.id",
        f"SELECT * FROM {staging} WHERE id IN (SELECT id FROM {keep})",
    ):
        write_table(
            spark, write_spec(table, "overwrite", source, condition=condition, source_within_condition=True)
        )

        rows = lake.load(table).scan().to_arrow().to_pylist()
        assert sorted(row["id"] for row in rows) == [1, 2, 5], source  # pyiceberg: the 2nd replaced


@pytest.fixture
def session_in_new_york(spark):
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    yield
    spark.conf.set("spark.sql.session.timeZone", zone)


@pytest.mark.usefixtures("session_in_new_york")
def test_an_overwrite_by_key_checks_the_source_as_the_timestamp_column_will_hold_it(spark, lake, table):
    """A TIMESTAMP_NTZ source into a TIMESTAMP column is cast by the write in the session's zone:
    22:00 on the 2nd in New York is 03:00 UTC on the 3rd. Checked on its own type, the row passed
    for the 2nd, which the overwrite emptied, and landed in the 3rd."""
    spark.sql(f"CREATE TABLE {table} (id INT, ts TIMESTAMP) USING iceberg PARTITIONED BY (days(ts))")
    spark.sql(f"INSERT INTO {table} VALUES (1, TIMESTAMP'2024-01-02 12:00:00+00:00')")
    before = lake.state(table)
    source = "SELECT 2 AS id, TIMESTAMP_NTZ'2024-01-02 22:00:00' AS ts"
    condition = partition_condition("2024-01-02", "ts")

    with pytest.raises(SchemaMismatchError, match="rows outside the partition being overwritten"):
        write_table(
            spark, write_spec(table, "overwrite", source, condition=condition, source_within_condition=True)
        )

    assert lake.state(table) == before


@pytest.mark.usefixtures("session_in_new_york")
def test_an_overwrite_by_key_takes_a_row_its_timestamp_ntz_column_will_hold_in_that_partition(
    spark, lake, table
):
    """The reverse: a TIMESTAMP source (02:00 UTC on the 3rd) into a TIMESTAMP_NTZ column is written
    as 21:00 on the 2nd, the partition's own: it is taken, and replaces that partition only."""
    spark.sql(f"CREATE TABLE {table} (id INT, ts TIMESTAMP_NTZ) USING iceberg PARTITIONED BY (days(ts))")
    spark.sql(
        f"INSERT INTO {table} VALUES (1, TIMESTAMP_NTZ'2024-01-02 12:00:00'), "
        "(3, TIMESTAMP_NTZ'2024-01-03 12:00:00')"
    )
    source = "SELECT 2 AS id, TIMESTAMP'2024-01-03 02:00:00+00:00' AS ts"

    write_table(
        spark,
        write_spec(
            table,
            "overwrite",
            source,
            condition=partition_condition("2024-01-02", "ts"),
            source_within_condition=True,
        ),
    )

    rows = sorted((row["id"], str(row["ts"])) for row in lake.load(table).scan().to_arrow().to_pylist())
    assert rows == [(2, "2024-01-02 21:00:00"), (3, "2024-01-03 12:00:00")]  # pyiceberg


def read_table_rows(spark, table: str, condition: str) -> list[int]:
    """The ids a read with ``condition`` as its filter returns (the read job's own path)."""
    from airflow_iceberg.jobs.reads import read_table

    result = read_table(spark, read_spec(table, filter=condition, preview_rows=100))
    return sorted(row["id"] for row in result["preview"])


def test_an_hour_key_is_utc_whatever_the_session_time_zone(spark, table):
    write_table(spark, write_spec(table, "create", _events(HOURS), partition_by=("hours(event_ts)",)))
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    try:
        utc_ids = read_table_rows(spark, table, partition_condition("2024-01-02T05", "event_ts"))
        spark.conf.set("spark.sql.session.timeZone", "America/New_York")
        new_york_ids = read_table_rows(spark, table, partition_condition("2024-01-02T05", "event_ts"))
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)

    assert new_york_ids == utc_ids == [1, 2]


def test_a_compaction_by_key_rewrites_only_that_partitions_files(spark, lake, table):
    from airflow_iceberg.jobs.spec.upkeep import RewriteDataFilesSpec
    from airflow_iceberg.jobs.upkeep import rewrite_data_files

    write_table(spark, write_spec(table, "create", _events(HOURS[:1]), partition_by=("days(event_ts)",)))
    for row in [*HOURS[1:2], HOURS[4], HOURS[4]]:  # two small files on each day
        write_table(spark, write_spec(table, "append", _events([row])))
    where = partition_condition("2024-01-02", "event_ts")

    result = rewrite_data_files(
        spark, RewriteDataFilesSpec(table, where=where, options={"min-input-files": "2"}).validated()
    )

    files = {}
    for data_file in lake.data_files(table):
        files.setdefault(data_file.partition[0], []).append(data_file)
    days = sorted(files)  # days since 1970: 2024-01-02 and 2024-01-03
    assert [len(files[day]) for day in days] == [1, 2]  # only 2024-01-02 was compacted
    assert result["rewritten_data_files_count"] == 2
    assert changed_partition_keys(spark, table, result["snapshot_id"]) == ["2024-01-02"]


def test_a_concurrent_commit_to_another_partition_is_not_in_the_keys(spark, lake, table, monkeypatch):
    """Another writer commits between this job's commit and its listing: its hour is not reported."""
    from airflow_iceberg.jobs import writes

    write_table(spark, write_spec(table, "create", _events(HOURS[:1]), partition_by=("hours(event_ts)",)))
    described = writes.result_of_write

    def concurrent_commit_first(*args, **kwargs):
        monkeypatch.setattr(writes, "result_of_write", described)  # the other writer's is plain
        write_table(spark, write_spec(table, "append", _events(HOURS[4:])))  # 2024-01-03T00
        return described(*args, **kwargs)

    monkeypatch.setattr(writes, "result_of_write", concurrent_commit_first)
    ours = run(
        spark,
        JobRequest(
            spec=write_spec(table, "append", _events(HOURS[3:4])), commit_id="ours", partition_keys=True
        ),
    )

    assert lake.current_snapshot_id(table) != ours["snapshot_id"]  # the other commit is newer
    assert ours["partition_keys"] == ["2024-01-02T07"]
    assert _changed_paths(lake, table, ours["snapshot_id"]) == {"event_ts_hour=2024-01-02-07"}


def test_a_retry_that_finds_its_commit_reports_that_commits_partitions(spark, table):
    write_table(spark, write_spec(table, "create", _events(HOURS[:1]), partition_by=("hours(event_ts)",)))
    spec = write_spec(table, "append", _events(HOURS[2:3]))
    first = run(spark, JobRequest(spec=spec, commit_id="try", partition_keys=True))
    write_table(spark, write_spec(table, "append", _events(HOURS[4:])))

    retried = run(spark, JobRequest(spec=spec, commit_id="try", reuse_commit=True, partition_keys=True))

    assert retried["reused_earlier_commit"] and retried["snapshot_id"] == first["snapshot_id"]
    assert retried["partition_keys"] == first["partition_keys"] == ["2024-01-02T06"]


def test_a_merge_and_a_delete_on_main_report_the_partitions_they_changed(spark, table):
    """Their results name the branch they committed to, ``main`` included: main's commits are keyed."""
    from airflow_iceberg.jobs.spec.row_changes import DeleteSpec, MergeSpec
    from airflow_iceberg.jobs.spec.sources import Source

    write_table(spark, write_spec(table, "create", _events(HOURS), partition_by=("days(event_ts)",)))
    source = Source(
        query=_events(
            [(4, "TIMESTAMP'2024-01-02 07:59:59'", "us"), (8, "TIMESTAMP'2024-01-06 01:00:00'", "eu")]
        )
    )
    merge = MergeSpec(table, source=source, keys=("id",)).validated()
    delete = DeleteSpec(table, condition="id = 5").validated()

    merged = run(spark, JobRequest(spec=merge, commit_id="m", partition_keys=True))
    deleted = run(spark, JobRequest(spec=delete, commit_id="d", partition_keys=True))

    assert merged["branch"] == "main" and merged["partition_keys"] == ["2024-01-02", "2024-01-06"]
    assert deleted["partition_keys"] == ["2024-01-03"]


@pytest.fixture
def driver_in_new_york(monkeypatch):
    """The driver's own time zone (TZ), which PySpark turns a TIMESTAMP into a naive datetime by."""
    import time

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("driver_in_new_york")
def test_an_identity_timestamp_partition_is_keyed_in_utc_whatever_the_drivers_time_zone(spark, lake, table):
    """The key's instant is the stored one, in UTC, as Airflow's mappers read a key without offset."""
    query = (
        "SELECT 1 AS id, TIMESTAMP'2024-01-02 05:00:00+00:00' AS ts "
        "UNION ALL SELECT 2, TIMESTAMP'2024-11-03 06:30:00+00:00'"  # 01:30 EDT→EST: the repeated hour
    )
    created = write_table(spark, write_spec(table, "create", query, partition_by=("ts",)))

    keys = changed_partition_keys(spark, table, created["snapshot_id"])

    assert keys == ["2024-01-02T05:00:00", "2024-11-03T06:30:00"]
    assert _changed_paths(lake, table, created["snapshot_id"]) == {
        "ts=2024-01-02T05%3A00%3A00%2B00%3A00",
        "ts=2024-11-03T06%3A30%3A00%2B00%3A00",
    }


def test_values_a_key_cannot_tell_apart_get_no_key_and_are_listed(spark, lake, table):
    """``'eu|x','y'`` and ``'eu','x|y'`` would both key ``eu|x|y``, and the text 'null' like NULL."""
    query = values_query(
        [(1, "eu|x", "y"), (2, "eu", "x|y"), (3, "eu", "fr"), (4, None, "de"), (5, "null", "de")],
        "id, region, country",
    )
    created = write_table(spark, write_spec(table, "create", query, partition_by=("region", "country")))

    changed = changed_partitions(spark, table, created["snapshot_id"])

    assert changed.keys == ["eu|fr", "null|de"]
    assert changed.unkeyable == [
        "region='eu', country='x|y': 'x|y' holds '|', which joins a key's fields",
        "region='eu|x', country='y': 'eu|x' holds '|', which joins a key's fields",
        "region='null', country='de': the text 'null' would key like a NULL value",
    ]
    # pyiceberg: five partitions (Iceberg's own paths, too, name NULL and 'null' alike)
    assert _changed_values(lake, table, created["snapshot_id"]) == {
        ("eu|x", "y"), ("eu", "x|y"), ("eu", "fr"), (None, "de"), ("null", "de")
    }
    appended = JobRequest(spec=write_spec(table, "append", query), commit_id="c2", partition_keys=True)
    result = run(spark, appended)
    assert result["partition_keys"] == ["eu|fr", "null|de"]
    assert len(result["unkeyable_partitions"]) == 3


@pytest.mark.usefixtures("driver_in_new_york")
def test_sub_second_identity_timestamps_keep_their_fraction(spark, lake, table):
    query = (
        "SELECT 1 AS id, TIMESTAMP'2024-01-02 05:00:00+00:00' AS ts "
        "UNION ALL SELECT 2, TIMESTAMP'2024-01-02 05:00:00.5+00:00' "
        "UNION ALL SELECT 3, TIMESTAMP'2024-01-02 05:00:00.000001+00:00'"
    )
    created = write_table(spark, write_spec(table, "create", query, partition_by=("ts",)))

    keys = changed_partition_keys(spark, table, created["snapshot_id"])

    assert keys == ["2024-01-02T05:00:00", "2024-01-02T05:00:00.000001", "2024-01-02T05:00:00.500000"]
    assert len(_changed_paths(lake, table, created["snapshot_id"])) == 3


def _evolved_days_to_hours(spark, table: str) -> dict:
    """A ``days(event_ts)`` table now on ``hours(event_ts)``: an overwrite that empties an old day."""
    write_table(spark, write_spec(table, "create", _events(HOURS[:1]), partition_by=("days(event_ts)",)))
    spark.sql(f"ALTER TABLE {table} REPLACE PARTITION FIELD event_ts_day WITH hours(event_ts)")
    return write_table(
        spark,
        write_spec(
            table,
            "overwrite",
            _events(HOURS[4:]),  # 2024-01-03T00, under the new spec
            condition="event_ts >= TIMESTAMP'2024-01-02 00:00:00' "
            "AND event_ts < TIMESTAMP'2024-01-04 00:00:00'",
        ),
    )


def test_an_evolved_spec_keys_the_old_files_by_the_old_spec(spark, lake, table):
    replaced = _evolved_days_to_hours(spark, table)

    assert changed_partition_keys(spark, table, replaced["snapshot_id"]) == ["2024-01-02", "2024-01-03T00"]


def test_over_connect_a_file_of_an_older_spec_makes_no_null_key(spark, lake, table, monkeypatch):
    """Without a JVM only the current spec is known: an old spec's file must not be keyed 'null'."""
    from airflow_iceberg.jobs import partitions

    replaced = _evolved_days_to_hours(spark, table)
    monkeypatch.setattr(partitions, "driver_table", lambda spark, table: None)  # as over Spark Connect
    commit = {"table": table, "snapshot_id": replaced["snapshot_id"], "branch": "main"}

    partitions.add_partition_keys(spark, [commit])

    assert "partition_keys" not in commit
    assert "event_ts_day" in commit["partition_keys_error"]
    assert _changed_paths(lake, table, replaced["snapshot_id"]) >= {"event_ts_hour=2024-01-03-00"}


def test_over_connect_a_field_renamed_from_its_default_makes_no_null_key(spark, table, monkeypatch):
    from airflow_iceberg.jobs import partitions

    write_table(spark, write_spec(table, "create", _events(HOURS[:1])))
    spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD hours(event_ts) AS hr")
    appended = write_table(spark, write_spec(table, "append", _events(HOURS[2:3])))
    monkeypatch.setattr(partitions, "driver_table", lambda spark, table: None)  # as over Spark Connect
    commit = {"table": table, "snapshot_id": appended["snapshot_id"], "branch": "main"}

    partitions.add_partition_keys(spark, [commit])

    assert "partition_keys" not in commit and "hr" in commit["partition_keys_error"]

"""The argv contract as the job sees it: every option of the matrix survives ``to_argv`` -> ``parse_argv``,
and everything that could escape into SQL or contradict itself is rejected before Spark starts.

These tests need no Spark; they run in the Spark venv because the job parses argv there.
"""

from __future__ import annotations

import pytest

from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.reads import ReadSpec
from airflow_iceberg.jobs.spec.request import JobRequest, parse_argv
from airflow_iceberg.jobs.spec.sources import Source
from airflow_iceberg.jobs.spec.writes import WriteSpec

QUERY = Source(query="SELECT 1 AS id, TIMESTAMP'2024-01-01 00:00:00' AS ts, 'a' AS name")

WRITE_SPECS = [
    WriteSpec("lake.db.t", "create", QUERY),
    WriteSpec("lake.db.t", "replace", QUERY, table_properties={"format-version": "1"}),
    WriteSpec("lake.db.t", "create_or_replace", QUERY, table_properties={"write.format.default": "avro"}),
    WriteSpec("lake.db.t", "append", QUERY),
    WriteSpec("lake.db.t", "overwrite_partitions", QUERY),
    WriteSpec("lake.db.t", "overwrite", QUERY, condition="name = 'a;b' AND id > 0"),
    WriteSpec(
        "lake.db.t",
        "create",
        QUERY,
        partition_by=("years(ts)", "months(ts)", "days(ts)", "hours(ts)", "bucket(8, id)", "name"),
    ),
    WriteSpec(
        "lake.db.t",
        "create",
        QUERY,
        partition_by=("truncate(4, name)",),
        write_options={"snapshot-property.owner": "etl"},
    ),
    WriteSpec("lake.db.t", "append", QUERY, merge_schema=True),
    WriteSpec(  # a write of one partition, by its key: rows outside the condition are refused
        "lake.db.t",
        "overwrite",
        QUERY,
        condition="`ts` >= '2024-01-01 00:00:00+00:00' AND `ts` < '2024-01-02 00:00:00+00:00'",
        source_within_condition=True,
    ),
    WriteSpec("lake.db.t", "append", Source(table="other.db.s")),
    WriteSpec(
        "lake.db.t", "append", Source(path="/in/*.csv", format="csv", options={"header": "true", "sep": "="})
    ),
    WriteSpec("lake.db.t", "append", Source(path="/in", format="orc")),
    WriteSpec(
        "lake.db.t",
        "append",
        QUERY,
        write_options={
            "write-format": "orc",
            "target-file-size-bytes": "1048576",
            "check-nullability": "false",
            "snapshot-property.k": "v=1",
            "fanout-enabled": "true",
            "check-ordering": "false",
        },
    ),
    WriteSpec(
        "lake.db.t",
        "overwrite_partitions",
        QUERY,
        write_options={"isolation-level": "serializable", "validate-from-snapshot-id": "123"},
    ),
    WriteSpec(
        "lake.db.t", "overwrite", QUERY, condition="id = 1", write_options={"isolation-level": "snapshot"}
    ),
]

READ_SPECS = [
    ReadSpec("lake.db.t"),
    ReadSpec("lake.db.t", snapshot_id=0),
    ReadSpec("lake.db.t", snapshot_id=8_744_736_658_442_914_487),
    ReadSpec("lake.db.t", as_of_timestamp=1_704_067_200_000),
    ReadSpec("lake.db.t", branch="audit"),
    ReadSpec("lake.db.t", tag="eod_2024_01_01"),
    ReadSpec("lake.db.t", start_snapshot_id=1),
    ReadSpec("lake.db.t", start_snapshot_id=1, end_snapshot_id=2),
    ReadSpec(
        "lake.db.t",
        stream_from_timestamp=0,
        checkpoint_location="/ck",
        sink_table="lake.db.s",
        sink_mode="append",
        read_options={"streaming-skip-overwrite-snapshots": "true"},
    ),
    ReadSpec(
        "lake.db.t",
        stream_from_timestamp=5,
        checkpoint_location="s3a://b/ck",
        sink_path="/out",
        sink_format="json",
        sink_path_mode="append",
    ),
    ReadSpec(
        "lake.db.t",
        read_options={
            "split-size": "134217728",
            "lookback": "10",
            "file-open-cost": "4194304",
            "vectorization-enabled": "false",
            "batch-size": "1024",
        },
    ),
    ReadSpec("lake.db.t", columns=("id", "name"), filter="id > 1 AND name <> ';'", preview_rows=1000),
    ReadSpec("lake.db.t", sink_table="lake.db.s", sink_mode="overwrite_partitions"),
    ReadSpec("lake.db.t", sink_path="/out", sink_format="csv", sink_path_mode="overwrite"),
]


@pytest.mark.parametrize("spec", WRITE_SPECS + READ_SPECS, ids=lambda spec: " ".join(spec.to_argv()[:1]))
def test_every_option_of_the_matrix_round_trips_through_argv(spec):
    request = JobRequest(
        spec=spec.validated(),
        result_file="/tmp/r.json",
        commit_id="c-1",
        commit_properties={"airflow.dag-id": "d"},
    )
    assert parse_argv(request.to_argv()) == request


def test_the_partition_keys_request_round_trips_through_argv():
    request = JobRequest(spec=WRITE_SPECS[0].validated(), partition_keys=True)
    assert "--partition-keys" in request.to_argv()
    assert parse_argv(request.to_argv()) == request
    assert not parse_argv(JobRequest(spec=WRITE_SPECS[0].validated()).to_argv()).partition_keys


def test_source_within_condition_needs_an_overwrite_condition():
    with pytest.raises(InvalidSpecError, match="source_within_condition needs the condition"):
        WriteSpec("lake.db.t", "append", QUERY, source_within_condition=True).validated()


def test_new_read_fields_have_their_own_flags():
    argv = ReadSpec("lake.db.t", start_snapshot_id=11, end_snapshot_id=22).validated().to_argv()
    assert argv == ["read", "--table", "lake.db.t", "--start-snapshot-id", "11", "--end-snapshot-id", "22"]
    argv = (
        ReadSpec(
            "lake.db.t",
            stream_from_timestamp=7,
            checkpoint_location="/ck",
            sink_path="/o",
            sink_path_mode="append",
        )
        .validated()
        .to_argv()
    )
    assert argv[:7] == [
        "read",
        "--table",
        "lake.db.t",
        "--stream-from-timestamp",
        "7",
        "--checkpoint-location",
        "/ck",
    ]


#: Bare (unquoted) text that would escape into SQL if spliced. Written in backticks (`db`.`t`) a
#: part may hold anything but control characters: see the round trip below.
INJECTIONS = [
    "db.t; DROP TABLE x",
    "db.'t'",
    'db."t"',
    "db.t--",
    "db.t /* x */",
    "db.`t`; DROP TABLE x",
    "db.`t",
    "db.``",
    "db.t\nDROP TABLE x",
    "db.`t\r`",
]


@pytest.mark.parametrize("identifier", INJECTIONS)
@pytest.mark.parametrize(
    "argv",
    [
        ["write", "--table", "{}", "--mode", "append", "--source-query", "SELECT 1"],
        ["write", "--table", "lake.db.t", "--mode", "append", "--source-table", "{}"],
        ["read", "--table", "{}"],
        ["read", "--table", "lake.db.t", "--sink-table", "{}"],
    ],
    ids=["table", "source-table", "read-table", "sink-table"],
)
def test_identifier_injection_is_rejected_in_every_table_field(argv, identifier):
    with pytest.raises(InvalidSpecError, match="identifier"):
        parse_argv([identifier if part == "{}" else part for part in argv])


@pytest.mark.parametrize(
    "identifier",
    ["lake.`sales-eu`.Orders", "lake.a.b.t", "lake.ventes.commandes_été", "lake.db.`t``; DROP x --'`"],
)
def test_real_world_and_hostile_quoted_names_round_trip_through_argv_as_written(identifier):
    spec = ReadSpec(identifier, columns=("`a,b`", "Région", "order-date"), sink_table=identifier).validated()
    request = JobRequest(spec=spec)
    assert parse_argv(request.to_argv()) == request
    assert parse_argv(request.to_argv()).spec.columns == ("`a,b`", "Région", "order-date")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["read", "--table", "lake.db.t", "--branch", "dev; DROP TABLE x"], "branch"),
        (["read", "--table", "lake.db.t", "--tag", "`v1`"], "tag"),
        (["read", "--table", "lake.db.t", "--column", "id,name`"], "column"),
        (["read", "--table", "lake.db.t", "--column", "id; DROP TABLE x"], "column"),
        (["read", "--table", "lake.db.t", "--filter", "1=1; DROP TABLE lake.db.t"], "without ';'"),
        (["read", "--table", "lake.db.t", "--filter", "id > 1 -- and more"], "SQL comments"),
        (
            [
                "write",
                "--table",
                "lake.db.t",
                "--mode",
                "create",
                "--source-query",
                "SELECT 1 AS id",
                "--partition-by",
                "days(ts)); DROP TABLE x; --",
            ],
            "partition_by",
        ),
        (
            [
                "write",
                "--table",
                "lake.db.t",
                "--mode",
                "create",
                "--source-query",
                "SELECT 1",
                "--table-property",
                "k')=1; DROP TABLE x; --=v",
            ],
            "table property key",
        ),
        (
            ["write", "--table", "lake.db.t", "--mode", "append", "--source-query", "DROP TABLE lake.db.t"],
            "must be a query",
        ),
        (
            ["write", "--table", "lake.db.t", "--mode", "append", "--source-query", "SELECT 1; DROP TABLE x"],
            "single statement",
        ),
        (
            [
                "write",
                "--table",
                "lake.db.t",
                "--mode",
                "overwrite",
                "--source-query",
                "SELECT 1",
                "--condition",
                "id = 1; DELETE FROM lake.db.t",
            ],
            "without ';'",
        ),
    ],
)
def test_other_injections_are_rejected(argv, message):
    with pytest.raises(InvalidSpecError, match=message):
        parse_argv(argv)


@pytest.mark.parametrize(
    "selectors",
    [
        {"snapshot_id": 1, "as_of_timestamp": 2},
        {"branch": "b", "tag": "t"},
        {"snapshot_id": 1, "start_snapshot_id": 2},
        {"tag": "t", "start_snapshot_id": 2, "end_snapshot_id": 3},
        {"as_of_timestamp": 1, "stream_from_timestamp": 2, "checkpoint_location": "/ck", "sink_path": "/o"},
        {"start_snapshot_id": 1, "stream_from_timestamp": 2, "checkpoint_location": "/ck", "sink_path": "/o"},
    ],
)
def test_at_most_one_selector(selectors):
    with pytest.raises(InvalidSpecError, match="exactly one of snapshot_id, as_of_timestamp, branch, tag"):
        ReadSpec("lake.db.t", **selectors).validated()


@pytest.mark.parametrize(
    "key",
    [
        "snapshot-id",
        "SNAPSHOT-ID",
        "as-of-timestamp",
        "branch",
        "tag",
        "start-snapshot-id",
        "end-snapshot-id",
        "stream-from-timestamp",
        "versionAsOf",
        "start-timestamp",
    ],
)
def test_selectors_cannot_sneak_in_as_read_options(key):
    with pytest.raises(InvalidSpecError, match=f"read option '{key}' is not allowed here: use the"):
        ReadSpec("lake.db.t", tag="v1", read_options={key: "1"}).validated()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"end_snapshot_id": 2}, "end_snapshot_id needs start_snapshot_id"),
        ({"start_snapshot_id": -1}, "start_snapshot_id must be a non-negative integer"),
        (
            {"stream_from_timestamp": True, "checkpoint_location": "/ck", "sink_path": "/o"},
            "stream_from_timestamp must be a non-negative integer",
        ),
        (
            {"stream_from_timestamp": 1, "sink_path": "/o", "sink_path_mode": "append"},
            "needs a checkpoint_location",
        ),
        ({"stream_from_timestamp": 1, "checkpoint_location": "/ck"}, "needs a sink"),
        (
            {"stream_from_timestamp": 1, "checkpoint_location": "/ck", "sink_table": "lake.db.s"},
            "set sink_mode='append'",
        ),
        (
            {"stream_from_timestamp": 1, "checkpoint_location": "/ck", "sink_path": "/o"},
            "set sink_path_mode='append'",
        ),
        (
            {
                "stream_from_timestamp": 1,
                "checkpoint_location": "/ck",
                "sink_path": "/o",
                "sink_path_mode": "append",
                "preview_rows": 5,
            },
            "preview_rows is not available for a stream",
        ),
        ({"checkpoint_location": "/ck"}, "checkpoint_location applies only to a stream"),
        ({"preview_rows": True}, "preview_rows must be an integer"),
    ],
)
def test_incremental_and_stream_rules(fields, message):
    with pytest.raises(InvalidSpecError, match=message):
        ReadSpec("lake.db.t", **fields).validated()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"split-size": "128MB"}, "read option 'split-size' must be a non-negative integer"),
        ({"lookback": "-1"}, "read option 'lookback' must be a non-negative integer"),
        ({"file-open-cost": "1.5"}, "'file-open-cost' must be a non-negative integer"),
        ({"batch-size": "abc"}, "'batch-size' must be a non-negative integer"),
        ({"vectorization-enabled": "yes"}, "'vectorization-enabled' must be 'true' or 'false'"),
    ],
)
def test_read_option_values_are_checked(options, message):
    with pytest.raises(InvalidSpecError, match=message):
        ReadSpec("lake.db.t", read_options=options).validated()


def test_boolean_options_accept_python_booleans_and_any_case():
    spec = ReadSpec("lake.db.t", read_options={"vectorization-enabled": False, "Batch-Size": 7}).validated()
    assert spec.read_options == {"vectorization-enabled": "false", "Batch-Size": "7"}
    assert WriteSpec("lake.db.t", "append", QUERY, write_options={"fanout-enabled": "TRUE"}).validated()


@pytest.mark.parametrize(
    ("mode", "options", "message"),
    [
        ("append", {"write-format": "csv"}, "'write-format' must be one of parquet, avro, orc"),
        (
            "append",
            {"target-file-size-bytes": "1g"},
            "'target-file-size-bytes' must be a non-negative integer",
        ),
        ("append", {"check-nullability": "no"}, "'check-nullability' must be 'true' or 'false'"),
        ("append", {"fanout-enabled": "1"}, "'fanout-enabled' must be 'true' or 'false'"),
        ("append", {"check-ordering": "off"}, "'check-ordering' must be 'true' or 'false'"),
        (
            "overwrite_partitions",
            {"isolation-level": "read-committed"},
            "must be one of serializable, snapshot",
        ),
        ("overwrite_partitions", {"validate-from-snapshot-id": "12"}, "needs 'isolation-level' as well"),
        (
            "overwrite_partitions",
            {"isolation-level": "snapshot", "validate-from-snapshot-id": "x"},
            "must be a non-negative integer",
        ),
        ("append", {"merge-schema": "true"}, "use the 'merge_schema' field"),
        ("append", {"mergeSchema": "true"}, "use the 'merge_schema' field"),
    ],
)
def test_write_option_values_are_checked(mode, options, message):
    with pytest.raises(InvalidSpecError, match=message):
        WriteSpec(
            "lake.db.t",
            mode,
            QUERY,
            write_options=options,
            condition="id = 1" if mode == "overwrite" else None,
        ).validated()


def test_truncate_partitions_take_only_snapshot_properties():
    """A truncate(W, col) table is created with SQL CTAS, which has no write options to pass."""
    with pytest.raises(InvalidSpecError, match="write options write-format cannot be used with a truncate"):
        WriteSpec(
            "lake.db.t",
            "create",
            QUERY,
            partition_by=("truncate(2, name)",),
            write_options={"write-format": "avro", "snapshot-property.a": "b"},
        ).validated()
    spec = WriteSpec(
        "lake.db.t",
        "create_or_replace",
        QUERY,
        partition_by=("truncate(2, name)",),
        write_options={"snapshot-property.a": "b"},
    ).validated()
    assert spec.created_with_sql
    assert (
        not WriteSpec("lake.db.t", "create", QUERY, partition_by=("bucket(2, id)",))
        .validated()
        .created_with_sql
    )


def test_a_partition_column_that_needs_quoting_is_created_with_sql():
    """DataFrameWriterV2.partitionedBy re-parses a column's name unquoted, so only SQL can quote it."""
    for partition_by in (("days(`order-date`)",), ("Région",), ("bucket(4, `a b`)",)):
        assert WriteSpec("lake.db.t", "create", QUERY, partition_by=partition_by).validated().created_with_sql
    with pytest.raises(InvalidSpecError, match="not a plain name"):
        WriteSpec(
            "lake.db.t", "create", QUERY, partition_by=("Région",), write_options={"write-format": "avro"}
        ).validated()


def test_every_action_the_parser_knows_has_exactly_one_job_function():
    """The registry builds the parser; an action added there without a function would parse, then fail."""
    from airflow_iceberg.jobs.iceberg_job import COMMITTING_ACTIONS, OTHER_ACTIONS, REF_ACTIONS
    from airflow_iceberg.jobs.spec.registry import ACTION_SPECS

    tables = (COMMITTING_ACTIONS, REF_ACTIONS, OTHER_ACTIONS)
    dispatched = [spec_class for table in tables for spec_class in table]
    assert sorted(dispatched, key=str) == sorted(set(ACTION_SPECS.values()), key=str)
    assert all(spec_class.action == name for name, spec_class in ACTION_SPECS.items())

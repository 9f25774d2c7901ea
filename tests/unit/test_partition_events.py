"""Iceberg partitions as Airflow asset partitions (AIP-76): keys, partition-scoped operators, events.

The operators run their real ``execute``; only spark-submit is replaced, by a stand-in that
writes the job's result file as the job would (as in test_operator_lineage.py).
"""

from __future__ import annotations

import json
from datetime import date, datetime
from pathlib import Path
from unittest import mock

import pytest
from airflow.partition_mappers.temporal import StartOfDayMapper, StartOfHourMapper, StartOfMonthMapper
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset, AssetAlias
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_iceberg.exceptions import InvalidSpecError
from airflow_iceberg.jobs.spec.partition_keys import (
    GRAIN_FORMATS,
    UnkeyablePartition,
    parse_partition_key,
    partition_condition,
    time_key,
    value_key,
)
from airflow_iceberg.operators import (
    IcebergAppendOperator,
    IcebergOverwriteOperator,
    IcebergRewriteDataFilesOperator,
    IcebergTimeTravelReadOperator,
)

URI = "iceberg://hadoop/db/events?warehouse=file%3A%2F%2F%2Fwh"
ALIAS = "iceberg-table:lake:db.events"


@pytest.fixture
def hadoop_catalog(iceberg_connection, spark_connection):
    return iceberg_connection(
        "lake",
        extra={"catalog_name": "lake", "catalog_type": "hadoop", "warehouse": "/wh", "runtime_jar": "/j.jar"},
    )


def _submit_returning(result, argv=None):
    def execute(self, context):
        args = self.application_args
        if argv is not None:
            argv.extend(args)
        Path(args[args.index("--result-file") + 1]).write_text(json.dumps(result))

    return mock.patch.object(SparkSubmitOperator, "execute", execute)


def _no_submit():
    return mock.patch.object(
        SparkSubmitOperator, "execute", mock.Mock(side_effect=AssertionError("Spark ran"))
    )


def _commit(**extra):
    return {
        "status": "success",
        "table": "lake.db.events",
        "snapshot_id": 42,
        "operation": "append",
        "summary": {"airflow-iceberg.commit-id": "c"},
        **extra,
    }


# ---------------------------------------------------------------- keys


@pytest.mark.parametrize(
    ("transform", "value", "key"),
    [
        ("hour", 473381, "2024-01-02T05"),
        ("day", 19724, "2024-01-02"),
        ("month", 648, "2024-01"),
        ("year", 54, "2024"),
        ("hour", None, "null"),
    ],
)
def test_a_partition_value_is_keyed_in_its_grains_format(transform, value, key):
    assert time_key(transform, value) == key


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ("eu", "eu"),
        (None, "null"),
        (datetime(2024, 1, 2, 5), "2024-01-02T05:00:00"),
        (datetime(2024, 1, 2, 5, 0, 0, 500000), "2024-01-02T05:00:00.500000"),
        (date(2024, 1, 2), "2024-01-02"),
        (7, "7"),
    ],
)
def test_an_identity_value_keys_one_partition_and_reads_back(value, key):
    assert value_key(value) == key
    if isinstance(value, datetime):
        assert datetime.fromisoformat(key) == value


@pytest.mark.parametrize("value", ["eu|x", "|", "null"])
def test_an_identity_value_another_partition_would_share_a_key_with_is_refused(value):
    with pytest.raises(UnkeyablePartition):
        value_key(value)


def test_the_keys_are_what_airflows_mappers_read_with_the_grains_format():
    hour = time_key("hour", 473381)

    assert StartOfHourMapper(input_format=GRAIN_FORMATS["hour"]).to_downstream(hour) == hour
    assert StartOfDayMapper(input_format=GRAIN_FORMATS["hour"]).to_downstream(hour) == "2024-01-02"
    assert StartOfMonthMapper(input_format=GRAIN_FORMATS["day"]).to_downstream("2024-01-02") == "2024-01"
    # and a mapper's output is a key the operators take back as that partition
    assert (
        parse_partition_key(StartOfDayMapper(input_format=GRAIN_FORMATS["hour"]).to_downstream(hour)).grain
        == "day"
    )


@pytest.mark.parametrize(
    ("key", "grain", "start", "end"),
    [
        ("2024-01-02T05", "hour", "2024-01-02 05:00:00", "2024-01-02 06:00:00"),
        ("2024-12-31", "day", "2024-12-31 00:00:00", "2025-01-01 00:00:00"),
        ("2024-12", "month", "2024-12-01 00:00:00", "2025-01-01 00:00:00"),
        ("2024", "year", "2024-01-01 00:00:00", "2025-01-01 00:00:00"),
    ],
)
def test_a_key_names_its_grains_range(key, grain, start, end):
    selected = parse_partition_key(key)

    assert selected.grain == grain
    assert selected.condition("`event ts`") == f"`event ts` >= '{start}+00:00' AND `event ts` < '{end}+00:00'"


@pytest.mark.parametrize("key", ["2024-01-02T05:00:00", "2024-1-2", "yesterday", "2024-01-02 05", "2024-13"])
def test_a_key_that_names_no_grain_is_refused_with_the_formats(key):
    with pytest.raises(
        InvalidSpecError, match=r"partition_key .* is not a time partition key: expected one of"
    ):
        parse_partition_key(key)


@pytest.mark.parametrize("rendered", ["", "None", "  "])
def test_a_run_without_a_key_is_refused_not_taken_for_every_partition(rendered):
    with pytest.raises(InvalidSpecError, match="this run has no partition key"):
        partition_condition(rendered, "event_ts")


def test_a_key_needs_its_column_and_narrows_the_condition_given():
    with pytest.raises(InvalidSpecError, match="partition_key needs partition_column"):
        partition_condition("2024-01-02", None)
    assert partition_condition(None, None, "id > 1") == "id > 1"
    assert partition_condition("2024", "d", "id > 1") == (
        "(`d` >= '2024-01-01 00:00:00+00:00' AND `d` < '2025-01-01 00:00:00+00:00') AND (id > 1)"
    )


# ---------------------------------------------------------------- partition-scoped operators


def test_a_read_by_key_filters_to_the_partition_before_spark_starts(hadoop_catalog):
    read = IcebergTimeTravelReadOperator(
        task_id="r",
        table="db.events",
        iceberg_conn_id=hadoop_catalog,
        filter="id > 0",
        partition_key="2024-01-02",
        partition_column="event_ts",
    )
    assert "partition_key" in read.template_fields
    assert read.build_spec().filter == (
        "(`event_ts` >= '2024-01-02 00:00:00+00:00' AND `event_ts` < '2024-01-03 00:00:00+00:00') "
        "AND (id > 0)"
    )

    read.partition_key = "2024-01-02T05:00:00"  # a CronPartitionTimetable key in its default format
    with _no_submit(), pytest.raises(InvalidSpecError, match="key_format='%Y-%m-%dT%H'"):
        read.execute({"outlet_events": OutletEventAccessors()})


def test_an_overwrite_by_key_replaces_the_partition_and_refuses_rows_outside_it(hadoop_catalog):
    overwrite = IcebergOverwriteOperator(
        task_id="o",
        table="db.events",
        iceberg_conn_id=hadoop_catalog,
        source_table="db.staging",
        partition_key="{{ partition_key }}",
        partition_column="event_ts",
    )
    overwrite.partition_key = "2024-01-02T05"  # as rendered
    spec = overwrite.build_spec().validated()

    assert (
        spec.condition
        == "`event_ts` >= '2024-01-02 05:00:00+00:00' AND `event_ts` < '2024-01-02 06:00:00+00:00'"
    )
    assert spec.source_within_condition and "--source-within-condition" in spec.to_argv()
    plain = IcebergOverwriteOperator(task_id="p", table="db.events", source_table="db.s", condition="id = 1")
    assert not plain.build_spec().validated().source_within_condition


@pytest.mark.parametrize(
    "arguments", [{}, {"condition": "id = 1", "partition_key": "2024", "partition_column": "d"}]
)
def test_an_overwrite_takes_a_condition_or_a_key(arguments):
    overwrite = IcebergOverwriteOperator(task_id="o", table="db.events", source_table="s", **arguments)

    with pytest.raises(InvalidSpecError, match="give condition or partition_key"):
        overwrite.build_spec()


def test_a_compaction_by_key_compacts_the_partitions_files_only():
    compact = IcebergRewriteDataFilesOperator(
        task_id="c", table="db.events", partition_key="2024-01", partition_column="d", where="id > 0"
    )

    assert compact.build_spec().where == (
        "(`d` >= '2024-01-01 00:00:00+00:00' AND `d` < '2024-02-01 00:00:00+00:00') AND (id > 0)"
    )


# ---------------------------------------------------------------- asset events


def test_airflow_attaches_no_per_event_keys_to_an_alias_event():
    """Why partitioned events go on the asset itself: Airflow refuses keys on an alias accessor."""
    with pytest.raises(TypeError, match="not supported on asset alias"):
        OutletEventAccessors()[AssetAlias(ALIAS)].add_partitions("2024-01-02T05")


def _append_with_partition_events(conn_id: str, **arguments) -> IcebergAppendOperator:
    """The append of db.events these tests run, announcing the partitions its commit changed."""
    return IcebergAppendOperator(
        task_id="a",
        table="db.events",
        iceberg_conn_id=conn_id,
        source_query="SELECT 1",
        partition_events=True,
        **arguments,
    )


def test_partition_events_put_one_key_per_changed_partition_on_the_tables_asset(hadoop_catalog):
    append = _append_with_partition_events(hadoop_catalog)
    assert append.outlets == [AssetAlias(ALIAS)]  # parse time: no connection looked up
    events, argv = OutletEventAccessors(), []
    with _submit_returning(_commit(partition_keys=["2024-01-02T05", "2024-01-02T06"]), argv):
        append.execute({"outlet_events": events})

    asset = Asset(name=URI, uri=URI)
    assert "--partition-keys" in argv
    assert append.outlets == [AssetAlias(ALIAS), asset]  # Airflow registers outlets' events on success
    accessor = events[asset]
    assert accessor.partition_keys == {"2024-01-02T05", "2024-01-02T06"}
    assert accessor.extra == {
        "table": "lake.db.events",
        "snapshot_id": 42,
        "operation": "append",
        "commit_id": "c",
        "partition_count": 2,
    }
    assert events[AssetAlias(ALIAS)].asset_alias_events == []  # not twice


def test_partition_events_of_a_commit_without_keys_are_one_event_without_a_key(hadoop_catalog):
    append = _append_with_partition_events(hadoop_catalog)
    events = OutletEventAccessors()
    with _submit_returning(_commit(partition_keys=[])):
        append.execute({"outlet_events": events})

    accessor = events[Asset(name=URI, uri=URI)]
    assert accessor.partition_keys == set() and accessor.extra["partition_count"] == 0


def test_without_partition_events_a_commit_is_one_alias_event_and_no_keys_are_listed(hadoop_catalog):
    append = IcebergAppendOperator(
        task_id="a", table="db.events", iceberg_conn_id=hadoop_catalog, source_query="SELECT 1"
    )
    events, argv = OutletEventAccessors(), []
    with _submit_returning(_commit(), argv):
        append.execute({"outlet_events": events})

    assert "--partition-keys" not in argv
    assert append.outlets == [AssetAlias(ALIAS)]
    (event,) = events[AssetAlias(ALIAS)].asset_alias_events
    assert event.dest_asset_key.uri == URI


def test_a_branch_commit_emits_no_partition_events(hadoop_catalog):
    append = _append_with_partition_events(hadoop_catalog, branch="audit")
    events = OutletEventAccessors()
    with _submit_returning(_commit(branch="audit")):
        append.execute({"outlet_events": events})

    assert len(events) == 0 and append.outlets == [AssetAlias(ALIAS)]


def test_keys_airflow_refuses_are_left_out_and_the_other_partitions_keep_their_events(hadoop_catalog):
    """An identity partition on '' or ' ' has a key Airflow's add_partitions refuses for all keys."""
    append = _append_with_partition_events(hadoop_catalog)
    events = OutletEventAccessors()
    with _submit_returning(_commit(partition_keys=["", " ", "eu", "x" * 251, "us"])):
        append.execute({"outlet_events": events})

    accessor = events[Asset(name=URI, uri=URI)]
    assert accessor.partition_keys == {"eu", "us"}
    assert accessor.extra["partition_count"] == 2


def test_partitions_no_key_can_name_apart_are_warned_of_and_the_others_keep_their_events(hadoop_catalog):
    """The job lists them (``unkeyable_partitions``: a value holding '|', the text 'null')."""
    append = _append_with_partition_events(hadoop_catalog)
    events = OutletEventAccessors()
    unkeyable = ["region='eu|x', country='y': 'eu|x' holds '|', which joins a key's fields"]
    log = mock.MagicMock()
    with (
        _submit_returning(_commit(partition_keys=["eu|fr"], unkeyable_partitions=unkeyable)),
        mock.patch.object(IcebergAppendOperator, "log", new_callable=mock.PropertyMock, return_value=log),
    ):
        append.execute({"outlet_events": events})

    accessor = events[Asset(name=URI, uri=URI)]
    assert accessor.partition_keys == {"eu|fr"} and accessor.extra["partition_count"] == 1
    warned = [call.args for call in log.warning.call_args_list]
    assert any(args[-1] == unkeyable and "get no event" in args[0] for args in warned), warned


def test_partition_events_on_an_airflow_without_add_partitions_fail_at_parse_time(
    hadoop_catalog, monkeypatch
):
    """Airflow before per-event partition keys would take the events without a key: say so instead."""
    from airflow.sdk.execution_time.context import OutletEventAccessor

    monkeypatch.delattr(OutletEventAccessor, "add_partitions")
    with pytest.raises(InvalidSpecError, match="partition_events needs an Airflow"):
        IcebergAppendOperator(
            task_id="a",
            table="db.events",
            iceberg_conn_id=hadoop_catalog,
            source_query="SELECT 1",
            partition_events=True,
        )
    IcebergAppendOperator(  # without partition_events: any Airflow 3
        task_id="b", table="db.events", iceberg_conn_id=hadoop_catalog, source_query="SELECT 1"
    )


def test_a_key_rendered_natively_as_none_is_refused_not_taken_for_every_partition(hadoop_catalog):
    """A DAG with render_template_as_native_obj renders "{{ partition_key }}" as None, not "None"."""
    from jinja2.nativetypes import NativeEnvironment

    rendered = NativeEnvironment().from_string("{{ partition_key }}").render(partition_key=None)
    read = IcebergTimeTravelReadOperator(
        task_id="r",
        table="db.events",
        iceberg_conn_id=hadoop_catalog,
        partition_key=rendered,
        partition_column="event_ts",
    )
    with _no_submit(), pytest.raises(InvalidSpecError, match="partition_column 'event_ts' without"):
        read.execute({"outlet_events": OutletEventAccessors()})

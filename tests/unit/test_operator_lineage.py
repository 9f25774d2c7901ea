"""Operators as asset producers and consumers, and their OpenLineage facets (spark-submit faked).

Each test runs the operator's real ``execute``; only ``SparkSubmitOperator.execute`` (the
spark-submit process) is replaced, by a stand-in that writes the job's result file as the job
would. The lineage path after a commit is what is under test: it must never fail the task.
"""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock
from urllib.parse import quote

import pytest
import structlog
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, AssetAlias
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_iceberg.assets import iceberg_asset
from airflow_iceberg.exceptions import InvalidCatalogConfigError
from airflow_iceberg.operators import (
    IcebergAppendOperator,
    IcebergRemoveOrphanFilesOperator,
    IcebergTimeTravelReadOperator,
)
from airflow_iceberg.operators.base import IcebergSparkSubmitOperator

URI = "iceberg://hadoop/db/orders?warehouse=file%3A%2F%2F%2Fwh"
SUMMARY = {"airflow-iceberg.commit-id": "d:append:manual__1:-1", "added-records": "3"}


@pytest.fixture
def hadoop_catalog(iceberg_connection, spark_connection):
    return iceberg_connection(
        "lake",
        extra={"catalog_name": "lake", "catalog_type": "hadoop", "warehouse": "/wh", "runtime_jar": "/j.jar"},
    )


def _submit_returning(result):
    def execute(self, context):
        args = self.application_args
        Path(args[args.index("--result-file") + 1]).write_text(json.dumps(result))

    return mock.patch.object(SparkSubmitOperator, "execute", execute)


def _described(table, location, snapshot_id):
    """One table as the job describes it (``lineage.tables``)."""
    return {
        table: {"location": location, "schema": [{"name": "id", "type": "long"}], "snapshot_id": snapshot_id}
    }


def _lineage(table, location, snapshot_id):
    return {"tables": _described(table, location, snapshot_id)}


def test_operators_declare_aliases_at_parse_time_without_a_connection(monkeypatch):
    monkeypatch.setattr(
        "airflow.sdk.bases.hook.BaseHook.get_connection",
        mock.Mock(side_effect=AssertionError("parse-time lookup")),
    )
    with DAG("d", schedule=None):
        write = IcebergAppendOperator(
            task_id="w", table="db.{{ params.t }}", iceberg_conn_id="c", source_query="SELECT 1"
        )
        read = IcebergTimeTravelReadOperator(
            task_id="r", table="db.a", iceberg_conn_id="c", sink_table="db.b"
        )
        orphans = IcebergRemoveOrphanFilesOperator(task_id="o", table="db.a", iceberg_conn_id="c")
    # a templated table's alias is its task's; a plain table's is shared by every task writing it
    assert write.outlets == [AssetAlias("iceberg-table:c:db.{{ params.t }}@d:w")] and write.inlets == []
    assert read.inlets == [AssetAlias("iceberg-table:c:db.a")]
    assert read.outlets == [AssetAlias("iceberg-table:c:db.b")]
    assert orphans.inlets == [] and orphans.outlets == []


def test_a_new_write_operator_gets_outlets_by_setting_writes_table(hadoop_catalog):
    class Upkeep(IcebergSparkSubmitOperator):
        writes_table = True

    assert Upkeep(task_id="u", table="db.t").outlets == [
        AssetAlias("iceberg-table:iceberg_catalog_default:db.t")
    ]


def test_a_commit_emits_the_tables_asset_with_the_commit_as_extra(hadoop_catalog):
    result = {
        "status": "success",
        "table": "lake.db.orders",
        "mode": "append",
        "snapshot_id": 42,
        "parent_snapshot_id": 41,
        "operation": "append",
        "added_records": 3,
        "total_records": 10,
        "summary": SUMMARY,
        "lineage": _lineage("lake.db.orders", "file:/wh/db/orders", 42),
    }
    with DAG("orders", schedule=None):
        op = IcebergAppendOperator(
            task_id="append", table="{{ params.t }}", iceberg_conn_id=hadoop_catalog, source_query="SELECT 1"
        )
    op.table = "db.orders"  # as rendered
    events = OutletEventAccessors()
    with _submit_returning(result):
        xcom = op.execute({"outlet_events": events})
    assert "lineage" not in xcom  # the XCom stays what it was
    alias_events = events[AssetAlias("iceberg-table:lake:{{ params.t }}@orders:append")].asset_alias_events
    assert len(alias_events) == 1
    event = alias_events[0]
    assert (event.dest_asset_key.name, event.dest_asset_key.uri) == (URI, URI)
    assert event.extra == {
        "table": "lake.db.orders",
        "snapshot_id": 42,
        "parent_snapshot_id": 41,
        "operation": "append",
        "added_records": 3,
        "total_records": 10,
        "commit_id": "d:append:manual__1:-1",
    }

    lineage = op.get_openlineage_facets_on_complete(None)
    assert lineage.inputs == []
    (output,) = lineage.outputs
    assert (output.namespace, output.name) == ("file", "/wh/db/orders")
    assert output.facets["version"].datasetVersion == "42"
    assert [(f.name, f.type) for f in output.facets["schema"].fields] == [("id", "long")]
    (symlink,) = output.facets["symlinks"].identifiers
    assert (symlink.namespace, symlink.name, symlink.type) == ("file:/wh", "db.orders", "TABLE")


def test_a_read_is_an_input_at_the_snapshot_it_read_and_its_sink_an_output(hadoop_catalog):
    result = {
        "status": "success",
        "table": "lake.db.orders",
        "snapshot_id": 7,
        "row_count": 3,
        "sink": {"table": "lake.db.copy", "snapshot_id": 8, "operation": "append", "summary": {}},
        "lineage": {
            "tables": {
                **_described("lake.db.orders", "file:/wh/db/orders", 9),
                **_described("lake.db.copy", "file:/wh/db/copy", 8),
            }
        },
    }
    op = IcebergTimeTravelReadOperator(
        task_id="r", table="db.orders", iceberg_conn_id=hadoop_catalog, snapshot_id=7, sink_table="db.copy"
    )
    events = OutletEventAccessors()
    with _submit_returning(result):
        op.execute({"outlet_events": events})
    (event,) = events[AssetAlias("iceberg-table:lake:db.copy")].asset_alias_events
    assert event.dest_asset_key.uri == URI.replace("orders", "copy")
    lineage = op.get_openlineage_facets_on_complete(None)
    assert [(d.name, d.facets["version"].datasetVersion) for d in lineage.inputs] == [("/wh/db/orders", "7")]
    assert [(d.name, d.facets["version"].datasetVersion) for d in lineage.outputs] == [("/wh/db/copy", "8")]


def test_a_job_without_a_commit_emits_nothing(hadoop_catalog):
    op = IcebergTimeTravelReadOperator(task_id="r", table="db.orders", iceberg_conn_id=hadoop_catalog)
    events = OutletEventAccessors()
    with _submit_returning({"status": "success", "table": "lake.db.orders", "snapshot_id": 7}):
        op.execute({"outlet_events": events})
    assert len(events) == 0


def test_merge_delete_and_publish_are_producers_but_only_of_commits_to_main(hadoop_catalog):
    from airflow_iceberg.operators import IcebergDeleteOperator, IcebergMergeOperator, IcebergPublishOperator

    merge = IcebergMergeOperator(task_id="m", table="db.t", source_table="db.s", keys=["id"])
    delete = IcebergDeleteOperator(task_id="d", table="db.t", condition="id = 1", branch="audit")
    publish = IcebergPublishOperator(task_id="p", table="db.t", branch="audit")
    alias = AssetAlias("iceberg-table:iceberg_catalog_default:db.t")
    assert merge.outlets == delete.outlets == publish.outlets == [alias]

    commit = {"status": "success", "table": "lake.db.t", "snapshot_id": 5, "operation": "delete"}
    for op, result, events_expected in (
        (delete, {**commit, "branch": "audit"}, 0),  # on the audit branch: main readers see nothing new
        (publish, {**commit, "branch": "audit", "target_branch": "main"}, 1),
        (merge, {**commit, "branch": "main"}, 1),
    ):
        op.iceberg_conn_id = hadoop_catalog
        events = OutletEventAccessors()
        with _submit_returning(result):
            op.execute({"outlet_events": events})
        alias_name = "iceberg-table:iceberg_catalog_default:db.t"
        assert len(events[AssetAlias(alias_name)].asset_alias_events) == events_expected, op.task_id


def _commit(table, snapshot_id=42, **extra):
    return {
        "status": "success",
        "table": table,
        "mode": "append",
        "snapshot_id": snapshot_id,
        "operation": "append",
        "summary": SUMMARY,
        **extra,
    }


def _warnings(logs):
    """Lineage's warnings (Airflow adds one of its own: execute called outside the task runner)."""
    return [e["event"] for e in logs if e["log_level"] == "warning" and "Task Runner" not in e["event"]]


@pytest.fixture
def hive_list_catalog(iceberg_connection, spark_connection):
    """A Hive catalog on two metastores, listed in Host as the docs allow (spaces included)."""
    return iceberg_connection(
        "hive_ha",
        host="thrift://MS-B:9083 , thrift://ms-a",
        extra={"catalog_name": "hms", "catalog_type": "hive", "runtime_jar": "/j.jar"},
    )


def test_a_commit_to_a_catalog_on_a_metastore_list_returns_its_xcom_and_emits_its_asset(hive_list_catalog):
    op = IcebergAppendOperator(
        task_id="append", table="DB.Orders", iceberg_conn_id=hive_list_catalog, source_query="SELECT 1"
    )
    result = _commit("hms.DB.Orders", lineage=_lineage("hms.DB.Orders", "hdfs://nn/wh/db.db/orders", 42))
    events = OutletEventAccessors()
    with _submit_returning(result), structlog.testing.capture_logs() as logs:
        xcom = op.execute({"outlet_events": events})
    assert xcom["snapshot_id"] == 42 and not _warnings(logs)
    (event,) = events[AssetAlias("iceberg-table:hive_ha:DB.Orders")].asset_alias_events
    metastores = "thrift%3A%2F%2Fms-a%3A9083%2Cthrift%3A%2F%2Fms-b%3A9083"  # one order, explicit ports
    assert event.dest_asset_key.uri == f"iceberg://hive/db/orders?uri={metastores}"
    (output,) = op.get_openlineage_facets_on_complete(None).outputs
    assert (output.namespace, output.name) == ("hdfs://nn:8020", "/wh/db.db/orders")
    (symlink,) = output.facets["symlinks"].identifiers
    assert (symlink.namespace, symlink.name) == ("hive://ms-a:9083", "db.orders")


def test_a_connection_whose_catalog_cannot_be_named_fails_before_spark_starts(iceberg_connection):
    conn_id = iceberg_connection(
        "bad_port", host="thrift://ms:90a83", extra={"catalog_type": "hive", "runtime_jar": "/j.jar"}
    )
    op = IcebergAppendOperator(
        task_id="append", table="db.t", iceberg_conn_id=conn_id, source_query="SELECT 1"
    )
    never = mock.Mock(side_effect=AssertionError("spark-submit ran"))
    with (
        mock.patch.object(SparkSubmitOperator, "execute", never),
        pytest.raises(InvalidCatalogConfigError) as raised,
    ):
        op.execute({"outlet_events": OutletEventAccessors()})
    assert "iceberg.db.t: cannot name its asset, so nothing was run" in str(raised.value)
    assert "field 'URI' (host)" in str(raised.value) and "'90a83'" in str(raised.value)
    never.assert_not_called()


class _RefusingOutletEvents(OutletEventAccessors):
    """Outlet events whose accessor fails, as Airflow's can (e.g. a bad alias or extra)."""

    def __getitem__(self, key):
        raise RuntimeError("the outlet events accessor is unavailable")


def test_an_asset_event_that_cannot_be_added_is_a_warning_not_a_failed_task(hadoop_catalog):
    op = IcebergAppendOperator(
        task_id="append", table="db.orders", iceberg_conn_id=hadoop_catalog, source_query="SELECT 1"
    )
    result = _commit("lake.db.orders", lineage=_lineage("lake.db.orders", "file:/wh/db/orders", 42))
    with _submit_returning(result), structlog.testing.capture_logs() as logs:
        xcom = op.execute({"outlet_events": _RefusingOutletEvents()})
    assert xcom["snapshot_id"] == 42 and "lineage" not in xcom
    (warning,) = _warnings(logs)
    assert warning.startswith("No asset event for lake.db.orders: RuntimeError: the outlet events accessor")
    assert "Snapshot 42 is committed" in warning and URI in warning
    assert "are not triggered by it" in warning and "POST /api/v2/assets/events" in warning
    assert op.get_openlineage_facets_on_complete(None).outputs  # lineage still recorded


def test_a_malformed_lineage_description_is_a_warning_and_the_asset_event_still_goes_out(hadoop_catalog):
    op = IcebergAppendOperator(
        task_id="append", table="db.orders", iceberg_conn_id=hadoop_catalog, source_query="SELECT 1"
    )
    broken = {"tables": {"lake.db.orders": {"location": "file:/wh/db/orders", "schema": [{"column": "id"}]}}}
    events = OutletEventAccessors()
    with (
        _submit_returning(_commit("lake.db.orders", lineage=broken)),
        structlog.testing.capture_logs() as logs,
    ):
        xcom = op.execute({"outlet_events": events})
    assert xcom["snapshot_id"] == 42
    assert len(events[AssetAlias("iceberg-table:lake:db.orders")].asset_alias_events) == 1
    (warning,) = _warnings(logs)
    assert warning.startswith("No OpenLineage datasets for this task: KeyError: 'name'")


# --------------------------------------------------------------------------- aliases and assets that match


@pytest.mark.parametrize(
    ("jdbc_url", "canonical"),
    [
        ("jdbc:postgresql:iceberg", "jdbc:postgresql://localhost:5432/iceberg"),  # pgjdbc: localhost:5432
        ("jdbc:mysql:loadbalance://db-a:3306,db-b:3306/iceberg", "jdbc:mysql://db-a:3306,db-b:3306/iceberg"),
        ("jdbc:mariadb:sequential://db-a,db-b/iceberg", "jdbc:mariadb://db-a:3306,db-b:3306/iceberg"),
        (
            "jdbc:postgresql://db/iceberg?currentSchema=team_a",
            "jdbc:postgresql://db:5432/iceberg?currentSchema=team_a",
        ),
        ("jdbc:oracle:thin:@db:1521:ORCL", "jdbc:oracle:thin:@db:1521:ORCL"),
    ],
)
def test_the_asset_a_jdbc_catalog_emits_is_the_one_its_uri_names_everywhere(
    iceberg_connection, spark_connection, jdbc_url, canonical
):
    """The emitted asset is named by its URI; Airflow's ``Asset`` normalises it again, and
    ``iceberg_asset()`` of the operator's own URI (copied from the log into a consumer DAG) must be
    the same asset: Airflow keys assets by (name, uri)."""
    conn_id = iceberg_connection(
        "jdbc_forms",
        host=jdbc_url,
        extra={"catalog_name": "lake", "catalog_type": "jdbc", "warehouse": "/wh", "runtime_jar": "/j.jar"},
    )
    op = IcebergAppendOperator(
        task_id="append", table="db.orders", iceberg_conn_id=conn_id, source_query="SELECT 1"
    )
    events = OutletEventAccessors()
    with _submit_returning(_commit("lake.db.orders")):
        op.execute({"outlet_events": events})
    (event,) = events[AssetAlias(f"iceberg-table:{conn_id}:db.orders")].asset_alias_events
    name, uri = event.dest_asset_key.name, event.dest_asset_key.uri
    assert name == uri == f"iceberg://jdbc/db/orders?catalog=lake&uri={quote(canonical, safe='')}"
    consumer = iceberg_asset(name)
    assert (consumer.name, consumer.uri) == (name, uri)


def test_the_alias_of_a_templated_table_is_not_shared_by_unrelated_producers():
    """An alias is global by name in Airflow. Every DAG built from one template (a DAG factory, a
    shared default) writes ``db.{{ params.table }}`` on the same connection, each a different
    table: were the alias the connection and the template text, a commit of ``db.refunds`` by one
    DAG would trigger the consumer of another DAG's ``db.orders``. A templated connection id is
    the same. A plain table is one table wherever it is written, so its alias stays shared."""
    aliases, plain = [], []
    for dag_id, table in (("load_orders", "orders"), ("load_refunds", "refunds")):
        with DAG(dag_id, schedule=None, params={"table": table}):
            templated = IcebergAppendOperator(
                task_id="load", table="db.{{ params.table }}", iceberg_conn_id="lake", source_query="SELECT 1"
            )
            by_conn = IcebergAppendOperator(
                task_id="copy", table="db.t", iceberg_conn_id="{{ params.conn }}", source_query="SELECT 1"
            )
            fixed = IcebergAppendOperator(
                task_id="fixed", table="db.fixed", iceberg_conn_id="lake", source_query="SELECT 1"
            )
        aliases.append((templated.outlets[0], by_conn.outlets[0]))
        plain.append(fixed.outlets[0])
    assert aliases[0][0] != aliases[1][0] and aliases[0][1] != aliases[1][1]
    assert aliases[0][0] == AssetAlias("iceberg-table:lake:db.{{ params.table }}@load_orders:load")
    assert plain[0] == plain[1] == AssetAlias("iceberg-table:lake:db.fixed")


def test_a_templated_tables_alias_is_named_after_a_dag_the_task_joins_later():
    """A DAG factory may make its tasks first and add them to the DAG after (``dag.add_task``,
    ``task.dag = dag``). The alias was then named after ``adhoc_<owner>``, one name for every such
    task: it must be renamed after the DAG the task joins, in the outlets and the inlets alike."""
    written = IcebergAppendOperator(
        task_id="load", table="db.{{ params.table }}", iceberg_conn_id="lake", source_query="SELECT 1"
    )
    read = IcebergTimeTravelReadOperator(
        task_id="read", table="db.{{ params.table }}", iceberg_conn_id="lake", snapshot_id=1
    )
    dag = DAG("made_later", schedule=None)
    dag.add_task(written)
    read.dag = dag
    assert written.outlets == [AssetAlias("iceberg-table:lake:db.{{ params.table }}@made_later:load")]
    assert written.table_alias_names == ["iceberg-table:lake:db.{{ params.table }}@made_later:load"]
    assert read.inlets == [AssetAlias("iceberg-table:lake:db.{{ params.table }}@made_later:read")]

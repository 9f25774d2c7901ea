"""The operators' OpenLineage datasets and run facets: the graph they make, and valid against the spec.

Each test runs the operator's real ``execute``; only spark-submit is replaced, by a stand-in that
writes the job's result file as the job writes it (its ``lineage`` as ``tests/jobs/test_lineage.py``
checks the job produces it). Every event is validated against the OpenLineage event schema, and
every facet against the schema at the version its ``_schemaURL`` names
(:mod:`tests.openlineage_validation`). The names are checked against openlineage-spark's
own events in ``tests/jobs/test_openlineage_spark.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_iceberg.operators import (
    IcebergAppendOperator,
    IcebergCreateTableOperator,
    IcebergMergeOperator,
    IcebergOverwriteOperator,
    IcebergOverwritePartitionsOperator,
    IcebergTimeTravelReadOperator,
)
from tests.openlineage_validation import operator_event, validate_event

SCHEMA = [
    {"name": "id", "type": "long"},
    {"name": "address", "type": "struct", "fields": [{"name": "city", "type": "string"}]},
]
APPLICATION = {"id": "local-1796141205592", "name": "orders_etl.load"}


def validate(lineage) -> dict:
    """The event Airflow would send with these datasets, validated whole and facet by facet."""
    document = operator_event(lineage, "orders_etl.load")
    assert validate_event(document) == []  # every facet here has an openlineage.io schema
    return document


#: What docs/assets-and-lineage.md shows a create from a query emitting (its inputs' names and
#: versions; every output and run facet, without ``_producer`` and ``_schemaURL``).
DOCUMENTED_CREATE_EVENT = """
{
  "inputs": [
    {
      "namespace": "file",
      "name": "/wh/db/orders",
      "facets": {"version": {"datasetVersion": "6"}}
    },
    {
      "namespace": "file",
      "name": "/wh/db/customers",
      "facets": {"version": {"datasetVersion": "8"}}
    }
  ],
  "outputs": [
    {
      "namespace": "file",
      "name": "/wh/db/summary",
      "facets": {
        "schema": {
          "fields": [
            {"name": "id", "type": "long"},
            {
              "name": "address",
              "type": "struct",
              "fields": [{"name": "city", "type": "string"}]
            }
          ]
        },
        "dataSource": {"name": "file", "uri": "file"},
        "storage": {"storageLayer": "iceberg", "fileFormat": "orc"},
        "symlinks": {
          "identifiers": [{"namespace": "file:/wh", "name": "db.summary", "type": "TABLE"}]
        },
        "catalog": {
          "framework": "iceberg", "type": "hadoop", "name": "lake",
          "warehouseUri": "file:///wh", "source": "spark"
        },
        "version": {"datasetVersion": "42"},
        "lifecycleStateChange": {"lifecycleStateChange": "CREATE"}
      },
      "outputFacets": {"outputStatistics": {"rowCount": 3, "size": 1300, "fileCount": 2}}
    }
  ],
  "run": {
    "facets": {
      "spark_applicationDetails": {"applicationId": "local-1796141205592", "appName": "orders_etl.load"}
    }
  }
}
"""


def _without_schema_urls(value):
    if isinstance(value, dict):
        return {k: _without_schema_urls(v) for k, v in value.items() if k not in ("_producer", "_schemaURL")}
    if isinstance(value, list):
        return [_without_schema_urls(v) for v in value]
    return value


def _described(table, location, snapshot_id, file_format="parquet"):
    return {
        table: {"location": location, "schema": SCHEMA, "format": file_format, "snapshot_id": snapshot_id}
    }


def _submit_returning(result):
    def execute(self, context):
        args = self.application_args
        Path(args[args.index("--result-file") + 1]).write_text(json.dumps(result))

    return mock.patch.object(SparkSubmitOperator, "execute", execute)


def _run(op, result) -> dict:
    with _submit_returning(result):
        op.execute({})
    return validate(op.get_openlineage_facets_on_complete(None))


def _commit(table, mode, snapshot_id=42, parent=41, **extra):
    return {
        "status": "success",
        "table": table,
        "mode": mode,
        "committed": True,
        "snapshot_id": snapshot_id,
        "parent_snapshot_id": parent,
        "operation": "append",
        "added_records": 3,
        "added_data_files": 2,
        "summary": {"added-files-size": "1300", "added-records": "3"},
        **extra,
    }


def _names(datasets):
    return [(d["namespace"], d["name"]) for d in datasets]


@pytest.fixture
def lake(iceberg_connection, spark_connection):
    return iceberg_connection(
        "lake",
        host="",
        extra={"catalog_name": "lake", "catalog_type": "hadoop", "warehouse": "/wh", "runtime_jar": "/j.jar"},
    )


def test_a_create_from_a_query_has_the_querys_tables_as_inputs_and_every_facet(lake):
    op = IcebergCreateTableOperator(
        task_id="create",
        table="db.summary",
        iceberg_conn_id=lake,
        source_query="SELECT o.id FROM lake.db.orders VERSION AS OF 6 o JOIN lake.db.customers c USING (id)",
    )
    lineage = {
        "tables": {
            **_described("lake.db.summary", "file:/wh/db/summary", 42, "orc"),
            **_described("lake.db.orders", "file:/wh/db/orders", 7),
            **_described("lake.db.customers", "file:/wh/db/customers", 8),
            **_described("spark_catalog.db.rates", "file:/session/db/rates", 3),
        },
        "query_tables": [
            {"table": "lake.db.orders", "snapshot_id": 6},  # read VERSION AS OF 6
            {"table": "lake.db.customers", "snapshot_id": None},
            {"table": "spark_catalog.db.rates", "snapshot_id": None},  # a catalog without a connection
        ],
        "application": APPLICATION,
    }
    event = _run(op, {**_commit("lake.db.summary", "create", parent=None), "lineage": lineage})

    assert _names(event["inputs"]) == [
        ("file", "/wh/db/orders"),
        ("file", "/wh/db/customers"),
        ("file", "/session/db/rates"),
    ]
    # the snapshot a time-travel read resolved to; else the current one, as the job saw it
    assert [d["facets"]["version"]["datasetVersion"] for d in event["inputs"]] == ["6", "8", "3"]
    # a table of a catalog the task has no connection for is not given the lake's identity
    assert "symlinks" not in event["inputs"][2]["facets"] and "catalog" not in event["inputs"][2]["facets"]
    event["inputs"] = event["inputs"][:2]  # the documented event shows the lake's tables
    (output,) = event["outputs"]
    assert (output["namespace"], output["name"]) == ("file", "/wh/db/summary")
    facets = output["facets"]
    assert facets["lifecycleStateChange"]["lifecycleStateChange"] == "CREATE"
    assert facets["schema"]["fields"][1] == {
        "name": "address",
        "type": "struct",
        "fields": [{"name": "city", "type": "string"}],
    }
    assert {k: v for k, v in facets["catalog"].items() if not k.startswith("_")} == {
        "framework": "iceberg",
        "type": "hadoop",
        "name": "lake",
        "warehouseUri": "file:///wh",
        "source": "spark",
    }
    assert (facets["storage"]["storageLayer"], facets["storage"]["fileFormat"]) == ("iceberg", "orc")
    assert (facets["dataSource"]["name"], facets["dataSource"]["uri"]) == ("file", "file")
    assert facets["symlinks"]["identifiers"] == [
        {"namespace": "file:/wh", "name": "db.summary", "type": "TABLE"}
    ]
    statistics = output["outputFacets"]["outputStatistics"]
    assert (statistics["rowCount"], statistics["fileCount"], statistics["size"]) == (3, 2, 1300)
    details = event["run"]["facets"]["spark_applicationDetails"]
    assert (details["applicationId"], details["appName"]) == (APPLICATION["id"], APPLICATION["name"])
    shown = {
        "inputs": [
            {"namespace": d["namespace"], "name": d["name"], "facets": {"version": d["facets"]["version"]}}
            for d in _without_schema_urls(event["inputs"])
        ],
        "outputs": _without_schema_urls(event["outputs"]),
        "run": {"facets": _without_schema_urls(event["run"]["facets"])},
    }
    assert shown == json.loads(DOCUMENTED_CREATE_EVENT)


@pytest.mark.parametrize(
    ("operator", "mode", "parent", "state"),
    [
        (IcebergOverwriteOperator, "overwrite", 41, "OVERWRITE"),
        (IcebergOverwritePartitionsOperator, "overwrite_partitions", 41, "OVERWRITE"),
        (IcebergCreateTableOperator, "create_or_replace", 41, "OVERWRITE"),
        (IcebergCreateTableOperator, "create_or_replace", None, "CREATE"),
        (IcebergAppendOperator, "append", 41, None),
    ],
)
def test_a_writes_lifecycle_state_follows_its_mode(lake, operator, mode, parent, state):
    extra = {"condition": "id = 1"} if operator is IcebergOverwriteOperator else {}
    op = operator(task_id="w", table="db.t", iceberg_conn_id=lake, source_query="SELECT 1 AS id", **extra)
    if operator is IcebergCreateTableOperator:
        op.mode = mode
    lineage = {"tables": _described("lake.db.t", "file:/wh/db/t", 42)}
    (output,) = _run(op, {**_commit("lake.db.t", mode, parent=parent), "lineage": lineage})["outputs"]
    assert output["facets"].get("lifecycleStateChange", {}).get("lifecycleStateChange") == state


def test_a_merge_reads_its_source_and_its_own_table_at_the_snapshot_it_changed(lake):
    op = IcebergMergeOperator(
        task_id="m", table="db.t", iceberg_conn_id=lake, source_table="db.s", keys=["id"]
    )
    lineage = {
        "tables": {
            **_described("lake.db.t", "file:/wh/db/t", 42),
            **_described("lake.db.s", "file:/wh/db/s", 5),
        }
    }
    event = _run(op, {**_commit("lake.db.t", None, snapshot_id=42, parent=41), "lineage": lineage})
    inputs = {(d["name"], d["facets"]["version"]["datasetVersion"]) for d in event["inputs"]}
    assert inputs == {("/wh/db/s", "5"), ("/wh/db/t", "41")}
    assert _names(event["outputs"]) == [("file", "/wh/db/t")]
    assert event["outputs"][0]["facets"]["version"]["datasetVersion"] == "42"


def test_a_branch_write_keeps_the_tables_name_and_names_the_branch_in_its_symlink(lake):
    op = IcebergAppendOperator(
        task_id="w", table="db.t", iceberg_conn_id=lake, source_query="SELECT 1 AS id", branch="audit"
    )
    lineage = {"tables": _described("lake.db.t", "file:/wh/db/t", 41)}
    (output,) = _run(op, {**_commit("lake.db.t", "append", branch="audit"), "lineage": lineage})["outputs"]
    # as openlineage-spark names an INSERT INTO db.t.branch_audit: the table's location, and the
    # branch in the symlink
    assert (output["namespace"], output["name"]) == ("file", "/wh/db/t")
    assert output["facets"]["symlinks"]["identifiers"][0]["name"] == "db.t.branch_audit"
    assert output["facets"]["version"]["datasetVersion"] == "42"  # the branch's commit


def test_file_sources_and_sinks_are_datasets_named_by_their_location(lake):
    append = IcebergAppendOperator(
        task_id="w",
        table="db.t",
        iceberg_conn_id=lake,
        source_path="s3a://landing/orders/",
        source_format="json",
    )
    lineage = {"tables": _described("lake.db.t", "file:/wh/db/t", 42)}
    event = _run(append, {**_commit("lake.db.t", "append"), "lineage": lineage})
    assert _names(event["inputs"]) == [("s3://landing", "orders")]
    assert event["inputs"][0]["facets"]["storage"]["fileFormat"] == "json"

    read = IcebergTimeTravelReadOperator(
        task_id="r", table="db.t", iceberg_conn_id=lake, snapshot_id=7, sink_path="/exports/t"
    )
    result = {
        "status": "success",
        "table": "lake.db.t",
        "snapshot_id": 7,
        "row_count": 3,
        "sink": {"path": "/exports/t", "format": "parquet"},
        "lineage": lineage,
    }
    event = _run(read, result)
    assert [(d["name"], d["facets"]["version"]["datasetVersion"]) for d in event["inputs"]] == [
        ("/wh/db/t", "7")
    ]
    assert _names(event["outputs"]) == [("file", "/exports/t")]


def test_a_facet_that_breaks_its_schema_is_caught():
    """The validation itself can fail: a lifecycle state the spec does not know."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    from airflow_iceberg.operators.openlineage_datasets import table_dataset

    dataset = table_dataset(_described("t", "file:/wh/t", 1)["t"], output=True)
    dataset.facets["schema"].fields[0].type = 5  # not a string
    with pytest.raises(AssertionError, match="is not valid against"):
        validate(OperatorLineage(outputs=[dataset]))

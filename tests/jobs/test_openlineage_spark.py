"""openlineage-spark beside the operators: both producers name every dataset identically.

openlineage-spark 1.53 (from Maven Central, ``OPENLINEAGE_SPARK_JAR``; scripts/setup.sh fetches
it) is the peer implementation and the independent reader here. Its listener is registered on
the shared session for these jobs only, with a file transport; each job runs as spark-submit
runs it (``iceberg_job.main``), and the names the operators give the job's datasets
(:func:`airflow_iceberg.assets.table_dataset_names` of the job's own lineage description, the
names ``operators/openlineage_datasets.py`` emits) must be names openlineage-spark gives the
same datasets in the same role, with the same symlink: a create from a query, a merge from a
table, a read to files and a write on an audit branch. ``test_openlineage_dag.py`` does the same
for the example DAG's tasks, as their operators build and report them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from airflow_iceberg.assets import table_asset_uri, table_dataset_names
from airflow_iceberg.catalog.config import CatalogConfig
from airflow_iceberg.jobs import iceberg_job
from airflow_iceberg.jobs.spec.action import ActionSpec
from airflow_iceberg.jobs.spec.request import JobRequest
from airflow_iceberg.jobs.spec.row_changes import MergeSpec
from airflow_iceberg.jobs.spec.sources import Source
from airflow_iceberg.naming import location_dataset
from tests.jobs.conftest import openlineage_spark_jar
from tests.jobs.helpers import CATALOG, read_spec, values_query, write_spec
from tests.jobs.openlineage_spark import LISTENER_FAILS_ON_SPARK_41, Names, assert_named_alike, spark_schemas

pytestmark = pytest.mark.skipif(
    openlineage_spark_jar() is None,
    reason="openlineage-spark's jar is missing: run `make setup` (it fetches OPENLINEAGE_SPARK_JAR)",
)


def run(spec: ActionSpec, tmp_path: Path) -> dict:
    """Run one job as spark-submit runs it; its result, with the lineage the operator reads."""
    result_file = tmp_path / f"result-{time.monotonic_ns()}.json"
    assert iceberg_job.main(JobRequest(spec=spec, result_file=str(result_file)).to_argv()) == 0
    return json.loads(result_file.read_text())


@pytest.fixture
def catalog(warehouse) -> CatalogConfig:
    """The shared session's ``lake`` catalog as its Airflow connection describes it."""
    return CatalogConfig(catalog_name=CATALOG, catalog_type="hadoop", warehouse=str(warehouse))


def table_names(result: dict, catalog: CatalogConfig, table: str, branch: str | None = None) -> Names:
    described = result["lineage"]["tables"][table]
    return table_dataset_names(described["location"], table_asset_uri(catalog, table), branch)


def test_a_create_from_a_query_is_named_as_openlineage_spark_names_it(
    spark, new_table, tmp_path, catalog, openlineage_events
):
    orders, summary = new_table("orders"), new_table("summary")
    run(write_spec(orders, "create", values_query([(1, "a"), (2, "b")], "id, name")), tmp_path)
    query = (
        "SELECT CAST(id AS BIGINT) AS id, upper(name) AS name, CAST(id AS DECIMAL(10, 2)) AS amount, "
        "named_struct('label', name, 'tags', array(name)) AS detail, map(name, id) AS counts "
        f"FROM {orders}"
    )
    result = run(write_spec(summary, "create", query), tmp_path)

    events = openlineage_events()
    assert result["lineage"]["query_tables"] == [{"table": orders, "snapshot_id": None}]
    assert_named_alike(events, "inputs", [table_names(result, catalog, orders)])
    (output, _) = ours = table_names(result, catalog, summary)
    assert_named_alike(events, "outputs", [ours])
    # the schema facet, nested fields included, is openlineage-spark's too
    assert result["lineage"]["tables"][summary]["schema"] in spark_schemas(events, output)


@LISTENER_FAILS_ON_SPARK_41
def test_a_merge_from_a_table_is_named_as_openlineage_spark_names_it(
    spark, new_table, tmp_path, catalog, openlineage_events
):
    target, source = new_table("target"), new_table("changes")
    run(write_spec(target, "create", values_query([(1, "a")], "id, name")), tmp_path)
    run(write_spec(source, "create", values_query([(1, "b"), (2, "c")], "id, name")), tmp_path)
    merge = MergeSpec(target, source=Source(table=source), keys=("id",)).validated()
    result = run(merge, tmp_path)

    events = openlineage_events()
    # the merge's source, and its own table, which openlineage-spark lists as an input as well
    assert_named_alike(
        events, "inputs", [table_names(result, catalog, source), table_names(result, catalog, target)]
    )
    assert_named_alike(events, "outputs", [table_names(result, catalog, target)])


def test_a_read_to_files_is_named_as_openlineage_spark_names_it(
    spark, new_table, tmp_path, catalog, openlineage_events
):
    table, files = new_table("events"), tmp_path / "export"
    run(write_spec(table, "create", values_query([(1, "a")], "id, name")), tmp_path)
    result = run(read_spec(table, sink_path=str(files), sink_format="parquet"), tmp_path)

    events = openlineage_events()
    assert_named_alike(events, "inputs", [table_names(result, catalog, table)])
    assert_named_alike(events, "outputs", [(location_dataset(str(files)), None)])


def test_a_branch_write_is_named_as_openlineage_spark_names_it(
    spark, new_table, tmp_path, catalog, openlineage_events
):
    table = new_table("audited")
    run(write_spec(table, "create", values_query([(1, "a")], "id, name")), tmp_path)
    result = run(write_spec(table, "append", values_query([(2, "b")], "id, name"), branch="audit"), tmp_path)

    events = openlineage_events()
    (namespace, name), symlink = table_names(result, catalog, table, branch="audit")
    assert symlink is not None and symlink[1].endswith(".branch_audit")
    assert_named_alike(events, "outputs", [((namespace, name), symlink)])


def test_openlineage_spark_takes_its_parent_job_from_the_application_not_from_session_settings(
    spark, new_table, tmp_path, openlineage_events
):
    """What a Spark Connect client could set, a session's ``spark.openlineage.parent*``, links nothing.

    The listener reads its parent and root parent once, from the application's SparkConf, when
    it starts (openlineage-spark 1.53's ``EventEmitter``); session settings, the only ones a
    Connect client can give, are never read. So over Spark Connect the operators do not set
    them, and Spark's events of a task are children of the server's application run instead.
    """
    table, run_id = new_table("linked"), "01936f0e-7d1a-7c3e-9c55-4d2f8a7b6e10"
    parent = {
        "spark.openlineage.parentJobNamespace": "airflow",
        "spark.openlineage.parentJobName": "orders.load",
        "spark.openlineage.parentRunId": run_id,
        "spark.openlineage.rootParentJobNamespace": "airflow",
        "spark.openlineage.rootParentJobName": "orders",
        "spark.openlineage.rootParentRunId": run_id,
    }
    for key, value in parent.items():
        spark.conf.set(key, value)
    try:
        run(write_spec(table, "create", values_query([(1, "a")], "id, name")), tmp_path)
    finally:
        for key in parent:
            spark.conf.unset(key)

    parents = [
        event["run"]["facets"]["parent"]
        for event in openlineage_events()
        if "parent" in event["run"]["facets"]
    ]
    assert parents, "openlineage-spark gave its events no parent at all"
    for facet in parents:
        assert run_id not in json.dumps(facet) and "orders.load" not in json.dumps(facet), facet
        assert facet["job"]["namespace"] == "job-tests"  # the application's own run is the parent

"""The story DAGs from the source documents, each run end to end and checked with pyiceberg.

They run against the REST catalog on S3 (SeaweedFS, shared by the session), where most users keep
their tables, with the runtime and iceberg-aws-bundle as local jars; pyiceberg's RestCatalog reads
the results. The Hadoop catalog keeps its own example-DAG run (``test_example_dag.py``). The four
DAGs run one after another in one Airflow process (:mod:`.dag_batch`), which saves three Airflow
start-ups; ``test_spark_connect.py`` runs the same four DAGs over Spark Connect.

The FileIO is ResolvingFileIO, not S3FileIO: Iceberg's streaming source writes its initial offset
into the (local) checkpoint folder through the table's FileIO, and S3FileIO refuses ``file:``
paths ("Invalid S3 URI, cannot determine scheme"). ResolvingFileIO picks S3FileIO for the table
and HadoopFileIO for the checkpoint.
"""

from __future__ import annotations

from datetime import date

import pytest

from tests.integration.airflow_runner import spark_connection
from tests.integration.catalog_connections import RESOLVING_FILE_IO, rest_reader, rest_spark_connection


@pytest.fixture(scope="module")
def stories(airflow_runner, rest_catalog, tmp_path_factory):
    """The four story DAGs, run one after another in one Airflow process; pyiceberg's reader."""
    checkpoints = tmp_path_factory.mktemp("checkpoints")
    completed = airflow_runner.dags_test(
        "2024-01-02",
        "iceberg_emr_quickstart",
        "iceberg_prophecy_target",
        "iceberg_daily_diff",
        f'iceberg_incremental_feed:{{"checkpoints": "{checkpoints}"}}',
        connections={
            "iceberg_catalog_default": rest_spark_connection(
                rest_catalog, packages=False, io_impl=RESOLVING_FILE_IO
            ),
            "spark_default": spark_connection(),
        },
    )
    assert completed.returncode == 0, (completed.stdout + completed.stderr)[-5000:]
    assert "Spark-Submit cmd" in completed.stdout + completed.stderr
    return {"catalog": rest_reader(rest_catalog), "checkpoints": checkpoints}


def test_emr_quickstart_reads_six_rows_then_three_from_the_first_snapshot(stories, airflow_runner):
    catalog = stories["catalog"]
    sample = catalog.load_table("iceberg_db.sample")
    first, second = sample.snapshots()
    assert sorted(sample.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": i, "data": d} for i, d in zip(range(1, 7), "abcdef", strict=True)
    ]
    read_all = airflow_runner.xcom("iceberg_emr_quickstart", "read_all")
    assert (read_all["row_count"], read_all["snapshot_id"]) == (6, second.snapshot_id)
    assert sorted(r["id"] for r in read_all["preview"]) == [1, 2, 3, 4, 5, 6]
    read_first = airflow_runner.xcom("iceberg_emr_quickstart", "read_first_snapshot")
    assert (read_first["row_count"], read_first["snapshot_id"]) == (3, first.snapshot_id)
    assert sorted((r["id"], r["data"]) for r in read_first["preview"]) == [(1, "a"), (2, "b"), (3, "c")]
    assert sample.scan(snapshot_id=first.snapshot_id).to_arrow().num_rows == 3


def test_prophecy_target_merges_schema_and_replaces_one_department(stories):
    catalog = stories["catalog"]
    employees = catalog.load_table("prophecy_doc_demo.employees_test")
    assert [f.name for f in employees.schema().fields] == ["Id", "Name", "Department", "Salary", "Bonus"]
    assert [(str(f.transform), f.name) for f in employees.spec().fields] == [("identity", "Department")]
    assert employees.metadata.properties["write.spark.accept-any-schema"] == "true"
    rows = {
        (r["Name"], r["Department"], r["Salary"], r["Bonus"]) for r in employees.scan().to_arrow().to_pylist()
    }
    assert rows == {
        ("Ann", "Engineering", 110, 10),
        ("Eve", "Engineering", 95, 0),
        ("Cid", "Sales", 80, None),
        ("Dee", "Sales", 85, 5),
    }
    replace = employees.snapshots()[-1].summary
    assert (replace.operation.value, replace["deleted-records"], replace["changed-partition-count"]) == (
        "overwrite",
        "2",
        "1",
    )


def test_daily_diff_compares_versions_read_by_snapshot_id_and_by_timestamp(stories, airflow_runner):
    catalog = stories["catalog"]
    orders = catalog.load_table("diff_demo.orders")
    yesterday, today = orders.snapshots()
    assert airflow_runner.xcom("iceberg_daily_diff", "before")["snapshot_id"] == yesterday.snapshot_id
    after = airflow_runner.xcom("iceberg_daily_diff", "after")
    assert (after["selector"], after["snapshot_id"]) == ("as_of_timestamp", today.snapshot_id)
    diff = {
        (r["change"], r["id"], r["amount"], r["day"])
        for r in catalog.load_table("diff_demo.daily_diff").scan().to_arrow().to_pylist()
    }
    day_one, day_two = date(2024, 1, 1), date(2024, 1, 2)
    assert diff == {
        ("added", 2, 21, day_one),
        ("added", 10, 100, day_two),
        ("added", 11, 110, day_two),
        ("added", 12, 120, day_two),
        ("removed", 2, 20, day_one),
        ("removed", 4, 40, day_one),
    }


def test_incremental_feed_copies_only_new_rows_and_the_stream_resumes(stories, airflow_runner):
    catalog, checkpoints = stories["catalog"], stories["checkpoints"]
    events = catalog.load_table("feed.events")
    created, _batch_one, two, _batch_three = events.snapshots()
    new_events = catalog.load_table("feed.new_events").scan().to_arrow()
    assert sorted(new_events["id"].to_pylist()) == list(range(10, 20))
    incremental = airflow_runner.xcom("iceberg_incremental_feed", "new_since_create")
    assert (incremental["start_snapshot_id"], incremental["end_snapshot_id"]) == (
        created.snapshot_id,
        two.snapshot_id,
    )
    mirror = catalog.load_table("feed.events_mirror")
    assert sorted(mirror.scan().to_arrow()["id"].to_pylist()) == list(range(10, 25))
    first_run, second_run = (s.summary for s in mirror.snapshots())
    assert (first_run["added-records"], second_run["added-records"]) == ("10", "5")
    assert airflow_runner.xcom("iceberg_incremental_feed", "mirror_again")["rows_read"] == 5
    assert list(checkpoints.rglob("offsets"))

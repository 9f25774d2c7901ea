"""The job's lineage description: each table's location, schema and snapshot, for OpenLineage."""

from __future__ import annotations

import json

from airflow_iceberg.jobs import iceberg_job
from airflow_iceberg.jobs.lineage import describe_tables, tables_of
from airflow_iceberg.jobs.spec.request import JobRequest
from airflow_iceberg.jobs.spec.sources import Source
from airflow_iceberg.jobs.spec.writes import WriteSpec
from tests.jobs.helpers import values_query


def test_the_result_describes_the_target_and_source_tables(spark, lake, new_table, tmp_path):
    source, target = new_table("src"), new_table("dst")
    create = WriteSpec(source, "create", Source(query=values_query([(1, "a")], "id, name")))
    copy = WriteSpec(target, "create", Source(table=source))
    assert tables_of(copy) == [target, source]
    for spec, name in ((create, "a.json"), (copy, "b.json")):
        request = JobRequest(spec=spec.validated(), result_file=str(tmp_path / name))
        assert iceberg_job.main(request.to_argv()) == 0

    lineage = json.loads((tmp_path / "b.json").read_text())["lineage"]
    assert set(lineage) == {target, source}
    for table in (target, source):
        described = lineage[table]
        assert described["location"].rstrip("/").endswith("/".join(table.split(".")[1:]))
        assert described["schema"] == [{"name": "id", "type": "int"}, {"name": "name", "type": "string"}]
        assert described["snapshot_id"] == lake.current_snapshot_id(table)


def test_a_table_that_does_not_exist_is_left_out(spark, new_table):
    assert describe_tables(spark, [new_table("missing")]) == {}

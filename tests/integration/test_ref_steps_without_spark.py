"""Publish, tag and rollback through pyiceberg in the worker, end to end: real Airflow, real catalogs.

One ``airflow dags test`` per back end (the session's REST catalog on SeaweedFS, and its Hive
metastore) of ``tests/integration/dags/iceberg_ref_steps.py``: publish a pinned audit branch and
drop it, publish it again (as a retry would: already published, nothing changes), tag the
published snapshot, roll ``main`` back. Every task asks for ``engine="pyiceberg"``, and no
spark-submit may run. The table and its branch are made, and every outcome read back, by
pyiceberg's own catalog clients configured from the server fixtures, not by the provider.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pyarrow as pa
import pytest

from tests.heavy_modules import KUBERNETES, PYSPARK, SPARK_SUBMIT
from tests.integration.airflow_runner import REPO, recorded_imports, recording_imports, spark_connection
from tests.integration.catalog_connections import (
    hive_connection,
    hive_reader,
    rest_reader,
    rest_spark_connection,
)

DAG_ID = "iceberg_ref_steps"
TEST_DAGS = REPO / "tests" / "integration" / "dags"
TABLE = "ref_steps.orders"
WEEK_MS = 7 * 86_400_000


def _backend(request: pytest.FixtureRequest, backend: str) -> tuple[dict[str, Any], Any]:
    """The connection for ``backend`` and pyiceberg's own client of it (its server starts on first use)."""
    if backend == "rest":
        rest = request.getfixturevalue("rest_catalog")
        return rest_spark_connection(rest), rest_reader(rest)
    metastore = request.getfixturevalue("hive_metastore")
    return hive_connection(metastore), hive_reader(metastore)


def _audited_branch(catalog: Any) -> tuple[int, int]:
    """``main`` at one append and ``audit`` one append ahead of it: (main's snapshot, the branch's)."""
    rows = pa.table({"order_id": pa.array([1, 2], pa.int64()), "status": pa.array(["new", "paid"])})
    catalog.create_namespace_if_not_exists("ref_steps")
    table = catalog.create_table(TABLE, schema=rows.schema)
    table.append(rows)
    before = table.current_snapshot().snapshot_id
    table.manage_snapshots().create_branch(before, "audit").commit()
    table.append(rows, branch="audit")
    return before, catalog.load_table(TABLE).refs()["audit"].snapshot_id


@pytest.mark.parametrize("backend", ["rest", "hive"])
def test_publish_tag_and_rollback_run_in_the_worker_without_spark_on_a_real_catalog(
    backend, airflow_runner, request, tmp_path
):
    connection, catalog = _backend(request, backend)
    before, audited = _audited_branch(catalog)

    started = time.monotonic()
    completed = airflow_runner.airflow(
        "dags",
        "test",
        DAG_ID,
        "2024-03-01",
        "-c",
        json.dumps({"table": TABLE, "audited": str(audited), "before": str(before)}),
        connections={"iceberg_catalog_default": connection, "spark_default": spark_connection()},
        env={"AIRFLOW__CORE__DAGS_FOLDER": str(TEST_DAGS), **recording_imports(tmp_path / "imports.jsonl")},
    )
    output = completed.stdout + completed.stderr
    print(
        f"{backend}: four ref steps through pyiceberg in {time.monotonic() - started:.1f} s (whole CLI run)"
    )
    assert completed.returncode == 0 and "Task failed with exception" not in output, output[-6000:]
    assert "Spark-Submit cmd" not in output, "a ref step started spark-submit"
    assert output.count("in this worker through pyiceberg") == 4, output[-6000:]
    # In the task process (tests/integration/plugins/imported_modules.py): pyiceberg, no Spark code.
    records = recorded_imports(tmp_path / "imports.jsonl")
    assert len(records) == 8 and records[0]["heavy"] == [], records
    heavy = {name for record in records for name in record["heavy"]}
    assert "pyiceberg" in heavy and heavy.isdisjoint((*SPARK_SUBMIT, *KUBERNETES, *PYSPARK)), records

    xcoms = {
        task: airflow_runner.xcom(DAG_ID, task) for task in ("publish", "publish_again", "tag", "rollback")
    }
    qualified = f"{connection['extra']['catalog_name']}.{TABLE}"
    assert xcoms["publish"] == {
        "status": "success",
        "table": qualified,
        "branch": "audit",
        "target_branch": "main",
        "previous_snapshot_id": before,
        "snapshot_id": audited,
        "already_published": False,
        "target_branch_created": False,
        "branch_dropped": True,
        "branch_snapshot_id": audited,
        "branch_holds_unpublished_commits": False,
    }
    again = xcoms["publish_again"]
    assert (again["already_published"], again["snapshot_id"], again["branch_dropped"]) == (
        True,
        audited,
        False,
    )
    assert xcoms["tag"] == {
        "status": "success",
        "table": qualified,
        "tag": "eod",
        "snapshot_id": audited,
        "retain_days": 7,
        "already_tagged": False,
    }
    rolled = xcoms["rollback"]
    assert (rolled["previous_snapshot_id"], rolled["snapshot_id"], rolled["already_rolled_back"]) == (
        audited,
        before,
        False,
    )

    table = catalog.load_table(TABLE)
    refs = table.metadata.refs
    markers = [name for name in refs if name.startswith("airflow_iceberg_pin_")]
    assert sorted(refs) == sorted(["main", "eod", *markers]) and len(markers) == 1  # audit was dropped
    assert (refs["main"].snapshot_id, refs["eod"].snapshot_id, refs["eod"].max_ref_age_ms) == (
        before,
        audited,
        WEEK_MS,
    )
    assert refs[markers[0]].snapshot_id == audited  # where main was when the rollback began
    assert [entry.snapshot_id for entry in table.metadata.snapshot_log][-3:] == [before, audited, before]
    assert sorted(row["order_id"] for row in table.scan().to_arrow().to_pylist()) == [1, 2]

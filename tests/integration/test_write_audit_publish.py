"""The write-audit-publish example DAG, run by real Airflow with spark-submit, checked with pyiceberg.

One full run tells the success story: the merge lands on a branch only, the audit reads that
branch, the check passes, main is fast-forwarded to the merge's snapshot, the branch is dropped
and the snapshot tagged. A second run takes the failure path cheaply: the table is kept (its
create task is marked successful without running) and the check is given a threshold no branch
meets, so the merge and audit run, the check fails, and publish never runs: main is untouched.
Then the maintenance example DAGs look after the same table over Spark Connect (the merges above
are spark-submit only; upkeep runs in both modes): the daily one compacts yesterday's partition,
the weekly one expires snapshots, rewrites manifests and removes a planted orphan file.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from datetime import datetime, timezone

import pytest

from scripts.show_table import load_table
from tests.integration.airflow_runner import hadoop_catalog_connection, spark_connection

DAG_ID = "iceberg_write_audit_publish"


@pytest.fixture(scope="module")
def wap(airflow_runner, spark_connect_server, tmp_path_factory):
    """Run the success story, then the failing audit; return what each left behind."""
    warehouse = tmp_path_factory.mktemp("wap_warehouse")
    connections = {
        "iceberg_catalog_default": hadoop_catalog_connection(warehouse),
        "spark_default": spark_connection(),
    }

    def run(day: str, *extra: str):
        return airflow_runner.airflow("dags", "test", DAG_ID, day, *extra, connections=connections)

    success = run("2024-01-02")
    assert success.returncode == 0, (success.stdout + success.stderr)[-5000:]
    published = load_table(warehouse, "wap_demo.orders")
    xcoms = {
        task: airflow_runner.xcom(DAG_ID, task)
        for task in ("merge_changes", "audit", "check_audit", "publish", "tag_end_of_day")
    }
    failure = run(
        "2024-01-03", "-c", json.dumps({"max_bad_rows": -1}), "--mark-success-pattern", "create_orders"
    )
    after_failure = load_table(warehouse, "wap_demo.orders")
    # The maintenance DAG runs over Spark Connect: the same DAG file, only spark_default differs.
    # (Its spark-submit path is the operators' common one; its orphan-file action runs through
    # spark-submit in test_retries_and_kills.py.)
    over_connect = {**connections, "spark_default": spark_connect_server.connection()}
    maintenance = airflow_runner.airflow(
        "dags", "test", "iceberg_maintenance_daily", "2024-01-02", connections=over_connect
    )
    output = maintenance.stdout + maintenance.stderr
    assert maintenance.returncode == 0, output[-5000:]
    assert "Spark-Submit cmd" not in output
    compacted = load_table(warehouse, "wap_demo.orders")
    # The weekly upkeep, also over Connect, run today: a stray data file (what a killed write
    # leaves) dated ten days back is past the DAG's three-day cutoff and must go; every row stays.
    # (The table's own files are minutes old, and a cutoff under a day ago is refused.)
    data_dir = warehouse / "wap_demo" / "orders" / "data"
    stray = next(data_dir.rglob("*.parquet")).with_name("00000-killed-write.parquet")
    stray.write_bytes(next(data_dir.rglob("*.parquet")).read_bytes())
    ten_days_ago = time.time() - 10 * 86400
    os.utime(stray, (ten_days_ago, ten_days_ago))
    today = datetime.now(timezone.utc).date().isoformat()
    weekly = airflow_runner.airflow(
        "dags", "test", "iceberg_maintenance_weekly", today, connections=over_connect
    )
    assert weekly.returncode == 0, (weekly.stdout + weekly.stderr)[-5000:]
    return {
        "published": published,
        "xcoms": xcoms,
        "failure": failure,
        "after_failure": after_failure,
        "failed_run_states": _task_states(airflow_runner, "2024-01-03"),
        "compacted": compacted,
        "compaction": airflow_runner.xcom("iceberg_maintenance_daily", "compact_yesterday"),
        "orphans": airflow_runner.xcom("iceberg_maintenance_weekly", "remove_orphan_files"),
        "stray": stray,
        "after_weekly": load_table(warehouse, "wap_demo.orders"),
    }


def _task_states(airflow_runner, day: str) -> dict[str, str]:
    with sqlite3.connect(airflow_runner.home / "airflow.db") as db:
        rows = db.execute(
            "SELECT ti.task_id, ti.state FROM task_instance ti JOIN dag_run dr "
            "ON ti.dag_id = dr.dag_id AND ti.run_id = dr.run_id "
            "WHERE ti.dag_id = ? AND dr.logical_date LIKE ?",
            (DAG_ID, f"{day}%"),
        ).fetchall()
    return dict(rows)


def _rows(table, snapshot_id=None):
    scan = table.scan(snapshot_id=snapshot_id) if snapshot_id else table.scan()
    return sorted((r["order_id"], r["customer_id"], float(r["amount"])) for r in scan.to_arrow().to_pylist())


def test_audited_changes_are_published_to_main_and_tagged(wap):
    orders, xcoms = wap["published"], wap["xcoms"]
    merge = xcoms["merge_changes"]
    assert _rows(orders) == [
        (1, 11, 19.5),
        (2, 12, 7.25),
        (4, 14, 20.0),
        (5, 15, 25.0),
        (10, 14, 42.0),
        (11, 15, 8.0),
    ]
    refs = {
        name: (ref.snapshot_ref_type.value, ref.snapshot_id) for name, ref in orders.metadata.refs.items()
    }
    assert refs == {"main": ("branch", merge["snapshot_id"]), "eod_20240102": ("tag", merge["snapshot_id"])}
    assert orders.metadata.refs["eod_20240102"].max_ref_age_ms == 30 * 24 * 3600 * 1000
    summary = orders.snapshot_by_id(merge["snapshot_id"]).summary
    assert summary["airflow-iceberg.commit-id"].startswith(f"{DAG_ID}:merge_changes:")
    # merge-on-read: 4 rows written (2 updated, 2 new), 3 marked deleted (2 old versions, 1 cancelled);
    # Iceberg's total-records counts data-file rows, deleted or not.
    assert (merge["branch"], merge["committed"], merge["added_records"]) == ("audit_20240102", True, 4)
    assert (summary["added-position-deletes"], summary["total-records"]) == ("3", "9")
    assert (xcoms["audit"]["selector"], xcoms["audit"]["row_count"]) == ("branch", 0)
    assert xcoms["audit"]["snapshot_id"] == merge["snapshot_id"]
    assert xcoms["check_audit"] == {"audited_snapshot_id": merge["snapshot_id"], "bad_rows": 0}
    publish = xcoms["publish"]
    assert (publish["previous_snapshot_id"], publish["snapshot_id"]) == (
        merge["parent_snapshot_id"],
        merge["snapshot_id"],
    )
    # Publish pinned the audited snapshot; the end-of-day tag names the snapshot published.
    assert (publish["already_published"], publish["branch_dropped"]) == (False, True)
    assert publish["snapshot_id"] == xcoms["check_audit"]["audited_snapshot_id"]
    tag = xcoms["tag_end_of_day"]
    assert (tag["tag"], tag["snapshot_id"]) == ("eod_20240102", publish["snapshot_id"])
    assert tag["already_tagged"] is False


def test_a_failed_audit_leaves_main_untouched_and_the_branch_for_inspection(wap):
    before, after = wap["published"], wap["after_failure"]
    assert wap["failed_run_states"] == {
        "create_orders": "success",  # marked, not run: the table of the first run is kept
        "merge_changes": "success",
        "audit": "success",
        "check_audit": "failed",
        "publish": "upstream_failed",
        "tag_end_of_day": "upstream_failed",
    }
    assert "audit failed: 0 rows match" in wap["failure"].stdout + wap["failure"].stderr
    refs = after.metadata.refs
    assert refs["main"].snapshot_id == before.metadata.refs["main"].snapshot_id
    assert _rows(after) == _rows(before)
    assert set(refs) == {"main", "eod_20240102", "audit_20240103"}
    branch_head = after.snapshot_by_id(refs["audit_20240103"].snapshot_id)  # the merge, on the branch only
    assert branch_head.parent_snapshot_id == refs["main"].snapshot_id
    assert branch_head.summary["airflow-iceberg.commit-id"].startswith(f"{DAG_ID}:merge_changes:")


def _day_files(table, day: str) -> tuple[int, int]:
    """(data files, delete files) of one day's partition of the current snapshot."""
    tasks = list(table.scan(row_filter=f"order_date == '{day}'").plan_files())
    return len(tasks), sum(len(task.delete_files) for task in tasks)


def test_daily_maintenance_compacts_yesterdays_partition_and_keeps_every_row(wap):
    before, after, compaction = wap["after_failure"], wap["compacted"], wap["compaction"]
    assert _rows(after) == _rows(before)
    files_before, deletes_before = _day_files(before, "2024-01-01")
    assert files_before >= 2 and deletes_before >= 1  # the merge's new file and its position deletes
    assert _day_files(after, "2024-01-01") == (1, 0)
    assert _day_files(after, "2024-01-02") == _day_files(before, "2024-01-02")  # today's: untouched
    assert (compaction["rewritten_data_files_count"], compaction["added_data_files_count"]) == (
        files_before,
        1,
    )
    assert compaction["snapshot_id"] == after.metadata.refs["main"].snapshot_id


def test_weekly_upkeep_over_connect_removes_the_stray_file_and_keeps_every_row(wap):
    """Expiry, manifest rewrite and the orphan-file procedure, under real Airflow, over Connect."""
    orphans, stray = wap["orphans"], wap["stray"]
    assert orphans["dry_run"] is False
    assert any(path.endswith(stray.name) for path in orphans["orphan_files"])
    assert not stray.exists()
    assert _rows(wap["after_weekly"]) == _rows(wap["compacted"])
    assert orphans["snapshot_id"] == wap["after_weekly"].metadata.refs["main"].snapshot_id

"""The write-audit-publish example DAG, run by real Airflow with spark-submit, checked with pyiceberg.

One full run tells the success story: the merge lands on a branch only, the audit reads that
branch, the check passes, main is fast-forwarded to the merge's snapshot, the branch is dropped
and the snapshot tagged. A second run takes the failure path cheaply: the table is kept (its
create task is marked successful without running) and the check is given a threshold no branch
meets, so the merge and audit run, the check fails, and publish never runs: main is untouched.
Then that run is repaired as a user would: cleared, its merge, audit and check run again (the
check with a threshold the branch meets), and the merge starts the branch afresh from main.
Before its publish, the daily maintenance DAG runs on the same table over Spark Connect (the
merges above run in spark-submit mode; upkeep runs in both modes): it waits for the audited branch
and changes nothing, so the publish still fast-forwards main. Then the daily DAG, its health
check finding small files and deletes, compacts; the weekly one's health check finds a young
history and few manifests, so expiry and manifest rewrite are skipped, and it removes a planted
orphan file.
"""

from __future__ import annotations

import json
import os
import sqlite3
from datetime import datetime, timezone

import pytest

from scripts.show_table import load_table
from tests.integration.airflow_runner import hadoop_catalog_connection, spark_connection

DAG_ID = "iceberg_write_audit_publish"
DAILY, WEEKLY = "iceberg_maintenance_daily", "iceberg_maintenance_weekly"
#: What a clear-and-repair needs: the check's threshold fixed. A run's conf overrides task params,
#: so the repaired check is told not to let it (the failed run's conf set the impossible threshold).
REPAIRED_CHECK = (
    'check_audit:{"max_bad_rows": 0}',
    {"AIRFLOW__CORE__DAG_RUN_CONF_OVERRIDES_PARAMS": "False"},
)


@pytest.fixture(scope="module")
def wap(airflow_runner, spark_connect_server, tmp_path_factory):
    """Run the success story, the failing audit, its repair around a daily upkeep, and the upkeep after."""
    warehouse = tmp_path_factory.mktemp("wap_warehouse")
    connections = {
        "iceberg_catalog_default": hadoop_catalog_connection(warehouse),
        "spark_default": spark_connection(),
    }

    def run(day: str, *extra: str):
        return airflow_runner.airflow("dags", "test", DAG_ID, day, *extra, connections=connections)

    def table():
        return load_table(warehouse, "wap_demo.orders")

    success = run("2024-01-02")
    assert success.returncode == 0, (success.stdout + success.stderr)[-5000:]
    published = table()
    xcoms = {
        task: airflow_runner.xcom(DAG_ID, task)
        for task in ("merge_changes", "audit", "check_audit", "publish", "tag_end_of_day")
    }
    failure = run(
        "2024-01-03", "-c", json.dumps({"max_bad_rows": -1}), "--mark-success-pattern", "create_orders"
    )
    after_failure = table()
    failed_run_states = _task_states(airflow_runner, DAG_ID, "2024-01-03")
    run_id = _run_id(airflow_runner, DAG_ID, "2024-01-03")
    check, env = REPAIRED_CHECK
    repair = airflow_runner.tasks_batch(
        DAG_ID, run_id, "--clear", "merge_changes", "audit", check, connections=connections, env=env
    )
    assert repair.returncode == 0, (repair.stdout + repair.stderr)[-5000:]
    audited = table()
    repair_merge = airflow_runner.xcom(DAG_ID, "merge_changes")
    # The daily upkeep runs while the audited branch waits to be published. It runs over Spark
    # Connect: the same DAG file, only spark_default differs. (Its spark-submit path is the
    # operators' common one; its orphan-file action runs through spark-submit in
    # test_retries_and_kills.py.)
    over_connect = {**connections, "spark_default": spark_connect_server.connection()}
    waiting = airflow_runner.airflow("dags", "test", DAILY, "2024-01-02", connections=over_connect)
    waiting_output = waiting.stdout + waiting.stderr
    assert waiting.returncode == 0, waiting_output[-5000:]
    waited_states = _task_states(airflow_runner, DAILY, "2024-01-02")
    after_waiting = table()
    publish = airflow_runner.tasks_batch(DAG_ID, run_id, "publish", "tag_end_of_day", connections=connections)
    assert publish.returncode == 0, (publish.stdout + publish.stderr)[-5000:]
    after_publish = table()
    repair_publish = airflow_runner.xcom(DAG_ID, "publish")
    # Then the daily upkeep again, and the weekly one, in one Airflow process. A stray data file
    # (what a killed write leaves), dated well before the weekly DAG's three-day cutoff, must go;
    # every row stays. (The table's own files are minutes old: far younger than any cutoff.)
    data_dir = warehouse / "wap_demo" / "orders" / "data"
    stray = next(data_dir.rglob("*.parquet")).with_name("00000-killed-write.parquet")
    stray.write_bytes(next(data_dir.rglob("*.parquet")).read_bytes())
    long_ago = datetime(2023, 6, 1, tzinfo=timezone.utc).timestamp()
    os.utime(stray, (long_ago, long_ago))
    upkeep = airflow_runner.dags_test("2024-01-02", DAILY, WEEKLY, connections=over_connect)
    upkeep_output = upkeep.stdout + upkeep.stderr
    assert upkeep.returncode == 0, upkeep_output[-5000:]
    assert "Spark-Submit cmd" not in waiting_output + upkeep_output
    return {
        "published": published,
        "xcoms": xcoms,
        "failure": failure,
        "after_failure": after_failure,
        "failed_run_states": failed_run_states,
        "run_id": run_id,
        "audited": audited,
        "repair_merge": repair_merge,
        "waiting_output": waiting_output,
        "waited_states": waited_states,
        "after_waiting": after_waiting,
        "after_publish": after_publish,
        "repair_publish": repair_publish,
        "compaction": airflow_runner.xcom(DAILY, "compact_recent_days"),
        "daily_health": airflow_runner.xcom(DAILY, "check_health"),
        "weekly_health": airflow_runner.xcom(WEEKLY, "check_health"),
        "weekly_states": _task_states(airflow_runner, WEEKLY, "2024-01-02"),
        "upkeep_output": upkeep_output,
        "orphans": airflow_runner.xcom(WEEKLY, "remove_orphan_files"),
        "stray": stray,
        "after_upkeep": table(),
    }


def _task_states(airflow_runner, dag_id: str, day: str) -> dict[str, str]:
    with sqlite3.connect(airflow_runner.home / "airflow.db") as db:
        rows = db.execute(
            "SELECT ti.task_id, ti.state FROM task_instance ti JOIN dag_run dr "
            "ON ti.dag_id = dr.dag_id AND ti.run_id = dr.run_id "
            "WHERE ti.dag_id = ? AND dr.logical_date LIKE ?",
            (dag_id, f"{day}%"),
        ).fetchall()
    return dict(rows)


def _run_id(airflow_runner, dag_id: str, day: str) -> str:
    with sqlite3.connect(airflow_runner.home / "airflow.db") as db:
        [(run_id,)] = db.execute(
            "SELECT run_id FROM dag_run WHERE dag_id = ? AND logical_date LIKE ?", (dag_id, f"{day}%")
        ).fetchall()
    return run_id


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
    # merge-on-read: 4 rows written (2 updated, 2 new), 3 marked deleted (2 old versions, 1 cancelled),
    # so one row more; Iceberg's own deleted-records stays 0, and total-records counts data-file rows.
    assert (merge["branch"], merge["committed"], merge["added_records"]) == ("audit_20240102", True, 4)
    assert (merge["deleted_records"], merge["record_count_change"]) == (3, len(_rows(orders)) - 5) == (3, 1)
    assert (summary["added-position-deletes"], summary["total-records"]) == ("3", "9")
    assert summary.get("deleted-records") is None  # (pyiceberg's Summary has no working `in`)
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


def _refs(table) -> dict[str, int]:
    return {name: ref.snapshot_id for name, ref in table.metadata.refs.items()}


def test_a_cleared_rerun_after_a_failed_audit_starts_the_branch_afresh_from_main(wap):
    """The branch holds main plus exactly the repair's merge: not the failed merge under it."""
    main = wap["published"].metadata.refs["main"].snapshot_id
    audited, merge = wap["audited"], wap["repair_merge"]
    stale = wap["after_failure"].metadata.refs["audit_20240103"].snapshot_id
    assert _refs(audited) == {"main": main, "eod_20240102": main, "audit_20240103": merge["snapshot_id"]}
    head = audited.snapshot_by_id(merge["snapshot_id"])
    assert head.parent_snapshot_id == main and merge["snapshot_id"] != stale
    # A new commit id (the first try after the clear is 2), so the repair merged again.
    assert head.summary["airflow-iceberg.commit-id"].startswith(
        f"{DAG_ID}:merge_changes:{wap['run_id']}:-1:2:"
    )
    assert merge["committed"] is True and "reused_earlier_commit" not in merge
    assert _rows(audited) == _rows(wap["published"])  # main: untouched until the publish
    # The repaired run published its merge: main moved by exactly that one snapshot.
    after = wap["after_publish"]
    assert after.metadata.refs["main"].snapshot_id == merge["snapshot_id"] and "audit_20240103" not in _refs(
        after
    )
    assert (wap["repair_publish"]["previous_snapshot_id"], wap["repair_publish"]["snapshot_id"]) == (
        main,
        merge["snapshot_id"],
    )
    assert _rows(after) == _rows(audited, merge["snapshot_id"])


def test_daily_upkeep_waits_while_the_audited_branch_waits_to_be_published(wap):
    assert wap["waited_states"] == {
        "check_health": "success",
        "compact_recent_days": "skipped",
        "compact_deletes": "skipped",
    }
    assert "compact_recent_days" in wap["waiting_output"]
    assert "branch audit_20240103 (snapshot " in wap["waiting_output"]
    assert "may be waiting to be published" in wap["waiting_output"]
    before, after = wap["audited"], wap["after_waiting"]
    assert after.metadata.last_updated_ms == before.metadata.last_updated_ms  # no commit, not even metadata
    assert _refs(after) == _refs(before)


def _day_files(table, day: str) -> tuple[int, int]:
    """(data files, delete files) of one day's partition of the current snapshot."""
    tasks = list(table.scan(row_filter=f"order_date == '{day}'").plan_files())
    return len(tasks), sum(len(task.delete_files) for task in tasks)


def test_daily_upkeep_compacts_the_last_days_once_published_and_keeps_every_row(wap):
    before, after, compaction = wap["after_publish"], wap["after_upkeep"], wap["compaction"]
    assert _rows(after) == _rows(before)
    files_before, deletes_before = _day_files(before, "2024-01-01")
    assert files_before >= 2 and deletes_before >= 1  # the merges' new files and their position deletes
    assert _day_files(after, "2024-01-01") == (1, 0)
    assert _day_files(after, "2024-01-02") == _day_files(before, "2024-01-02")  # today's: untouched
    assert (compaction["rewritten_data_files_count"], compaction["added_data_files_count"]) == (
        files_before,
        1,
    )
    assert compaction["previous_snapshot_id"] == wap["repair_merge"]["snapshot_id"]  # the published one
    assert after.snapshot_by_id(compaction["snapshot_id"]).summary.operation.value == "replace"


def test_the_daily_health_check_read_the_small_files_from_metadata_and_sent_compaction_there(wap):
    health = wap["daily_health"]
    assert health["snapshot_id"] == wap["repair_merge"]["snapshot_id"]  # judged on what it compacted
    compaction = health["steps"]["rewrite_data_files"]
    assert compaction["needed"] is True
    [(partition, reason)] = compaction["partitions"].items()  # the three days before today: day one only
    assert "2024-01-01" in partition and "files to rewrite (min-input-files 2)" in reason
    files, deletes = _day_files(wap["after_publish"], "2024-01-01")
    assert (
        health["measured"]["data_files"] == files and health["measured"]["position_delete_files"] == deletes
    )
    assert "compact_recent_days" in health["run"]
    assert "rewrite_data_files: needed (1 partition(s) need it" in wap["upkeep_output"]


def test_the_weekly_health_check_skips_expiry_and_manifest_rewrite_of_a_young_small_table(wap):
    assert wap["weekly_states"] == {
        "check_health": "success",
        "expire_snapshots": "skipped",
        "rewrite_manifests": "skipped",
        "remove_orphan_files": "success",  # orphans are in no metadata: removed every week
    }
    steps = wap["weekly_health"]["steps"]
    assert (
        steps["expire_snapshots"]["needed"] is False
        and "old enough to expire" in steps["expire_snapshots"]["reason"]
    )
    assert steps["rewrite_manifests"]["needed"] is False
    assert wap["weekly_health"]["skipped"] == ["expire_snapshots", "rewrite_manifests"]
    # Nothing expired: every snapshot of the compacted table is still there.
    before = {s.snapshot_id for s in wap["after_publish"].snapshots()}
    assert before <= {s.snapshot_id for s in wap["after_upkeep"].snapshots()}


def test_weekly_upkeep_over_connect_removes_the_stray_file_and_keeps_every_row(wap):
    """Expiry, manifest rewrite and the orphan-file procedure, under real Airflow, over Connect."""
    orphans, stray = wap["orphans"], wap["stray"]
    assert orphans["dry_run"] is False
    assert any(path.endswith(stray.name) for path in orphans["orphan_files"])
    assert not stray.exists()
    assert _rows(wap["after_upkeep"]) == _rows(wap["after_publish"])
    assert orphans["snapshot_id"] == wap["after_upkeep"].metadata.refs["main"].snapshot_id

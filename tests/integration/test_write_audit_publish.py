"""The write-audit-publish example DAG, run by real Airflow with spark-submit, checked with pyiceberg.

One full run tells the success story: the merge lands on a branch only, the audit checks that
branch's snapshot, no approval is asked for (the default), main is fast-forwarded to the merge's
snapshot, the branch is dropped and the snapshot tagged. A second run takes the failure path
cheaply: the table is kept (its create task is marked successful without running) and the audit
is given a threshold no branch meets, so the merge and audit run, the audit fails, and publish
never runs: main is untouched. Then that run is repaired as a user would: cleared, its merge and
audit run again (the audit with a threshold the branch meets), and the merge starts the branch
afresh from main.
Before its publish, the daily maintenance DAG runs on the same table over Spark Connect (the
merges above run in spark-submit mode; upkeep runs in both modes): it waits for the audited branch
and changes nothing, so the publish still fast-forwards main. Then the daily DAG, its health
check finding small files and deletes, compacts; the weekly one's health check finds a young
history and few manifests, so expiry and manifest rewrite are skipped, and it removes a planted
orphan file.

Then the real scheduler (api-server, scheduler and dag-processor, LocalExecutor) runs the same
DAG file three times, with no scheduled runs, over the session's Spark Connect server (what is
checked there is the scheduler's handling of the audit gate; the spark-submit path of every task
is the runs above): a run that asks for approval waits, audited, until
the test approves through the REST API's ``hitlDetails``, and publishes exactly the audited
snapshot (main untouched while it waited); a rejected one publishes nothing; a run whose audit
fails publishes nothing and asks no one. The test answers once the scheduler has seen the task
wait (``AirflowDeployment.wait_until_parked``: on Airflow 3.3.2 an answer sooner can fail the
task). A run that ends otherwise than expected brings its task logs and the components' lines
about it into the failure message (``AirflowDeployment.run_report``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import urllib.request
from datetime import datetime, timezone

import pytest

from scripts.show_table import load_table
from tests.integration.airflow_runner import REPO, hadoop_catalog_connection, spark_connection
from tests.integration.airflow_services import AirflowDeployment

DAG_ID = "iceberg_write_audit_publish"
DAILY, WEEKLY = "iceberg_maintenance_daily", "iceberg_maintenance_weekly"
#: What a clear-and-repair needs: the audit's threshold fixed. A run's conf overrides task params,
#: so the repaired audit is told not to let it (the failed run's conf set the impossible threshold).
REPAIRED_AUDIT = (
    'audit:{"max_bad_rows": 0}',
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
    success_states = _task_states(airflow_runner, DAG_ID, "2024-01-02")
    published = table()
    xcoms = {
        task: airflow_runner.xcom(DAG_ID, task)
        for task in ("merge_changes", "audit", "publish", "tag_end_of_day")
    }
    failure = run(
        "2024-01-03", "-c", json.dumps({"max_bad_rows": -1}), "--mark-success-pattern", "create_orders"
    )
    after_failure = table()
    failed_audit = airflow_runner.xcom(DAG_ID, "audit")
    failed_run_states = _task_states(airflow_runner, DAG_ID, "2024-01-03")
    run_id = _run_id(airflow_runner, DAG_ID, "2024-01-03")
    audit, env = REPAIRED_AUDIT
    repair = airflow_runner.tasks_batch(
        DAG_ID, run_id, "--clear", "merge_changes", audit, connections=connections, env=env
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
        "success_states": success_states,
        "published": published,
        "xcoms": xcoms,
        "failure": failure,
        "after_failure": after_failure,
        "failed_audit": failed_audit,
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
    audit = xcoms["audit"]
    assert (audit["selector"], audit["ref"], audit["passed"]) == ("branch", "audit_20240102", True)
    assert audit["snapshot_id"] == merge["snapshot_id"]  # the merge, and nothing else, was audited
    assert audit["row_count"] == len(_rows(orders))
    assert [(rule["rule"], rule["measured"]) for rule in audit["rules"]] == [
        ("min_rows", len(_rows(orders))),
        ("not_null", 0),
        ("not_null", 0),
        ("unique", 0),
        ("row_condition", 0),
        ("aggregate_condition", True),
    ]
    # No approval was asked for: only the approval task was skipped, and publish followed the audit.
    assert wap["success_states"] == {
        "create_orders": "success",
        "merge_changes": "success",
        "audit": "success",
        "approval_required": "success",
        "approve_publish": "skipped",
        "publish": "success",
        "tag_end_of_day": "success",
    }
    publish = xcoms["publish"]
    assert (publish["previous_snapshot_id"], publish["snapshot_id"]) == (
        merge["parent_snapshot_id"],
        merge["snapshot_id"],
    )
    # Publish pinned the audited snapshot; the end-of-day tag names the snapshot published.
    assert (publish["already_published"], publish["branch_dropped"]) == (False, True)
    assert publish["snapshot_id"] == audit["snapshot_id"]
    tag = xcoms["tag_end_of_day"]
    assert (tag["tag"], tag["snapshot_id"]) == ("eod_20240102", publish["snapshot_id"])
    assert tag["already_tagged"] is False


def test_a_failed_audit_leaves_main_untouched_and_the_branch_for_inspection(wap):
    before, after = wap["published"], wap["after_failure"]
    assert wap["failed_run_states"] == {
        "create_orders": "success",  # marked, not run: the table of the first run is kept
        "merge_changes": "success",
        "audit": "failed",
        "approval_required": "upstream_failed",
        "approve_publish": "upstream_failed",
        "publish": "upstream_failed",
        "tag_end_of_day": "upstream_failed",
    }
    output = wap["failure"].stdout + wap["failure"].stderr
    assert "failed 1 of 6 rules; nothing downstream should publish it" in output
    broken = (
        "aggregate_conditions few_bad_rows: 'count_if(amount <= 0 OR customer_id IS NULL) <= -1' is False"
    )
    assert broken in output
    report = wap["failed_audit"]  # pushed before the audit failed
    assert (report["passed"], report["failures"]) == (False, [broken + ", not true"])
    refs = after.metadata.refs
    assert refs["main"].snapshot_id == before.metadata.refs["main"].snapshot_id
    assert _rows(after) == _rows(before)
    assert set(refs) == {"main", "eod_20240102", "audit_20240103"}
    branch_head = after.snapshot_by_id(refs["audit_20240103"].snapshot_id)  # the merge, on the branch only
    assert report["snapshot_id"] == branch_head.snapshot_id
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


# ---------------------------------------------------------------- under the real scheduler

RUN_TIMEOUT_SECONDS = 600
APPROVED_DAY, FAILING_DAY, REJECTED_DAY = "2024-01-02", "2024-01-03", "2024-01-04"


def _rest(airflow: AirflowDeployment, method: str, path: str, body: dict | None = None) -> dict:
    """One call of the deployment's REST API (the all-admins auth manager needs no token)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{airflow.env['AIRFLOW__API__PORT']}/api/v2{path}",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def _trigger(airflow: AirflowDeployment, day: str, conf: dict) -> str:
    run = _rest(
        airflow, "POST", f"/dags/{DAG_ID}/dagRuns", {"logical_date": f"{day}T00:00:00Z", "conf": conf}
    )
    return run["dag_run_id"]


def _run_states(airflow: AirflowDeployment, run_id: str) -> dict[str, str | None]:
    rows = airflow.query(
        "SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = ?", DAG_ID, run_id
    )
    return dict(rows)


def _finished(airflow: AirflowDeployment, run_id: str) -> str:
    def state() -> str | None:
        [(found,)] = airflow.query(
            "SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?", DAG_ID, run_id
        )
        return found if found in ("success", "failed") else None

    return airflow.wait_for(state, f"run {run_id} to finish", RUN_TIMEOUT_SECONDS)


def _answer(airflow: AirflowDeployment, run_id: str, option: str) -> dict:
    """Answer the run's approval as a person would: once it waits, and the scheduler saw it wait."""
    airflow.wait_until_parked(DAG_ID, run_id, "approve_publish", RUN_TIMEOUT_SECONDS)
    hitl = f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/approve_publish/-1/hitlDetails"
    return _rest(airflow, "PATCH", hitl, {"chosen_options": [option]})


def _run_xcom(airflow: AirflowDeployment, run_id: str, task_id: str):
    rows = airflow.query(
        "SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = ? AND key = 'return_value'",
        DAG_ID,
        run_id,
        task_id,
    )
    return json.loads(rows[0][0]) if rows else None


@pytest.fixture(scope="module")
def scheduled(spark_connect_server, tmp_path_factory):
    """Under the real scheduler: an approved run that publishes, then a run whose audit fails."""
    home = tmp_path_factory.mktemp("wap_deployment")
    warehouse = tmp_path_factory.mktemp("wap_scheduled_warehouse")
    dags = home / "dags"
    dags.mkdir()
    dag_file = REPO / "dags" / f"{DAG_ID}.py"
    (dags / dag_file.name).write_text(dag_file.read_text())  # the example DAG, as it is
    env = {
        **os.environ,
        "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT": json.dumps(hadoop_catalog_connection(warehouse)),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark_connect_server.connection()),
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",  # only the runs the test triggers
    }
    # No triggerer: on Airflow 3.3 an approval waits in the awaiting_input state, not deferred.
    components = ("api-server", "scheduler", "dag-processor")
    with AirflowDeployment.running(home, dags, env, components) as airflow:
        airflow.wait_for_dags(DAG_ID)
        approved = _trigger(airflow, APPROVED_DAY, {"require_approval": True})
        airflow.wait_for(
            lambda: _run_states(airflow, approved).get("approve_publish") == "awaiting_input",
            "the audited run to wait for approval",
            RUN_TIMEOUT_SECONDS,
        )
        waiting = {
            "states": _run_states(airflow, approved),
            "table": load_table(warehouse, "wap_demo.orders"),
        }
        hitl = f"/dags/{DAG_ID}/dagRuns/{approved}/taskInstances/approve_publish/-1/hitlDetails"
        waiting["request"] = _rest(airflow, "GET", hitl)
        waiting["response"] = _answer(airflow, approved, "Approve")
        approved_state = _finished(airflow, approved)
        after_approval = load_table(warehouse, "wap_demo.orders")
        # A person rejects the audited snapshot: publish must not run, whatever its trigger rule.
        rejected = _trigger(airflow, REJECTED_DAY, {"require_approval": True})
        _answer(airflow, rejected, "Reject")
        rejected_state = _finished(airflow, rejected)
        after_rejection = {
            "state": rejected_state,
            "states": _run_states(airflow, rejected),
            "xcoms": {task: _run_xcom(airflow, rejected, task) for task in ("create_orders", "audit")},
            "table": load_table(warehouse, "wap_demo.orders"),
            "report": airflow.run_report(DAG_ID, rejected),
        }
        failing = _trigger(airflow, FAILING_DAY, {"max_bad_rows": -1})
        failing_state = _finished(airflow, failing)
        yield {
            "waiting": waiting,
            "approved": {
                "state": approved_state,
                "states": _run_states(airflow, approved),
                "xcoms": {
                    task: _run_xcom(airflow, approved, task) for task in ("merge_changes", "audit", "publish")
                },
                "table": after_approval,
                "report": airflow.run_report(DAG_ID, approved),
            },
            "rejected": after_rejection,
            "failing": {
                "state": failing_state,
                "states": _run_states(airflow, failing),
                "xcoms": {
                    task: _run_xcom(airflow, failing, task)
                    for task in ("create_orders", "merge_changes", "audit")
                },
                "table": load_table(warehouse, "wap_demo.orders"),
                "log": airflow.task_log(DAG_ID, "audit"),
                "report": airflow.run_report(DAG_ID, failing),
            },
        }


def test_an_approved_run_waits_for_the_person_then_publishes_exactly_the_audited_snapshot(scheduled):
    waiting, approved = scheduled["waiting"], scheduled["approved"]
    audit, merge = approved["xcoms"]["audit"], approved["xcoms"]["merge_changes"]
    assert audit["passed"] is True and audit["snapshot_id"] == merge["snapshot_id"]
    # While it waited, the audit had passed and nothing was published: main was not the branch.
    assert waiting["states"]["audit"] == "success" and waiting["states"]["publish"] is None
    assert waiting["table"].metadata.refs["main"].snapshot_id == merge["parent_snapshot_id"]
    assert waiting["table"].metadata.refs["audit_20240102"].snapshot_id == audit["snapshot_id"]
    request = waiting["request"]
    assert request["options"] == ["Approve", "Reject"] and request["response_received"] is False
    assert request["subject"] == "Publish the audited orders of 2024-01-02 to main?"
    assert f"passed on snapshot {audit['snapshot_id']} ({audit['row_count']} rows)" in request["body"]
    assert waiting["response"]["chosen_options"] == ["Approve"]
    # Approved: publish ran, and main is exactly the audited snapshot, read by pyiceberg.
    assert approved["state"] == "success", approved["report"]
    assert approved["states"] == {
        "create_orders": "success",
        "merge_changes": "success",
        "audit": "success",
        "approval_required": "success",
        "approve_publish": "success",
        "publish": "success",
        "tag_end_of_day": "success",
    }, approved["report"]
    orders = approved["table"]
    assert (
        orders.metadata.refs["main"].snapshot_id
        == audit["snapshot_id"]
        == approved["xcoms"]["publish"]["snapshot_id"]
    )
    assert "audit_20240102" not in orders.metadata.refs
    assert _rows(orders) == [
        (1, 11, 19.5),
        (2, 12, 7.25),
        (4, 14, 20.0),
        (5, 15, 25.0),
        (10, 14, 42.0),
        (11, 15, 8.0),
    ]


def test_a_failing_audit_under_the_scheduler_publishes_nothing_and_asks_no_one(scheduled):
    failing = scheduled["failing"]
    assert failing["state"] == "failed", failing["report"]
    assert failing["states"] == {
        "create_orders": "success",
        "merge_changes": "success",
        "audit": "failed",  # once: a failed audit is not retried
        "approval_required": "upstream_failed",
        "approve_publish": "upstream_failed",
        "publish": "upstream_failed",
        "tag_end_of_day": "upstream_failed",
    }, failing["report"]
    report, merge = failing["xcoms"]["audit"], failing["xcoms"]["merge_changes"]
    assert report["passed"] is False and report["snapshot_id"] == merge["snapshot_id"]
    assert [rule["rule"] for rule in report["rules"] if not rule["passed"]] == ["aggregate_condition"]
    assert "failed 1 of 6 rules" in failing["log"]
    # main is the run's freshly created table, untouched by the merge; the branch holds the merge.
    orders = failing["table"]
    assert orders.metadata.refs["main"].snapshot_id == failing["xcoms"]["create_orders"]["snapshot_id"]
    assert orders.metadata.refs["audit_20240103"].snapshot_id == merge["snapshot_id"]
    assert _rows(orders) == [(i, 10 + i, 5.0 * i) for i in range(1, 6)]


def test_a_rejected_approval_under_the_scheduler_skips_publish_and_leaves_main_untouched(scheduled):
    """publish's trigger rule is none_failed (so an unasked approval does not stop it): a rejection
    must still skip it, and main stay the run's own table (pyiceberg), the branch kept."""
    rejected = scheduled["rejected"]
    assert rejected["states"] == {
        "create_orders": "success",
        "merge_changes": "success",
        "audit": "success",
        "approval_required": "success",
        "approve_publish": "success",  # the person answered; the answer was no
        "publish": "skipped",
        "tag_end_of_day": "skipped",
    }, rejected["report"]
    audit = rejected["xcoms"]["audit"]
    orders = rejected["table"]
    assert orders.metadata.refs["main"].snapshot_id == rejected["xcoms"]["create_orders"]["snapshot_id"]
    assert (
        orders.metadata.refs["audit_20240104"].snapshot_id
        == audit["snapshot_id"]
        != (orders.metadata.refs["main"].snapshot_id)
    )
    assert _rows(orders) == [(i, 10 + i, 5.0 * i) for i in range(1, 6)]
    assert "eod_20240104" not in orders.metadata.refs

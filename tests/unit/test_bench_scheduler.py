"""`make bench` #7: the per-task breakdown from recorded task instances, and its verdicts (no Airflow run)."""

from __future__ import annotations

import json

import pytest

from benchmarks import scheduler_report
from benchmarks.scheduler_report import StoryRuns, summarize
from benchmarks.timeline import (
    ProbeRecord,
    RunBreakdown,
    RunRecord,
    TaskBreakdown,
    TaskRecord,
    dag_file_parse_seconds,
    run_breakdown,
    timestamp,
    upstream_lists,
)
from benchmarks.worker_memory import MIB, PeakMemory, task_instance_id

T0 = timestamp("2026-12-01 10:00:00")
IDS = {
    "create": "01a23511-33ae-7657-9232-ccbe7ee4c2b2",
    "approval": "01a23511-33af-7b76-8918-142ab1d7b52e",
    "skipped": "01a23511-33b0-7eed-a8c7-7f92eaebd24e",
    "publish": "01a23511-33b1-7ade-a245-1325b98abda5",
}


def _row(key: str, task_id: str, state: str, operator: str, times: tuple) -> tuple:
    """A task_instance row as SQLite returns it: the id as 32 hex digits, times as naive UTC text."""
    texts = [None if t is None else f"2026-12-01 10:00:{t:09.6f}" for t in times]
    return (IDS[key].replace("-", ""), task_id, -1, state, operator, 1, *texts)


def _recorded_run():
    run = RunRecord("wap", "r1", "success", T0 + 0.5, T0 + 1.0, T0 + 40.0)
    rows = [
        # scheduled, queued, started, ended (seconds past 10:00:00)
        _row("create", "create_orders", "success", "IcebergCreateTableOperator", (1.2, 1.3, 2.0, 12.0)),
        _row(
            "approval",
            "approval_required",
            "success",
            "_ShortCircuitDecoratedOperator",
            (12.4, 12.5, 13.0, 15.0),
        ),
        _row("skipped", "approve_publish", "skipped", "ApprovalOperator", (None, None, 15.2, 15.2)),
        _row("publish", "publish", "success", "IcebergPublishOperator", (15.6, 15.7, 16.5, 39.0)),
    ]
    tasks = [TaskRecord.from_row(row) for row in rows]
    upstream = upstream_lists(
        [
            {"task_id": "create_orders", "downstream_task_ids": ["approval_required", "publish"]},
            {"task_id": "approval_required", "downstream_task_ids": ["approve_publish"]},
            {"task_id": "approve_publish", "downstream_task_ids": ["publish"]},
            {"task_id": "publish", "downstream_task_ids": []},
        ]
    )
    probes = {
        IDS["create"]: ProbeRecord.from_json(
            {"execute": [T0 + 4.0, T0 + 11.9], "intervals": {"spark_submit": [[T0 + 4.1, T0 + 11.8]]}}
        ),
        IDS["approval"]: ProbeRecord.from_json({"execute": [T0 + 14.0, T0 + 14.9]}),
        IDS["publish"]: ProbeRecord.from_json(
            {
                "execute": [T0 + 18.0, T0 + 38.0],
                "intervals": {"connect_job": [[T0 + 18.5, T0 + 37.0]], "settle": [[T0 + 18.6, T0 + 18.8]]},
            }
        ),
    }
    return run, tasks, upstream, probes


def test_each_task_is_split_into_delay_process_start_own_work_spark_and_finishing():
    run, tasks, upstream, probes = _recorded_run()
    parse = dag_file_parse_seconds(
        "\n".join(
            [
                json.dumps(
                    {
                        "event": "Worker startup parse complete",
                        "dag_file_parse_ms": 1500,
                        "ti_id": IDS["create"],
                    }
                ),
                "not json, a line spark-submit relayed",
                json.dumps({"event": "::endgroup::", "ti_id": IDS["create"]}),
            ]
        )
    )
    result = run_breakdown(run, tasks, upstream, probes, parse)

    create, approval, publish = result.tasks  # the skipped approval never ran: no breakdown
    assert [t.task_id for t in result.tasks] == ["create_orders", "approval_required", "publish"]
    # the first task was ready at the trigger (queued_at), not when the run started
    assert create.delay == pytest.approx(1.5)
    assert create.process_start == pytest.approx(2.0) and create.parse == pytest.approx(1.5)
    assert create.spark == pytest.approx(7.7) and create.own_work == pytest.approx(0.2)
    assert create.finishing == pytest.approx(0.1)
    assert create.run_time == pytest.approx(10.0) and create.own_share == pytest.approx(0.02)
    assert approval.delay == pytest.approx(1.0) and approval.spark == 0
    # publish waits for create and for the skipped approval (its end_date is when it was skipped)
    assert publish.delay == pytest.approx(16.5 - 15.2)
    # over Spark Connect the settling of earlier tries is the provider's own work, not Spark's
    assert publish.spark == pytest.approx(18.5 - 0.2) and publish.settle == pytest.approx(0.2)
    assert publish.own_work == pytest.approx(20.0 - 18.3)
    assert publish.ti_id == IDS["publish"]
    assert result.seconds == pytest.approx(39.5) and result.completion == pytest.approx(1.0)
    # Airflow's part: every delay, process start and finishing, and the run's completion
    parts = [t.delay + t.process_start + t.finishing for t in result.tasks]
    assert result.airflow_part == pytest.approx(sum(parts) + 1.0)


def test_a_task_that_ran_without_a_probe_record_is_an_error_not_a_guess():
    run, tasks, upstream, probes = _recorded_run()
    del probes[IDS["publish"]]
    with pytest.raises(ValueError, match=r"publish.*no probe record"):
        run_breakdown(run, tasks, upstream, probes)


def test_task_processes_are_told_apart_by_the_task_runners_title():
    ti = IDS["create"]
    assert task_instance_id([f"airflow worker -- {ti}"]) == ti
    assert task_instance_id(["airflow", "worker", "--", ti]) == ti
    assert task_instance_id(["airflow worker -- LocalExecutor: <idle>"]) is None
    assert task_instance_id(["java", "org.apache.spark.deploy.SparkSubmit"]) is None


def _task(task_id: str, operator: str, **parts: float) -> TaskBreakdown:
    values = {"delay": 1.0, "process_start": 2.0, "own_work": 0.05, "spark": 5.0, "finishing": 0.05, **parts}
    return TaskBreakdown(task_id=task_id, map_index=-1, operator=operator, **values)


def _runs(seconds: list[float], completion: float = 0.5, **parts: float) -> StoryRuns:
    tasks = (
        _task("create_orders", "IcebergCreateTableOperator", **parts),
        _task("noop", "PythonOperator", spark=0.0),
    )
    return StoryRuns([RunBreakdown(value, tasks, completion) for value in seconds])


def _four_arm_story(b: StoryRuns, a: StoryRuns, c: StoryRuns) -> dict:
    runs = {("daily_orders", "A"): a, ("daily_orders", "B"): b, ("daily_orders", "C"): c}
    for runs_of_arm in runs.values():
        runs_of_arm.memory = {"create_orders": [PeakMemory(150 * MIB, 700 * MIB)]}
    runs[("daily_orders", "B")].memory = {"create_orders": [PeakMemory(180 * MIB, 180 * MIB)]}
    return runs


def test_verdicts_pass_when_connect_is_five_times_faster_and_spark_submit_matches_the_peer():
    runs = _four_arm_story(
        b=_runs([10.0, 11.0, 12.0], spark=0.5, own_work=0.2),
        a=_runs([60.0, 61.0, 59.0], spark=25.0),
        c=_runs([59.0, 60.0, 58.0], spark=25.0, own_work=0.01),
    )
    section = summarize(runs, PeakMemory(900 * MIB, 900 * MIB), imports={"connect_job_package": 0.21})

    rows = {row.measure: row for row in section.rows}
    b_vs_c = rows["daily orders (`iceberg_daily_orders`): whole DAG, trigger to success: B vs C"]
    assert (b_vs_c.a, b_vs_c.b, b_vs_c.ratio, b_vs_c.verdict) == ("11.00 s", "59.00 s", "5.36x", "PASS")
    a_vs_c = rows["daily orders (`iceberg_daily_orders`): whole DAG, trigger to success: A vs C"]
    assert (a_vs_c.ratio, a_vs_c.verdict) == ("1.02x", "PASS")
    own = {row.measure.split(":")[0]: row for row in section.rows if "largest share" in row.measure}
    assert own["arm A"].verdict == "PASS" and own["arm A"].a == "0.2%"  # 0.05 s of a 27.1 s run
    assert (own["arm B"].verdict, own["arm B"].a) == ("MISS", "7.3%")  # 0.2 s of a 2.75 s run
    [own_cause] = section.misses  # one cause for the arm, however many of its tasks miss
    assert own_cause.startswith(
        "arm B: the provider's own work is over 2% of the run time in 1 of 1 Spark tasks (7.3% to 7.3%; "
        "the largest, daily orders create_orders: 200 ms of a 2.8 s run"
    )
    assert (
        "job package with pyspark's Connect client in the worker before the session opens: 0.21 s"
        in own_cause
    )
    assert "Arm A's own work per task (median) is 50 ms" in own_cause
    assert section.samples["daily_orders_B_whole_dag"] == [10.0, 11.0, 12.0]
    memory = [row for row in section.rows if "peak RSS" in row.measure]
    assert [row.ratio for row in memory[:2]] == ["1.00x", "0.26x"]
    assert memory[2].a == "900 MiB"


def test_missed_targets_name_the_measured_cause():
    runs = _four_arm_story(
        b=_runs([30.0], spark=1.0, delay=6.0),  # Airflow's part dominates the Connect arm
        a=_runs([80.0], spark=40.0),
        c=_runs([60.0], spark=25.0),
    )
    section = summarize(runs, imports={"spark_submit_hook": 3.2, "kubernetes_client": 2.5})

    verdicts = [row.verdict for row in section.rows if "whole DAG, trigger to success" in row.measure]
    assert verdicts == ["MISS", "MISS"]
    b_cause, a_cause = (text for text in section.misses if "whole DAG" in text)
    assert "2.00x faster than arm C's (target 5.0x)" in b_cause
    assert "The largest part of B is queue and scheduling delay" in b_cause
    # delays 6 + 1, process starts 2 + 2, finishing 0.05 + 0.05, completion 0.5
    assert "Airflow's own part is 11.6 s" in b_cause
    assert "1.33x arm C's" in a_cause and "Spark time +15.0 s" in a_cause
    assert "the largest difference is Spark time" in a_cause
    assert "3.2 s in a fresh interpreter here, 2.5 s of it for the cncf-kubernetes client" in b_cause
    imports = [row for row in section.rows if "interpreter importing" in row.measure or "cncf" in row.measure]
    assert [row.a for row in imports] == ["3.20 s", "2.50 s"]


def test_an_arm_not_measured_gets_a_row_and_no_verdict():
    runs = {("daily_orders", "A"): _runs([60.0]), ("daily_orders", "C"): _runs([59.0])}
    section = summarize(runs)
    assert section.rows[0].measure.endswith("not measured in arm(s) B")
    assert all("trigger to success" not in row.measure for row in section.rows)
    assert scheduler_report.ARMS == ("A", "B", "C")

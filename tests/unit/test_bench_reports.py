"""`make bench` #5 and #6 turn samples into verdicts and measured causes (no Spark, no Airflow run)."""

from __future__ import annotations

from benchmarks import connect_mode, story


def _story_samples(**steps: tuple[list[float], list[float], list[float], list[float]]) -> dict:
    samples = {}
    for step, (ours, peer, ours_cpu, peer_cpu) in steps.items():
        samples.update(
            {
                f"ours_{step}": ours,
                f"peer_{step}": peer,
                f"ours_{step}_cpu": ours_cpu,
                f"peer_{step}_cpu": peer_cpu,
            }
        )
    return samples


def test_story_tells_load_from_extra_work_and_leaves_out_half_measured_steps():
    samples = _story_samples(
        create=([10.0, 10.2, 10.1], [10.0, 10.1, 10.2], [20.0, 20.0, 20.0], [20.5, 20.5, 20.5]),
        append=([14.0, 12.0, 16.0], [10.0, 10.5, 11.0], [20.0, 20.1, 20.2], [20.0, 20.1, 20.2]),
        read=([13.0, 13.0, 13.0], [10.0, 10.0, 10.0], [25.0, 25.0, 25.0], [20.0, 20.0, 20.0]),
    )
    samples["ours_read_snapshot"] = [9.0]  # the peer's side never ran
    section = story.summarize(samples)

    verdicts = {row.measure: row.verdict for row in section.rows}
    assert verdicts["create: task time"] == "PASS"
    assert verdicts["append: task time"] == "MISS" and verdicts["read: task time"] == "MISS"
    assert not any("read_snapshot" in measure for measure in verdicts)
    assert "the 3 steps measured, together (sum of medians)" in verdicts
    load, work = section.misses
    assert load.startswith("append:") and "did no more work" in load and "spread over 4.00 s" in load
    assert work.startswith("read:") and "5.00 s of CPU more" in work


def test_connect_comparison_names_airflows_fixed_cost_and_failed_arms():
    samples = {
        "connect_step_create": [9.0, 9.4],
        "submit_step_create": [15.0, 15.4],
        "connect_step_create_cpu": [4.0, 4.0],
        "submit_step_create_cpu": [20.0, 20.0],
        "connect_airflow_noop_task": [8.0, 8.2],
        "connect_example_dag": [40.0],
        "submit_example_dag": [70.0],
        "submit_airflow_noop_dag": [30.0],
        "connect_append_10000000": [20.0],
        "submit_append_10000000": [17.0],
        "connect_append_10000000_cpu": [4.0],
        "submit_append_10000000_cpu": [30.0],
    }
    section = connect_mode.summarize(samples, (1000, 10_000_000), ["connect step_read (repetition 1): boom"])

    rows = {row.measure: row for row in section.rows}
    create = rows["create: task time"]
    assert (create.ratio, create.verdict) == ("1.65x", "MISS")
    assert rows["  create without Airflow's fixed task cost"].ratio == "6.45x"
    assert (
        rows["append 10,000,000 rows: rows/s of Connect mode ÷ rows/s of spark-submit mode"].verdict == "MISS"
    )
    assert "append 1,000 rows: task time" not in rows  # not measured: no row, no verdict
    causes = " ".join(section.misses)
    assert "8.1 s is Airflow's fixed cost per task" in causes and "would give 1.88x" in causes
    assert "30.0 s is Airflow's fixed cost per DAG" in causes
    assert "Failed, not measured: connect step_read (repetition 1): boom" in section.notes


def test_a_comparison_that_crashes_is_a_fail_row_and_the_others_still_run(monkeypatch):
    """`make bench` takes hours: one broken comparison must not throw away the others' figures."""
    import argparse

    from benchmarks import overhead, parse_cost
    from benchmarks import run as bench_run
    from benchmarks.results import FAIL, Section

    def broken(ws, reps):
        raise RuntimeError("peer read_snapshot counted [6], not 3:\n<the task's whole log>")

    monkeypatch.setattr(overhead, "run", broken)
    monkeypatch.setattr(parse_cost, "run", lambda ws, reps: Section(2, "parse", "A", "B"))
    args = argparse.Namespace(
        only="1,2", repetitions=1, quick=True, batches=None, cluster_rows=None
    )
    first, second = bench_run.run_sections(ws=None, args=args)
    assert first.failed and first.rows[0].verdict == FAIL
    assert first.rows[0].measure == "did not run: RuntimeError: peer read_snapshot counted [6], not 3:"
    assert (second.number, second.failed) == (2, False)
    assert bench_run.task_cost([first]) is None  # #3 then runs without #1's fixed cost

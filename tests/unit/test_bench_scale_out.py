"""`make bench` #8: exactly-once counted by commit id, retries read from logs, and the verdicts (no run)."""

from __future__ import annotations

from benchmarks.commits import CommitCount, commit_retries, count_commits, gave_up, most_at_once
from benchmarks.scale_out_report import AppendRun, ClusterSample, summarize
from benchmarks.worker_memory import MIB, PeakMemory

RUN = "bench8a__submit__1"


def _summary(map_index: int, commit: str, run_id: str = RUN, task_id: str = "append_batch") -> dict:
    return {
        "airflow.run-id": run_id,
        "airflow.task-id": task_id,
        "airflow.map-index": str(map_index),
        "airflow-iceberg.commit-id": commit,
        "added-records": "1000",
    }


def test_every_mapped_append_committing_once_is_exactly_once():
    summaries = [_summary(index, f"dag:append_batch:{RUN}:{index}:1:t") for index in range(16)]
    summaries.append(_summary(-1, "dag:create_table", task_id="create_table"))  # another task's commit
    summaries.append(_summary(3, "other-run", run_id="bench8a__submit__2"))  # another run's
    count = count_commits(summaries, RUN, "append_batch", range(16))
    assert (count.commits, count.duplicates, count.lost, count.exactly_once) == (16, 0, (), True)
    assert str(count) == "16 commits, 0 duplicates, 0 lost"


def test_a_commit_written_twice_and_a_batch_never_written_are_counted():
    summaries = [_summary(index, f"c{index}") for index in range(16) if index != 7]
    summaries.append(_summary(2, "c2"))  # a retry that wrote again under the same commit id
    summaries.append(_summary(5, "c5-cleared"))  # one map index, two commit ids
    count = count_commits(summaries, RUN, "append_batch", range(16))
    assert count.lost == (7,)
    assert count.duplicates == 2
    assert count.commits == 16 and not count.exactly_once


def test_icebergs_retries_and_a_commit_that_gave_up_are_read_from_the_logs():
    log = "\n".join(
        [
            '{"event": "26/12/02 05:11:12 WARN Tasks: Retrying task after failure: sleepTimeMs=112 '
            'Cannot commit bench.scale.appends: metadata location changed"}',
            '{"event": "org.apache.iceberg.exceptions.CommitFailedException: Cannot commit"}',
            '{"event": "at org.apache.iceberg.util.Tasks$Builder.runTaskWithRetry(Tasks.java:413)"}',
            "26/12/02 05:11:13 WARN Tasks: Retrying task after failure: sleepTimeMs=230 Cannot commit",
            "26/12/02 05:11:14 INFO SparkContext: Successfully stopped SparkContext",
        ]
    )
    assert commit_retries(log) == 2
    assert gave_up(log) and not gave_up("IcebergJobError: Table not found")


def test_most_at_once_counts_overlapping_task_runs():
    assert most_at_once([(0, 10), (1, 5), (2, 3), (5, 6), (11, 12)]) == 3
    assert most_at_once([(0, 1), (1, 2)]) == 1  # one ends as the next starts
    assert most_at_once([]) == 0


def _append(mode: str, count: CommitCount, window: float, tree: int) -> AppendRun:
    peaks = (PeakMemory(150 * MIB, tree * MIB), PeakMemory(160 * MIB, tree * MIB))
    return AppendRun(mode, f"bench8a__{mode}__1", "success", count, window, window + 20, 16, 3, 0, 0, peaks)


def test_the_verdict_passes_only_when_every_run_of_the_mode_is_exactly_once():
    once = CommitCount(16, 0, (), 16)
    lost = CommitCount(15, 0, (9,), 16)
    appends = [
        _append("submit", once, 120.0, 700),
        _append("submit", once, 130.0, 720),
        _append("connect", once, 20.0, 180),
        AppendRun("connect", "bench8a__connect__2", "failed", lost, 25.0, 40.0, 16, 9, 1, 0),
    ]
    cluster = [ClusterSample(task=100.0, spark=90.0, plain=80.0, peak=PeakMemory(200 * MIB, 900 * MIB))]
    section = summarize(16, appends, 100_000_000, cluster, PeakMemory(1200 * MIB, 1200 * MIB))

    rows = {row.measure: row for row in section.rows}
    submit = rows["(a) 16 mapped appends at once, spark-submit mode: commits by commit id, per run"]
    assert submit.verdict == "PASS" and submit.a.count("16 commits, 0 duplicates, 0 lost") == 2
    connect = rows["(a) 16 mapped appends at once, Spark Connect mode: commits by commit id, per run"]
    assert connect.verdict == "MISS"
    [miss] = section.misses
    assert "bench8a__connect__2" in miss and "map indexes without a commit: 9" in miss
    assert "1 append(s) failed with a commit that lost its race" in miss
    wall = rows["(a) wall time, appends ready to the last append's end: spark-submit vs Connect"]
    assert (wall.a, wall.b, wall.ratio) == ("125.00 s", "22.50 s", "5.56x")  # connect: median of 20, 25
    throughput = next(row for row in section.rows if row.measure.startswith("(b) 100,000,000 rows"))
    assert "1,000,000 vs 1,250,000 rows/s" in throughput.measure and throughput.ratio == "0.80x"
    memory = next(row for row in section.rows if row.measure.startswith("(c) worker peak RSS"))
    # the failed run's tasks left no samples; the medians are of the sampled tasks
    assert (memory.a, memory.b) == ("710 MiB", "180 MiB")
    assert section.samples["b_plain_100000000"] == [80.0]

"""#8's section from its records: exactly-once counts, wall times, rows/s and peak memory.

Pure functions over :class:`AppendRun` and :class:`ClusterSample` (tested in
tests/unit/test_bench_scale_out.py). The issue's target is an exactly-once verdict: every run of
the concurrent appends leaves one commit per mapped task (16 by default), no duplicate, none lost.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.commits import CommitCount
from benchmarks.results import Row, Section, times, verdict
from benchmarks.results import seconds as fmt
from benchmarks.worker_memory import PeakMemory, mib

MODES = ("submit", "connect")
MODE_LABELS = {"submit": "spark-submit mode", "connect": "Spark Connect mode"}


@dataclass(frozen=True)
class AppendRun:
    """One run of the concurrent mapped appends."""

    mode: str
    run_id: str
    state: str
    count: CommitCount
    #: The appends became ready (their queries' task ended) to the last append's end.
    window: float
    #: The whole run, trigger to end.
    whole: float
    #: The most appends running at one moment (``start_date`` to ``end_date`` overlapping).
    most_running: int
    #: Iceberg's commit retries (each a commit that lost a race and tried again).
    retries: int
    #: Failed appends whose commit lost its race after the last retry.
    gave_up: int
    #: Airflow tries beyond the first, over the mapped tasks.
    task_retries: int
    peaks: tuple[PeakMemory, ...] = ()
    #: Seconds each append's task process spent loading the DAG file (all of them start at once).
    dag_file_loads: tuple[float, ...] = ()


@dataclass(frozen=True)
class ClusterSample:
    """One repetition of the large append: the operator's task and plain Spark parquet."""

    task: float
    spark: float
    plain: float
    peak: PeakMemory | None = None


def summarize(
    batches: int,
    appends: Sequence[AppendRun],
    rows: int,
    cluster: Sequence[ClusterSample],
    server_peak: PeakMemory | None = None,
) -> Section:
    section = Section(
        8,
        "Scale-out: concurrent mapped appends, a large append on a standalone cluster, worker memory",
        "the first side named in the row",
        "the second side named in the row",
    )
    section.rows += append_rows(batches, appends, section)
    section.rows += cluster_rows(rows, cluster, section)
    section.rows += memory_rows(appends, cluster, server_peak)
    section.notes = notes(batches)
    return section


def append_rows(batches: int, appends: Sequence[AppendRun], section: Section) -> list[Row]:
    rows = []
    windows = {}
    for mode in MODES:
        runs = [run for run in appends if run.mode == mode]
        if not runs:
            continue
        windows[mode] = statistics.median(run.window for run in runs)
        section.samples[f"a_{mode}_appends_window"] = [run.window for run in runs]
        section.samples[f"a_{mode}_whole_dag"] = [run.whole for run in runs]
        rows.append(
            Row(
                f"(a) {batches} mapped appends at once, {MODE_LABELS[mode]}: commits by commit id, per run",
                "; ".join(str(run.count) for run in runs),
                target=f"{batches} commits, 0 duplicates, 0 lost",
                verdict=verdict(all(run.count.exactly_once for run in runs)),
            )
        )
        rows.append(
            Row(
                f"  (a) {MODE_LABELS[mode]}: Iceberg commit retries / commits given up / "
                "Airflow task retries, per run",
                "; ".join(f"{run.retries} / {run.gave_up} / {run.task_retries}" for run in runs),
            )
        )
        loads = [load for run in runs for load in run.dag_file_loads]
        if loads:
            rows.append(
                Row(
                    f"  (a) {MODE_LABELS[mode]}: loading the DAG file in an append's task process, "
                    "median / largest",
                    f"{statistics.median(loads):.1f} s / {max(loads):.1f} s",
                )
            )
        section.misses += [append_miss(batches, run) for run in runs if not run.count.exactly_once]
    if len(windows) == len(MODES):
        most = {mode: max(run.most_running for run in appends if run.mode == mode) for mode in MODES}
        rows.append(
            Row(
                "(a) wall time, appends ready to the last append's end: spark-submit vs Connect",
                fmt(windows["submit"]),
                fmt(windows["connect"]),
                times(windows["submit"] / windows["connect"]),
            )
        )
        rows.append(
            Row(
                f"  (a) most appends running at one moment (of {batches}): spark-submit vs Connect",
                str(most["submit"]),
                str(most["connect"]),
            )
        )
    return rows


def append_miss(batches: int, run: AppendRun) -> str:
    text = (
        f"{run.run_id} ({MODE_LABELS[run.mode]}, run {run.state}): {run.count} (expected {batches} commits, "
        "0 duplicates, 0 lost)"
    )
    if run.count.lost:
        text += f"; map indexes without a commit: {', '.join(str(index) for index in run.count.lost)}"
    return text + (
        f". Iceberg retried commits {run.retries} times; {run.gave_up} append(s) failed with a commit that "
        f"lost its race after the last retry (CommitFailedException in the task log); Airflow retried "
        f"{run.task_retries} task(s)."
    )


def cluster_rows(rows: int, cluster: Sequence[ClusterSample], section: Section) -> list[Row]:
    if not cluster:
        return []
    task = statistics.median(sample.task for sample in cluster)
    spark = statistics.median(sample.spark for sample in cluster)
    plain = statistics.median(sample.plain for sample in cluster)
    section.samples[f"b_task_{rows}"] = [sample.task for sample in cluster]
    section.samples[f"b_task_spark_{rows}"] = [sample.spark for sample in cluster]
    section.samples[f"b_plain_{rows}"] = [sample.plain for sample in cluster]
    return [
        Row(
            f"(b) {rows:,} rows on a standalone cluster: {rows / task:,.0f} vs {rows / plain:,.0f} rows/s, "
            "the append task vs plain Spark parquet (ratio of rows/s)",
            fmt(task),
            fmt(plain),
            times(plain / task),
        ),
        Row(
            "  (b) the task's Spark time alone (the spark-submit process) vs plain Spark parquet",
            fmt(spark),
            fmt(plain),
            times(plain / spark),
        ),
    ]


def memory_rows(
    appends: Sequence[AppendRun], cluster: Sequence[ClusterSample], server_peak: PeakMemory | None
) -> list[Row]:
    peaks = {mode: [peak for run in appends if run.mode == mode for peak in run.peaks] for mode in MODES}
    rows = []
    if all(peaks.values()):
        tree = {mode: statistics.median(p.tree for p in peaks[mode]) for mode in MODES}
        alone = {mode: statistics.median(p.process for p in peaks[mode]) for mode in MODES}
        rows += [
            Row(
                "(c) worker peak RSS per append task, its process and children (median): "
                "spark-submit vs Connect",
                mib(tree["submit"]),
                mib(tree["connect"]),
                times(tree["submit"] / tree["connect"]),
            ),
            Row(
                "  (c) the task process alone (median): spark-submit vs Connect",
                mib(alone["submit"]),
                mib(alone["connect"]),
                times(alone["submit"] / alone["connect"]),
            ),
            Row(
                "  (c) largest append task, with children: spark-submit vs Connect",
                mib(max(p.tree for p in peaks["submit"])),
                mib(max(p.tree for p in peaks["connect"])),
            ),
        ]
    cluster_peaks = [sample.peak for sample in cluster if sample.peak is not None]
    if cluster_peaks:
        rows.append(
            Row(
                "  (c) the cluster append's task with children (its driver; executors run on the cluster)",
                mib(statistics.median(p.tree for p in cluster_peaks)),
            )
        )
    if server_peak is not None:
        rows.append(
            Row("  (c) the Spark Connect server's peak RSS (outside the worker)", mib(server_peak.tree))
        )
    return rows


def notes(batches: int) -> list[str]:
    return [
        f"(a) `airflow_iceberg_bench_mapped_appends` (`benchmarks/dags_scheduler/`): a create task, then "
        f"{batches} `IcebergAppendOperator` tasks mapped with `.expand` over the batches' queries, under the "
        f"real scheduler with {batches + 2} executor slots; each run into a fresh table of a JDBC catalog on "
        "PostgreSQL (concurrent commits from many JVMs need a catalog that swaps metadata atomically). "
        "Spark-submit mode and Spark Connect mode alternate, on one deployment and the same catalog (over "
        "Connect the server holds the catalog's password), after one untimed Connect run. Commits are "
        "counted with pyiceberg's SqlCatalog, "
        "by `airflow-iceberg.commit-id` in the snapshots of the run's mapped task; retries are Iceberg's "
        "'Retrying task after failure' lines (the task logs in spark-submit mode, the server's log over "
        "Connect).",
        "(b) `airflow_iceberg_bench_cluster_append` on a standalone cluster (a master and two one-core "
        "workers on 127.0.0.1, 512 MiB executors, deploy mode client) vs `benchmarks/spark_jobs/"
        "write_parquet.py` submitted to the same master, alternating; both write snappy parquet. The task's "
        "time is its run time (`start_date` to `end_date`); plain Spark's is the spark-submit's wall time.",
        "(c) psutil samples (4 a second) of each task process (`airflow worker -- <ti id>`) and its "
        "children; pages shared between processes are counted in each. Over Spark Connect the Spark work "
        "runs in the server, outside the worker.",
    ]

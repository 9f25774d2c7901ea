"""#7's section from its records: medians, the issue's targets as verdicts, and measured causes.

Pure functions over :class:`StoryRuns` (the breakdowns of one DAG's runs in one arm, and its
tasks' peak memory), so the report logic is tested without a deployment
(tests/unit/test_bench_scheduler.py). Targets (issue 21):

- arm B's whole DAG is at least 5x faster than arm C's;
- arm A's whole DAG is at most 1.05x arm C's;
- the provider's own work is at most 2% of each task's run time, in every arm (in arm C, the
  apache-spark provider's SparkSubmitOperator is the one whose own work is measured).

A target missed gets a cause in ``section.misses``, named from the measured parts.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from benchmarks.results import INFO, Row, Section, times, verdict
from benchmarks.results import seconds as fmt
from benchmarks.timeline import COMPONENT_LABELS, COMPONENTS, RunBreakdown, TaskBreakdown, is_spark_task
from benchmarks.worker_memory import PeakMemory, mib, summary

ARMS = ("A", "B", "C")
ARM_LABELS = {
    "A": "the operators over spark-submit",
    "B": "the operators over Spark Connect",
    "C": "plain SparkSubmitOperators, a hand-written job per step",
}
#: Story key -> how the report names it, in report order.
STORY_LABELS = {
    "daily_orders": "daily orders (`iceberg_daily_orders`)",
    "write_audit_publish": "write-audit-publish (`iceberg_write_audit_publish`)",
}
B_TARGET = 5.0
A_TARGET = 1.05
OWN_TARGET = 0.02
#: The parts of a whole DAG, in report order: the task components, then the run's completion.
PARTS = (*COMPONENTS, "completion")


@dataclass
class StoryRuns:
    """One DAG's runs in one arm: their breakdowns, and the peak memory of each Spark task's tries."""

    breakdowns: list[RunBreakdown] = field(default_factory=list)
    #: task id -> the peak memory of its task processes, one per run (Spark tasks only).
    memory: dict[str, list[PeakMemory]] = field(default_factory=dict)

    def whole(self) -> float:
        return statistics.median(run.seconds for run in self.breakdowns)

    def part(self, name: str) -> float:
        """Median over runs of one part summed over the run's tasks (``completion``, ``parse`` too)."""
        return statistics.median(_run_part(run, name) for run in self.breakdowns)

    def airflow_part(self) -> float:
        return statistics.median(run.airflow_part for run in self.breakdowns)

    def task_ids(self) -> list[str]:
        """Task ids in the order they ran (first run's order, then any seen later)."""
        seen: dict[str, None] = {}
        for run in self.breakdowns:
            seen.update(dict.fromkeys(task.task_id for task in run.tasks))
        return list(seen)

    def tasks(self, task_id: str) -> list[TaskBreakdown]:
        return [task for run in self.breakdowns for task in run.tasks if task.task_id == task_id]

    def task_median(self, task_id: str, attribute: str) -> float:
        return statistics.median(float(getattr(task, attribute)) for task in self.tasks(task_id))


def _run_part(run: RunBreakdown, name: str) -> float:
    if name == "completion":
        return run.completion
    return sum(float(getattr(task, name)) for task in run.tasks)


@dataclass(frozen=True)
class OwnShare:
    """A Spark task's own work as a share of its run time (medians over runs)."""

    story: str
    task_id: str
    share: float
    own_work: float
    run_time: float
    spark: float
    settle: float


def own_shares(story: str, runs: StoryRuns) -> list[OwnShare]:
    shares = []
    for task_id in runs.task_ids():
        tasks = runs.tasks(task_id)
        if not tasks or not is_spark_task(tasks[0]):
            continue
        shares.append(
            OwnShare(
                story,
                task_id,
                statistics.median(task.own_share for task in tasks),
                runs.task_median(task_id, "own_work"),
                statistics.median(task.run_time for task in tasks),
                runs.task_median(task_id, "spark"),
                runs.task_median(task_id, "settle"),
            )
        )
    return shares


def summarize(
    runs: Mapping[tuple[str, str], StoryRuns],
    server_peak: PeakMemory | None = None,
    failures: Sequence[str] = (),
    imports: Mapping[str, float] | None = None,
) -> Section:
    """#7's section. ``imports``: fresh-interpreter import times of what the DAG files load
    (``spark_submit_hook``, ``kubernetes_client``), to explain the task processes' start."""
    section = Section(
        7,
        "The example DAGs under the real scheduler: operators over spark-submit (A) and over "
        "Spark Connect (B) vs plain SparkSubmitOperators (C)",
        "the first arm named in the row",
        "the second arm named in the row",
    )
    for story, label in STORY_LABELS.items():
        measured = {
            arm: runs[(story, arm)]
            for arm in ARMS
            if runs.get((story, arm)) and runs[(story, arm)].breakdowns
        }
        if len(measured) < len(ARMS):
            missing = ", ".join(arm for arm in ARMS if arm not in measured)
            section.rows.append(Row(f"{label}: not measured in arm(s) {missing}", "—"))
            continue
        section.rows += story_rows(label, measured)
        section.misses += story_misses(label, measured, imports or {})
        for arm, story_runs in measured.items():
            section.samples[f"{story}_{arm}_whole_dag"] = [run.seconds for run in story_runs.breakdowns]
            for part in PARTS:
                section.samples[f"{story}_{arm}_{part}"] = [
                    _run_part(run, part) for run in story_runs.breakdowns
                ]
    section.rows += own_work_rows(runs, section.misses, imports or {})
    section.rows += memory_rows(runs, server_peak)
    section.rows += import_rows(imports or {})
    section.notes = notes() + [f"Failed, not measured: {failure.splitlines()[0]}" for failure in failures]
    section.details = details(runs)
    return section


def story_rows(label: str, arms: Mapping[str, StoryRuns]) -> list[Row]:
    a, b, c = (arms[arm].whole() for arm in ARMS)
    return [
        Row(
            f"{label}: whole DAG, trigger to success: B vs C",
            fmt(b),
            fmt(c),
            times(c / b),
            f"≥ {B_TARGET:.1f}x faster",
            verdict(c / b >= B_TARGET),
        ),
        Row(
            f"{label}: whole DAG, trigger to success: A vs C",
            fmt(a),
            fmt(c),
            times(a / c),
            f"≤ {A_TARGET:.2f}x",
            verdict(a / c <= A_TARGET),
        ),
        Row(
            f"  {label}: Airflow's part (delays, process starts, finishing, run completion): B vs C",
            fmt(arms["B"].airflow_part()),
            fmt(arms["C"].airflow_part()),
            times(arms["C"].airflow_part() / arms["B"].airflow_part()),
        ),
        Row(
            f"  {label}: Spark time, summed over its tasks: B vs C",
            fmt(arms["B"].part("spark")),
            fmt(arms["C"].part("spark")),
            times(arms["C"].part("spark") / max(arms["B"].part("spark"), 1e-9)),
        ),
        Row(
            f"  {label}: Spark time, summed over its tasks: A vs C",
            fmt(arms["A"].part("spark")),
            fmt(arms["C"].part("spark")),
            times(arms["A"].part("spark") / max(arms["C"].part("spark"), 1e-9)),
        ),
    ]


def _parts_text(runs: StoryRuns) -> str:
    return (
        f"queue and scheduling delays {runs.part('delay'):.1f} s, task process starts "
        f"{runs.part('process_start'):.1f} s (loading the DAG file {runs.part('parse'):.1f} s of it), "
        f"finishing {runs.part('finishing'):.1f} s, run completion {runs.part('completion'):.1f} s; "
        f"Spark {runs.part('spark'):.1f} s; own work {runs.part('own_work'):.1f} s"
    )


def largest_part(runs: StoryRuns) -> str:
    """The largest of a run's parts (medians), named as the report names it."""
    name = max(PARTS, key=runs.part)
    return COMPONENT_LABELS.get(name, "run completion")


def import_rows(imports: Mapping[str, float]) -> list[Row]:
    rows = []
    if "spark_submit_hook" in imports:
        rows.append(
            Row(
                "a fresh interpreter importing the apache-spark provider's spark_submit hook module "
                "(every Spark task's DAG file does)",
                fmt(imports["spark_submit_hook"]),
            )
        )
    if "kubernetes_client" in imports:
        rows.append(
            Row("  of it, the cncf-kubernetes client that module imports", fmt(imports["kubernetes_client"]))
        )
    if "connect_job_package" in imports:
        rows.append(
            Row(
                "a fresh interpreter importing the provider's job package with pyspark's Connect client "
                "(execute() does over Spark Connect)",
                fmt(imports["connect_job_package"]),
            )
        )
    return rows


def _imports_text(imports: Mapping[str, float]) -> str:
    if "spark_submit_hook" not in imports:
        return ""
    text = (
        " Loading a DAG file imports the apache-spark provider's spark_submit hook module in every arm "
        f"(the operators subclass SparkSubmitOperator): {imports['spark_submit_hook']:.1f} s in a fresh "
        "interpreter here"
    )
    if "kubernetes_client" in imports:
        text += f", {imports['kubernetes_client']:.1f} s of it for the cncf-kubernetes client it imports"
    return text + "."


def story_misses(label: str, arms: Mapping[str, StoryRuns], imports: Mapping[str, float]) -> list[str]:
    a, b, c = (arms[arm].whole() for arm in ARMS)
    misses = []
    if c / b < B_TARGET:
        airflow_b = arms["B"].airflow_part()
        misses.append(
            f"{label}: arm B's whole DAG is {c / b:.2f}x faster than arm C's (target {B_TARGET:.1f}x): "
            f"{b:.1f} s vs {c:.1f} s. Of B's {b:.1f} s, Airflow's own part is {airflow_b:.1f} s "
            f"({airflow_b / b:.0%}): {_parts_text(arms['B'])}. The largest part of B is "
            f"{largest_part(arms['B'])}. Arm C pays Airflow's part too ({arms['C'].airflow_part():.1f} s), "
            f"so even with no Spark time and no own work at all B could be at most "
            f"{c / airflow_b:.2f}x faster here; the Spark parts alone compare "
            f"{arms['C'].part('spark') / max(arms['B'].part('spark'), 1e-9):.2f}x." + _imports_text(imports)
        )
    if a / c > A_TARGET:
        differences = {part: arms["A"].part(part) - arms["C"].part(part) for part in PARTS}
        largest = max(differences, key=differences.get)
        spread = max(
            max(run.seconds for run in arms[arm].breakdowns)
            - min(run.seconds for run in arms[arm].breakdowns)
            for arm in ("A", "C")
        )
        by_part = ", ".join(
            f"{COMPONENT_LABELS.get(part, 'run completion')} {difference:+.1f} s"
            for part, difference in differences.items()
        )
        text = (
            f"{label}: arm A's whole DAG is {a / c:.2f}x arm C's (target {A_TARGET:.2f}x): {a:.1f} s vs "
            f"{c:.1f} s ({a - c:+.1f} s). By part, A minus C: {by_part}; the largest difference is "
            f"{COMPONENT_LABELS.get(largest, 'run completion')}."
        )
        if spread > abs(a - c):
            text += (
                f" The whole-DAG samples of one arm spread over {spread:.1f} s, more than the gap: "
                "load from other processes, not a difference of the arms, may explain it."
            )
        misses.append(text)
    return misses


def own_work_rows(
    runs: Mapping[tuple[str, str], StoryRuns], misses: list[str], imports: Mapping[str, float]
) -> list[Row]:
    shares_by_arm = {
        arm: [
            share
            for story, label in STORY_LABELS.items()
            if (story, arm) in runs
            for share in own_shares(label.split(" (")[0], runs[(story, arm)])
        ]
        for arm in ARMS
    }
    rows = []
    for arm, shares in shares_by_arm.items():
        if not shares:
            continue
        worst = max(shares, key=lambda share: share.share)
        whose = "SparkSubmitOperator's own work" if arm == "C" else "the provider's own work"
        rows.append(
            Row(
                f"arm {arm}: {whose}, largest share of a Spark task's run time "
                f"({worst.story}: {worst.task_id})",
                f"{worst.share:.1%}",
                target=f"≤ {OWN_TARGET:.0%} of each task",
                verdict=verdict(worst.share <= OWN_TARGET),
            )
        )
        if worst.share > OWN_TARGET:
            misses.append(own_work_miss(arm, shares, shares_by_arm.get("A", []), imports))
    return rows


def own_work_miss(
    arm: str, shares: Sequence[OwnShare], arm_a: Sequence[OwnShare], imports: Mapping[str, float]
) -> str:
    """One cause for an arm's tasks over the target: how many, how much, and what is in it."""
    over = [share for share in shares if share.share > OWN_TARGET]
    worst = max(over, key=lambda share: share.share)
    text = (
        f"arm {arm}: {'SparkSubmitOperator' if arm == 'C' else 'the provider'}'s own work is over "
        f"{OWN_TARGET:.0%} of the run time in {len(over)} of {len(shares)} Spark tasks "
        f"({min(s.share for s in over):.1%} to {worst.share:.1%}; the largest, {worst.story} "
        f"{worst.task_id}: {worst.own_work * 1000:.0f} ms of a {worst.run_time:.1f} s run, beside "
        f"{worst.spark:.1f} s of Spark). Its median over those tasks is "
        f"{statistics.median(s.own_work for s in over) * 1000:.0f} ms"
    )
    if any(share.settle > 0 for share in over):
        text += (
            f", of which settling earlier tries (asking the Connect server whether an earlier try's "
            f"session can still commit) is {statistics.median(s.settle for s in over) * 1000:.0f} ms"
        )
    text += "."
    if arm == "B" and "connect_job_package" in imports:
        text += (
            " Over Spark Connect, execute() imports the provider's job package with pyspark's Connect "
            f"client in the worker before the session opens: {imports['connect_job_package']:.2f} s in a "
            "fresh interpreter here."
        )
    if arm != "A" and arm_a:
        own_a = statistics.median(share.own_work for share in arm_a)
        text += f" Arm A's own work per task (median) is {own_a * 1000:.0f} ms, beside a longer Spark part."
    return text


def memory_rows(runs: Mapping[tuple[str, str], StoryRuns], server_peak: PeakMemory | None) -> list[Row]:
    medians: dict[str, tuple[float, float, float, float]] = {}
    for arm in ARMS:
        peaks = [
            peak
            for (_, run_arm), story in runs.items()
            if run_arm == arm
            for p in story.memory.values()
            for peak in p
        ]
        found = summary(peaks)
        if found is not None:
            medians[arm] = found
    rows = []
    for first in ("A", "B"):
        if first in medians and "C" in medians:
            rows.append(
                Row(
                    "worker peak RSS of a Spark task (its process and children, median over tasks): "
                    f"{first} vs C",
                    mib(medians[first][2]),
                    mib(medians["C"][2]),
                    times(medians[first][2] / medians["C"][2]),
                )
            )
    if server_peak is not None:
        rows.append(
            Row(
                "  the Spark Connect server's peak RSS (outside the worker, shared by every B task)",
                mib(server_peak.tree),
                verdict=INFO,
            )
        )
    return rows


def notes() -> list[str]:
    return [
        "A = " + ARM_LABELS["A"] + "; B = " + ARM_LABELS["B"] + "; C = " + ARM_LABELS["C"] + " "
        "(`benchmarks/dags_scheduler/`, `benchmarks/spark_jobs/peer_step.py`). One Airflow deployment "
        "(api-server, scheduler, dag-processor, LocalExecutor, SQLite) runs all three; each run gets a fresh "
        "warehouse, and its tables are checked with pyiceberg after it. All arms on Spark 4.1 with its "
        "Iceberg runtime, `local[2]` (the Connect server too); the Connect server is started by the "
        "comparison and warmed by one untimed run of each DAG.",
        "Whole DAG: the run's `queued_at` (the trigger, through the REST API) to its `end_date`. Per task, "
        "from `task_instance` and the task probe (`benchmarks/task_probe.py`, an Airflow listener in the "
        "worker): queue and scheduling delay = upstream's last `end_date` (or the trigger) to `start_date`; "
        "task process start = `start_date` to `execute()` (loading the DAG file is the `dag_file_parse_ms` "
        "Airflow logs); Spark = the spark-submit process (`SparkSubmitHook.submit`) or the Spark Connect job "
        "(`ConnectJob.run` without the provider's settling of earlier tries); own work = the rest of "
        "`execute()`; finishing = `execute()`'s end to `end_date`; run completion = the last task's end to "
        "the run's `end_date`. Airflow's part = delays + process starts + finishing + run completion.",
        "Ratios compare medians over repetitions of runs in the same deployment, interleaved (the arms' "
        "order rotates each repetition). Peak RSS: psutil samples (4 a second) of each task process "
        "(`airflow worker -- <ti id>`) with its children (spark-submit's JVM, the PySpark driver); "
        "over Spark Connect, Spark runs in the server, outside the worker.",
    ]


def details(runs: Mapping[tuple[str, str], StoryRuns]) -> list[str]:
    """Markdown tables: each DAG's parts per arm, then each task's (medians over repetitions)."""
    head = "| DAG | arm | whole DAG | " + " | ".join(COMPONENT_LABELS[c] for c in COMPONENTS)
    lines = [
        "Whole DAG and its parts, summed over the run's tasks (medians, seconds; the process starts' "
        "DAG file loading in brackets):",
        "",
        head + " | run completion |",
        "|---|---|" + "---|" * (len(COMPONENTS) + 2),
    ]
    for story, label in STORY_LABELS.items():
        for arm in ARMS:
            story_runs = runs.get((story, arm))
            if not story_runs or not story_runs.breakdowns:
                continue
            cells = [f"{story_runs.part(c):.2f}" for c in COMPONENTS]
            cells[1] += f" ({story_runs.part('parse'):.2f})"
            lines.append(
                f"| {label.split(' (')[0]} | {arm} | {story_runs.whole():.2f} | "
                + " | ".join(cells)
                + f" | {story_runs.part('completion'):.2f} |"
            )
    lines += [
        "",
        "Per task (medians, seconds; own share = own work ÷ run time; peak RSS of the task's processes):",
        "",
        "| DAG | task | arm | delay | process start (DAG file) | own work | Spark | finishing | run time "
        "| own share | peak RSS |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for story, label in STORY_LABELS.items():
        for task_id in _task_order(runs, story):
            for arm in ARMS:
                story_runs = runs.get((story, arm))
                if not story_runs or not story_runs.tasks(task_id):
                    continue
                tasks = story_runs.tasks(task_id)
                peaks = story_runs.memory.get(task_id)
                peak = mib(statistics.median(p.tree for p in peaks)) if peaks else "—"
                m = {name: story_runs.task_median(task_id, name) for name in (*COMPONENTS, "parse")}
                lines.append(
                    f"| {label.split(' (')[0]} | {task_id} | {arm} | {m['delay']:.2f} | "
                    f"{m['process_start']:.2f} ({m['parse']:.2f}) | {m['own_work']:.3f} | {m['spark']:.2f} | "
                    f"{m['finishing']:.3f} | {statistics.median(t.run_time for t in tasks):.2f} | "
                    f"{statistics.median(t.own_share for t in tasks):.1%} | {peak} |"
                )
    return lines


def _task_order(runs: Mapping[tuple[str, str], StoryRuns], story: str) -> Sequence[str]:
    order: dict[str, None] = {}
    for arm in ARMS:
        if (story, arm) in runs:
            order.update(dict.fromkeys(runs[(story, arm)].task_ids()))
    return list(order)

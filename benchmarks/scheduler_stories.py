"""Comparison #7: the two example DAGs under the real scheduler, in three arms, interleaved.

One deployment (:mod:`benchmarks.deployment`: api-server, scheduler, dag-processor, the
LocalExecutor) runs ``dags/iceberg_daily_orders.py`` and ``dags/iceberg_write_audit_publish.py``
as they are, and their peers in ``benchmarks/dags_scheduler/``:

- **A**: the operators over spark-submit (``spark_default`` is a ``spark`` connection, ``local[2]``);
- **B**: the operators over Spark Connect (``spark_default`` is a ``spark_connect`` connection to
  a server this comparison starts, :class:`tests.servers.spark_connect.SparkConnectServer`);
- **C**: plain SparkSubmitOperators running a hand-written job per step (the peer DAGs).

Every arm runs on the Connect server's Spark line (4.1 and its Iceberg runtime), so the arms
differ by mode only. Each run is triggered through the REST API and timed from the trigger to
success; each run gets a fresh warehouse (the catalog connection is switched with the Spark one),
so every repetition starts from empty tables, and its tables are checked with pyiceberg after it
(a fast wrong answer is no result). Per repetition, for each DAG, the three arms run one after
the other, the order rotating (A B C, B C A, C A B). Before the timed runs, each DAG runs once in
arm B, untimed: the server's first session of each kind (being warm is the point of the mode).
:mod:`benchmarks.scheduler_report` turns the records into the section.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.deployment import REPO, BenchDeployment, FinishedRun
from benchmarks.results import Section
from benchmarks.scheduler_report import ARMS, StoryRuns, summarize
from benchmarks.spark_line import spark_line_environment
from benchmarks.timeline import RunBreakdown, is_spark_task, run_breakdown
from benchmarks.worker_memory import WorkerMemorySampler
from benchmarks.workspace import BenchWorkspace, last_json_line
from tests.integration.airflow_runner import hadoop_catalog_connection, spark_connection

PEER_DAGS = REPO / "benchmarks" / "dags_scheduler"
CONNECT_SERVER = "Spark Connect server"
#: Imports that explain the task processes' start and the own work over Spark Connect, timed in
#: fresh interpreters (:mod:`benchmarks.parse_probe`: ``module`` after ``loaded``): name ->
#: (module, loaded). Every Spark task's DAG file imports the apache-spark provider's hook module
#: (the operators subclass SparkSubmitOperator); with the cncf-kubernetes client loaded first, the
#: difference is that client's share. Over Spark Connect, ``execute()`` imports the job package.
IMPORTS = {
    "spark_submit_hook": ("airflow.providers.apache.spark.hooks.spark_submit", ("airflow.sdk",)),
    "spark_submit_hook_after_kubernetes_client": (
        "airflow.providers.apache.spark.hooks.spark_submit",
        ("airflow.sdk", "airflow.providers.cncf.kubernetes.kube_client"),
    ),
    "connect_job_package": ("airflow_iceberg.jobs.iceberg_job", ("airflow.sdk", "airflow_iceberg.operators")),
}


def check_daily_orders(warehouse: Path, day: str) -> None:
    """Day one corrected (90 rows) beside day two (80), and the copy from before the correction (180)."""
    counts = {table: _rows(warehouse, table) for table in ("db.orders", "db.orders_before_correction")}
    if counts != {"db.orders": 170, "db.orders_before_correction": 180}:
        raise RuntimeError(f"daily orders wrote {counts}, not 170 and 180 rows")


def check_write_audit_publish(warehouse: Path, day: str) -> None:
    """Main holds the merged six orders, tagged ``eod_<day>``; the audit branch is gone."""
    from scripts.show_table import load_table

    table = load_table(warehouse, "wap_demo.orders")
    rows = table.scan().to_arrow().num_rows
    refs = {name: ref.snapshot_ref_type.value for name, ref in table.metadata.refs.items()}
    tag = f"eod_{day.replace('-', '')}"
    if rows != 6 or refs != {"main": "branch", tag: "tag"}:
        raise RuntimeError(
            f"write-audit-publish left {rows} rows and refs {refs}, not 6 rows, main and {tag}"
        )


def _rows(warehouse: Path, table: str) -> int:
    from scripts.show_table import load_table

    return load_table(warehouse, table).scan().to_arrow().num_rows


@dataclass(frozen=True)
class Story:
    """One example DAG, its peer, and the check of what a run of either must leave."""

    key: str
    dag_file: Path
    dag_id: str
    peer_dag_id: str
    check: Callable[[Path, str], None]

    def dag_for(self, arm: str) -> str:
        return self.peer_dag_id if arm == "C" else self.dag_id

    @property
    def dag_files(self) -> tuple[Path, Path]:
        return self.dag_file, PEER_DAGS / f"{self.peer_dag_id}.py"


STORIES = (
    Story(
        "daily_orders",
        REPO / "dags" / "iceberg_daily_orders.py",
        "iceberg_daily_orders",
        "peer_daily_orders",
        check_daily_orders,
    ),
    Story(
        "write_audit_publish",
        REPO / "dags" / "iceberg_write_audit_publish.py",
        "iceberg_write_audit_publish",
        "peer_write_audit_publish",
        check_write_audit_publish,
    ),
)


def rotation(repetition: int) -> tuple[str, ...]:
    """The arms' order in a repetition: A B C, then B C A, then C A B, ..."""
    shift = (repetition - 1) % len(ARMS)
    return ARMS[shift:] + ARMS[:shift]


class Arms:
    """The three arms on one deployment: switch the connections, trigger a run, check its tables."""

    def __init__(self, deployment: BenchDeployment, connect: dict, line: dict[str, str], root: Path) -> None:
        self.deployment = deployment
        self.connect = connect
        self.runtime_jar = line["ICEBERG_RUNTIME_JAR"]
        self.spark_version = line["SPARK_LINE"]
        self.warehouses = root / "warehouses"

    def catalog(self, warehouse: Path) -> dict:
        """The example DAGs' ``iceberg_catalog_default``: Hadoop catalog ``demo`` on the arms' Spark line."""
        connection = hadoop_catalog_connection(warehouse)
        connection["extra"].update(spark_version=self.spark_version, runtime_jar=self.runtime_jar)
        return connection

    def run(self, story: Story, arm: str, label: str) -> FinishedRun:
        logical_date = self.deployment.next_logical_date()
        warehouse = self.warehouses / f"{story.key}-{arm}-{label}"
        warehouse.mkdir(parents=True)
        self.deployment.set_connection("iceberg_catalog_default", self.catalog(warehouse))
        self.deployment.set_connection("spark_default", self.connect if arm == "B" else spark_connection())
        conf = {"warehouse": warehouse.as_uri(), "runtime_jar": self.runtime_jar} if arm == "C" else {}
        finished = self.deployment.run_dag(
            story.dag_for(arm), f"bench7__{story.key}__{arm}__{label}", logical_date, conf
        )
        story.check(warehouse, logical_date[:10])
        return finished

    def attempt(self, story: Story, arm: str, label: str, failures: list[str]) -> RunBreakdown | None:
        """:meth:`run` and its breakdown; a failed run (or one without a breakdown) goes to ``failures``."""
        try:
            finished = self.run(story, arm, label)
            return run_breakdown(
                finished.run, finished.tasks, finished.upstream, finished.probes, finished.parse_seconds
            )
        except (RuntimeError, ValueError) as error:  # reported; the other runs are still measured
            failures.append(f"{story.key} arm {arm} (run {label}): {error}"[:2000])
            print(f"    FAILED {failures[-1]}", file=sys.stderr, flush=True)
            return None


def import_seconds(ws: BenchWorkspace, repetitions: int) -> dict[str, float]:
    """Medians of :data:`IMPORTS`, interleaved, and the cncf-kubernetes client's share of the hook's.

    An import that fails (cncf-kubernetes is an optional provider) is left out.
    """
    samples: dict[str, list[float]] = {}
    for _ in range(repetitions):
        for name, (module, loaded) in IMPORTS.items():
            try:
                probe = ws.run_python("-m", "benchmarks.parse_probe", "import", module, *loaded)
            except RuntimeError:
                continue
            samples.setdefault(name, []).append(float(last_json_line(probe.stdout)["seconds"]))
    found = {name: statistics.median(values) for name, values in samples.items()}
    if "spark_submit_hook_after_kubernetes_client" in found:
        rest = found.pop("spark_submit_hook_after_kubernetes_client")
        if "spark_submit_hook" in found:
            found["kubernetes_client"] = max(0.0, found["spark_submit_hook"] - rest)
    return found


def run(ws: BenchWorkspace, repetitions: int) -> Section:
    from tests.servers.spark_connect import SERVER_SPARK_LINE, SparkConnectServer

    print("==> #7 the example DAGs under the real scheduler: arms A, B, C", file=sys.stderr, flush=True)
    line = spark_line_environment(SERVER_SPARK_LINE)
    root = ws.root / "scheduler-stories"
    dag_files = [path for story in STORIES for path in story.dag_files]
    runs: dict[tuple[str, str], StoryRuns] = {}
    failures: list[str] = []
    with (
        SparkConnectServer(root / "spark-connect") as server,
        BenchDeployment.running(root, dag_files, env=line) as deployment,
        WorkerMemorySampler(named={CONNECT_SERVER: server.process.pid}) as memory,
    ):
        arms = Arms(deployment, server.connection(), line, root)
        for story in STORIES:  # the server's first session of each kind, untimed
            arms.attempt(story, "B", "warm-up", failures)
        for repetition in range(1, repetitions + 1):
            for story in STORIES:
                for arm in rotation(repetition):
                    breakdown = arms.attempt(story, arm, str(repetition), failures)
                    if breakdown is None:
                        continue
                    runs.setdefault((story.key, arm), StoryRuns()).breakdowns.append(breakdown)
                    print(
                        f"    [{repetition}/{repetitions}] {story.key} {arm}: {breakdown.seconds:.1f} s "
                        f"(Spark {breakdown.total('spark'):.1f} s, Airflow {breakdown.airflow_part:.1f} s)",
                        file=sys.stderr,
                        flush=True,
                    )
    for story_runs in runs.values():
        for breakdown in story_runs.breakdowns:
            for task in breakdown.tasks:
                if is_spark_task(task) and task.ti_id in memory.peaks:
                    story_runs.memory.setdefault(task.task_id, []).append(memory.peaks[task.ti_id])
    imports = import_seconds(ws, max(3, repetitions))
    return summarize(runs, memory.named_peaks.get(CONNECT_SERVER), failures, imports)

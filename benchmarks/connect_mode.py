"""Comparison #6: the same tasks in Spark Connect mode vs spark-submit mode.

Both modes run the same operators and the same job; only the ``spark_default`` connection
differs (``spark_connect`` on a warm Spark Connect server, or ``spark`` with ``local[2]``). Both
use Spark 4.0 and its Iceberg runtime, so the comparison is of the modes, not of Spark lines:
the spark-submit side runs Spark 4.0's spark-submit (``SPARK_LINE=4.0``), and the server is
Spark 4.0.5's ``SparkConnectServer`` on ``local[2]`` with the same spark-defaults.conf
(:class:`tests.servers.spark_connect.SparkConnectServer`). The server is started once and
warmed with one untimed run of each kind of task (the four steps, a 1,000-row append): being
long-running and warm is the point of the mode.

Sides, interleaved (Connect, spark-submit; the order flips every repetition), each mode on its
own table:

- the example DAG's four steps, each via ``airflow tasks test`` (as in #5);
- a single 1,000-row append; a 10,000,000-row append (:mod:`benchmarks.workload`);
- the whole example DAG, ``airflow dags test iceberg_emr_quickstart``, checked through its XComs
  (6 rows, then 3);
- Airflow's fixed cost, once per repetition (no Spark in it, so no mode): ``airflow tasks test``
  of an empty task and ``airflow dags test`` of a DAG of four empty tasks, for the rows
  "without Airflow's fixed cost".
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from benchmarks.results import Row, Section, times, verdict
from benchmarks.results import seconds as fmt
from benchmarks.spark_line import spark_line_environment
from benchmarks.stats import median
from benchmarks.story import FIRST_BATCH, SECOND_BATCH, check
from benchmarks.workload import rows_query
from benchmarks.workspace import REPO, BenchWorkspace, children_cpu_seconds

SMALL_TARGET = 5.0
DAG_TARGET = 3.0
LARGE_TARGET = 0.9
MODES = ("connect", "submit")
EXAMPLE_DAG = "iceberg_emr_quickstart"
NOOP_DAG = "airflow_iceberg_bench_noop_story"
#: step -> (task of the bench DAG, rows its read must count)
STEPS = {
    "create": ("story_create", None),
    "append": ("append_rows", None),
    "read": ("story_read", 6),
    "read_snapshot": ("story_read_snapshot", 3),
}
#: Run once in Connect mode before the timed repetitions: the server's first task of each kind.
WARM_UP = ("step_create", "step_append", "step_read", "step_read_snapshot", f"append_{1_000}")
#: Arms that do not depend on the mode (Airflow's own cost): run once per repetition.
SHARED = ("airflow_noop_task", "airflow_noop_dag")
LARGE = 10_000_000
SMALL = 1_000


def spark4_environment() -> dict[str, str]:
    """The variables ``SPARK_LINE=4.0 source scripts/local_env.sh`` sets."""
    return spark_line_environment("4.0")


class Modes:
    """The two modes' connections and environment, and a timed task or DAG run in either."""

    def __init__(self, ws: BenchWorkspace, server_connection: dict) -> None:
        self.ws = ws
        self.env = spark4_environment()
        catalog = dict(ws.connections["iceberg_catalog_default"])
        catalog["extra"] = {
            **catalog["extra"],
            "spark_version": "4.0",
            "runtime_jar": self.env["ICEBERG_RUNTIME_JAR"],
        }
        self.connections = {
            "connect": {"iceberg_catalog_default": catalog, "spark_default": server_connection},
            "submit": {"iceberg_catalog_default": catalog, "spark_default": ws.connections["spark_default"]},
        }
        self.tables = {mode: f"iceberg_db.mode_{mode}" for mode in MODES}

    def rows_table(self, mode: str) -> str:
        """The table the 1,000- and 10,000,000-row appends of ``mode`` go to."""
        return f"{self.tables[mode]}_rows"

    def task(self, mode: str, task_id: str, **params: object):
        return self.ws.run_task(task_id, env=self.env, connections=self.connections[mode], **params)

    def dag(self, mode: str, dag_id: str, dags_folder: Path) -> tuple[float, float]:
        """``airflow dags test`` of one DAG: (wall seconds, CPU seconds). Fails unless it succeeded."""
        cpu_before, started = children_cpu_seconds(), time.perf_counter()
        completed = self.ws.runner.airflow(
            "dags",
            "test",
            dag_id,
            connections={**self.ws.connections, **self.connections[mode]},
            env={**self.env, "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder)},
        )
        elapsed, cpu = time.perf_counter() - started, children_cpu_seconds() - cpu_before
        output = completed.stdout + completed.stderr
        if completed.returncode != 0 or "state=failed" in output:
            raise RuntimeError(f"airflow dags test {dag_id} ({mode}) failed:\n{output[-6000:]}")
        return elapsed, cpu


def run(ws: BenchWorkspace, repetitions: int, sizes: tuple[int, ...] = (SMALL, LARGE)) -> Section:
    from tests.servers.spark_connect import SparkConnectServer  # the tests' own server, reused

    print("==> #6 Spark Connect mode vs spark-submit mode (Spark 4.0 both)", file=sys.stderr)
    with SparkConnectServer(ws.root / "spark-connect") as server:
        modes = Modes(ws, server.connection())
        named = arms(modes, sizes)
        for mode in MODES:  # the appends' tables, untimed
            modes.task(mode, "create_table", table=modes.rows_table(mode), source_query=rows_query(0))
        for name in WARM_UP:  # the server's first task of each kind, untimed
            named[name]("connect")
        samples: dict[str, list[float]] = {}
        failures: list[str] = []
        for repetition in range(1, repetitions + 1):
            order = MODES if repetition % 2 else MODES[::-1]
            for name, arm in named.items():
                for mode in order[:1] if name in SHARED else order:
                    try:
                        seconds, cpu = arm(mode)
                    except RuntimeError as error:  # reported, and the other arms still measured
                        failures.append(
                            f"{mode} {name} (repetition {repetition}): {str(error).splitlines()[0]}"
                        )
                        print(f"    FAILED {failures[-1]}", file=sys.stderr, flush=True)
                        continue
                    samples.setdefault(f"{mode}_{name}", []).append(seconds)
                    samples.setdefault(f"{mode}_{name}_cpu", []).append(cpu)
                    print(
                        f"    [{repetition}/{repetitions}] {mode} {name}: {seconds:.3f} s (cpu {cpu:.2f} s)",
                        file=sys.stderr,
                        flush=True,
                    )
    return summarize(samples, sizes, failures)


def arms(modes: Modes, sizes: tuple[int, ...]) -> dict:
    """Name -> function(mode) -> (seconds, cpu seconds), in the order they run each repetition."""
    first_snapshot: dict[str, str] = {}

    def step(name: str, task_id: str, expected_rows: int | None):
        def run_step(mode: str) -> tuple[float, float]:
            params = {
                "table": modes.tables[mode],
                "source_query": FIRST_BATCH if name == "create" else SECOND_BATCH,
                "snapshot_id": first_snapshot.get(mode, "0"),
            }
            task = modes.task(mode, task_id, **params)
            check(task, mode, name, expected_rows)
            if name == "create":
                first_snapshot[mode] = _snapshot_id(task.output)
            return task.seconds, task.cpu_seconds

        return run_step

    def append(rows: int):
        def run_append(mode: str) -> tuple[float, float]:
            task = modes.task(
                mode, "append_rows", table=modes.rows_table(mode), source_query=rows_query(rows)
            )
            return task.seconds, task.cpu_seconds

        return run_append

    def example_dag(mode: str) -> tuple[float, float]:
        result = modes.dag(mode, EXAMPLE_DAG, REPO / "dags")
        counts = [
            modes.ws.runner.xcom(EXAMPLE_DAG, task)["row_count"]
            for task in ("read_all", "read_first_snapshot")
        ]
        if counts != [6, 3]:
            raise RuntimeError(f"{EXAMPLE_DAG} ({mode}) read {counts} rows, not [6, 3]")
        return result

    named = {f"step_{name}": step(name, task_id, rows) for name, (task_id, rows) in STEPS.items()}
    named.update({f"append_{rows}": append(rows) for rows in sizes})
    named["airflow_noop_task"] = lambda mode: _noop_task(modes, mode)
    named["example_dag"] = example_dag
    named["airflow_noop_dag"] = lambda mode: modes.dag(mode, NOOP_DAG, REPO / "benchmarks" / "dags")
    return named


def _noop_task(modes: Modes, mode: str) -> tuple[float, float]:
    task = modes.task(mode, "noop")
    return task.seconds, task.cpu_seconds


def _snapshot_id(output: str) -> str:
    from benchmarks.story import _SNAPSHOT_ID

    return _SNAPSHOT_ID.findall(output)[-1]


def summarize(samples: dict[str, list[float]], sizes: tuple[int, ...], failures: list[str] = ()) -> Section:
    section = Section(
        6,
        "Spark Connect mode vs spark-submit mode (Spark 4.0 both)",
        "Spark Connect mode",
        "spark-submit mode",
        samples=samples,
    )
    fixed_task = median(_shared(samples, "airflow_noop_task") or [0.0])
    fixed_dag = median(_shared(samples, "airflow_noop_dag") or [0.0])
    small = [f"step_{name}" for name in STEPS] + [f"append_{rows}" for rows in sizes if rows < LARGE]
    measured = [name for name in [*small, "example_dag"] if _both(samples, name)]
    for name in measured:
        dag = name == "example_dag"
        section.rows += speedup_rows(
            samples,
            name,
            DAG_TARGET if dag else SMALL_TARGET,
            fixed_dag if dag else fixed_task,
            "DAG" if dag else "task",
        )
    if _both(samples, f"append_{LARGE}"):
        connect, submit = (
            median(samples[f"connect_append_{LARGE}"]),
            median(samples[f"submit_append_{LARGE}"]),
        )
        section.rows.append(
            Row(
                f"append {LARGE:,} rows: rows/s of Connect mode ÷ rows/s of spark-submit mode",
                fmt(connect),
                fmt(submit),
                times(submit / connect),
                f"≥ {LARGE_TARGET:.2f}x",
                verdict(submit / connect >= LARGE_TARGET),
            )
        )
        if submit / connect < LARGE_TARGET:
            section.misses.append(
                f"append {LARGE:,} rows: Connect mode is {submit / connect:.2f}x spark-submit mode's speed "
                f"(target {LARGE_TARGET:.2f}x): {connect:.1f} s vs {submit:.1f} s; CPU of the task's own "
                f"processes {median(samples[f'connect_append_{LARGE}_cpu']):.1f} s vs "
                f"{median(samples[f'submit_append_{LARGE}_cpu']):.1f} s (the Connect server's work is not "
                "in the Connect side's CPU figure; it runs outside the task)."
            )
    section.rows.append(Row("Airflow's fixed cost: an empty task via `airflow tasks test`", fmt(fixed_task)))
    section.rows.append(
        Row("Airflow's fixed cost: `airflow dags test` of a DAG of four empty tasks", fmt(fixed_dag))
    )
    for name in measured:
        dag = name == "example_dag"
        target, fixed = (DAG_TARGET, fixed_dag) if dag else (SMALL_TARGET, fixed_task)
        connect, submit = median(samples[f"connect_{name}"]), median(samples[f"submit_{name}"])
        if submit / connect < target:
            section.misses.append(miss_cause(name, connect, submit, target, fixed, "DAG" if dag else "task"))
    section.notes = [
        "Ratio = spark-submit mode's time ÷ Connect mode's time (higher is better for Connect).",
        "Both modes: the same operators and job, Spark 4.0.5 with "
        f"{Path(spark4_environment().get('ICEBERG_RUNTIME_JAR', '')).stem}, "
        "`local[2]`, the same spark-defaults.conf; only the `spark_default` connection differs.",
        "The Connect server is started once for the comparison and warmed by one untimed run of every "
        "arm; its CPU is not in the Connect side's CPU figures (it is not a process of the task).",
        "The rows 'without Airflow' subtract the median of Airflow's fixed cost (an empty task, or a DAG "
        "of four empty tasks, measured once per repetition) from both sides.",
        *(f"Failed, not measured: {failure}" for failure in failures),
    ]
    return section


def _both(samples: dict[str, list[float]], name: str) -> bool:
    return all(samples.get(f"{mode}_{name}") for mode in MODES)


def _shared(samples: dict[str, list[float]], name: str) -> list[float]:
    """The samples of a mode-independent arm, whichever mode's environment it ran in."""
    return [value for mode in MODES for value in samples.get(f"{mode}_{name}", [])]


def speedup_rows(
    samples: dict[str, list[float]], name: str, target: float, fixed: float, unit: str
) -> list[Row]:
    connect, submit = median(samples[f"connect_{name}"]), median(samples[f"submit_{name}"])
    label = name.removeprefix("step_").replace("_", " ")
    if name.startswith("append_"):
        label = f"append {int(name.split('_')[1]):,} rows"
    if name == "example_dag":
        label = f"whole example DAG (`airflow dags test {EXAMPLE_DAG}`)"
    rows = [
        Row(
            f"{label}: {unit} time",
            fmt(connect),
            fmt(submit),
            times(submit / connect),
            f"≥ {target:.1f}x faster",
            verdict(submit / connect >= target),
        )
    ]
    if connect > fixed:
        rows.append(
            Row(
                f"  {label} without Airflow's fixed {unit} cost",
                fmt(connect - fixed),
                fmt(submit - fixed),
                times((submit - fixed) / (connect - fixed)),
            )
        )
    return rows


def miss_cause(name: str, connect: float, submit: float, target: float, fixed: float, unit: str) -> str:
    label = name.removeprefix("step_").replace("_", " ")
    text = (
        f"{label}: Connect mode is {submit / connect:.2f}x faster than spark-submit mode (target "
        f"{target:.1f}x): {connect:.1f} s vs {submit:.1f} s. "
    )
    if connect <= fixed * 1.05:
        return text + (
            f"Airflow's own fixed cost per {unit} is {fixed:.1f} s, so no mode can take less; "
            f"the best possible ratio here is {submit / fixed:.2f}x."
        )
    return text + (
        f"Of the Connect side, {fixed:.1f} s is Airflow's fixed cost per {unit} and {connect - fixed:.1f} s "
        f"the job; without Airflow the ratio is {(submit - fixed) / (connect - fixed):.2f}x, and even a "
        f"job taking no time at all would give {submit / fixed:.2f}x."
    )


def connect_unavailable_reason() -> str | None:
    """Why #6 cannot run here (no Spark 4.0 runtime, no Connect server class), or None."""
    try:
        from tests.servers.spark_connect import SparkConnectServer  # noqa: F401
    except ImportError as error:
        return f"no Spark Connect server helper ({error})"
    jar = Path(spark4_environment().get("ICEBERG_RUNTIME_JAR", ""))
    if not jar.is_file() or not os.access(jar, os.R_OK):
        return f"no Iceberg runtime jar for Spark 4.0 ({jar})"
    return None

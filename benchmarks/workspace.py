"""A private Airflow home, warehouse and connections for one benchmark run, and timed task runs.

Tasks run through the real Airflow CLI (``airflow tasks test``, reusing the integration tests'
:class:`~tests.integration.airflow_runner.AirflowRunner`) against ``benchmarks/dags``, with the
connections passed as ``AIRFLOW_CONN_*`` variables like a deployment would. Everything lives
under one temporary folder that :meth:`BenchWorkspace.close` removes.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.integration.airflow_runner import AirflowRunner, hadoop_catalog_connection, spark_connection

REPO = Path(__file__).resolve().parents[1]
BENCH_DAGS = REPO / "benchmarks" / "dags"
BENCH_DAG_ID = "airflow_iceberg_bench"
CATALOG = "demo"


@dataclass(frozen=True)
class TaskRun:
    seconds: float
    output: str
    #: CPU time (user + system) of the whole process tree: Airflow's CLI, spark-submit, the JVM,
    #: the Python driver. Load from other processes stretches wall time far more than this.
    cpu_seconds: float = 0.0


def children_cpu_seconds() -> float:
    """CPU seconds used so far by this process's finished (waited-for) descendants."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class BenchWorkspace:
    """Everything one ``make bench`` run writes, outside the checkout."""

    def __init__(self, root: Path, runner: AirflowRunner) -> None:
        self.root = root
        self.runner = runner
        self.warehouse = root / "warehouse"
        self.connections = {
            "iceberg_catalog_default": hadoop_catalog_connection(self.warehouse, CATALOG),
            "spark_default": spark_connection(),
        }

    @classmethod
    def create(cls) -> BenchWorkspace:
        root = Path(tempfile.mkdtemp(prefix="airflow-iceberg-bench-"))
        print(f"==> workspace {root} (migrating a private Airflow metadata database)", file=sys.stderr)
        return cls(root, AirflowRunner.create(root / "airflow_home"))

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a bench subprocess: the runner's, the bench DAGs, the connections."""
        env = {**self.runner.base_env, "AIRFLOW__CORE__DAGS_FOLDER": str(BENCH_DAGS), **extra}
        for conn_id, connection in self.connections.items():
            env[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(connection)
        return env

    def table_dir(self, table: str) -> Path:
        """A Hadoop-catalog table's folder: ``warehouse/<namespace>/<table>``."""
        return self.warehouse.joinpath(*table.split("."))

    def run_task(
        self,
        task_id: str,
        env: dict[str, str] | None = None,
        connections: dict[str, dict] | None = None,
        **params: object,
    ) -> TaskRun:
        """``airflow tasks test`` one task of the bench DAG with these params; wall time and output.

        ``connections`` replace the workspace's connections of the same id for this run only.
        """
        cpu_before, started = children_cpu_seconds(), time.perf_counter()
        completed = self.runner.airflow(
            "tasks",
            "test",
            BENCH_DAG_ID,
            task_id,
            "-t",
            json.dumps(params),
            connections={**self.connections, **(connections or {})},
            env={"AIRFLOW__CORE__DAGS_FOLDER": str(BENCH_DAGS), **(env or {})},
        )
        elapsed, cpu = time.perf_counter() - started, children_cpu_seconds() - cpu_before
        output = completed.stdout + completed.stderr
        # `airflow tasks test` exits 0 even when the task fails: the task's final state is the answer
        if completed.returncode != 0 or "new_state=success" not in output:
            raise RuntimeError(
                f"airflow tasks test {task_id} failed ({completed.returncode}):\n{output[-6000:]}"
            )
        if '"reused_earlier_commit": true' in output:
            raise RuntimeError(
                f"airflow tasks test {task_id} found its commit id in the table and wrote nothing"
            )
        return TaskRun(elapsed, output, cpu)

    def run_python(
        self, *args: str, python: str | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a bench helper module in a fresh interpreter (``-m benchmarks....``) from the checkout."""
        completed = subprocess.run(
            [python or sys.executable, *args],
            env={**self.env(), **(env or {})},
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
        if completed.returncode != 0:
            raise RuntimeError(
                f"{' '.join(args)} failed ({completed.returncode}):\n"
                f"{(completed.stdout + completed.stderr)[-6000:]}"
            )
        return completed


def last_json_line(text: str) -> dict:
    """The last line of a helper's stdout, where each helper prints its JSON answer."""
    return json.loads(text.strip().splitlines()[-1])

"""A private Airflow home, warehouse and connections for one benchmark run, and timed task runs.

Tasks run through the real Airflow CLI (``airflow tasks test``, reusing the integration tests'
:class:`~tests.integration.airflow_runner.AirflowRunner`) against ``benchmarks/dags``, with the
connections passed as ``AIRFLOW_CONN_*`` variables like a deployment would. Everything lives
under one temporary folder that :meth:`BenchWorkspace.close` removes.
"""

from __future__ import annotations

import json
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

    def run_task(self, task_id: str, env: dict[str, str] | None = None, **params: object) -> TaskRun:
        """``airflow tasks test`` one task of the bench DAG with these params; wall time and output."""
        started = time.perf_counter()
        completed = self.runner.airflow(
            "tasks",
            "test",
            BENCH_DAG_ID,
            task_id,
            "-t",
            json.dumps(params),
            connections=self.connections,
            env={"AIRFLOW__CORE__DAGS_FOLDER": str(BENCH_DAGS), **(env or {})},
        )
        elapsed = time.perf_counter() - started
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
        return TaskRun(elapsed, output)

    def run_python(self, *args: str, python: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run a bench helper module in a fresh interpreter (``-m benchmarks....``) from the checkout."""
        completed = subprocess.run(
            [python or sys.executable, *args],
            env=self.env(),
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

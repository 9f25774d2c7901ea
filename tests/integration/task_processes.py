"""Run ``airflow tasks test`` as a background process group, watch a table on disk, and kill things.

The robustness tests need what :meth:`AirflowRunner.airflow` cannot give: a task that is still
running while the test looks at the table's files, and precise control over which process gets
which signal. Each task runs in its own session (its own process group), so the Airflow CLI,
spark-submit's JVM and the PySpark driver can be signalled together or one at a time, and are
always reaped: :class:`TaskProcess` kills its whole group when it is closed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from tests.integration.airflow_runner import REPO, AirflowRunner

ROBUSTNESS_DAGS = REPO / "tests" / "integration" / "robustness_dags"
#: Every wait in this suite is bounded; a Spark job on a busy 2-core machine takes up to a minute.
TASK_TIMEOUT_SECONDS = 300
SPARK_SUBMIT_CLASS = "org.apache.spark.deploy.SparkSubmit"


def airflow_env(runner: AirflowRunner, connections: dict[str, dict]) -> dict[str, str]:
    """The environment :meth:`AirflowRunner.airflow` would use, with the robustness DAGs folder."""
    env = {**runner.base_env, "AIRFLOW__CORE__DAGS_FOLDER": str(ROBUSTNESS_DAGS)}
    for conn_id, connection in connections.items():
        env[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(connection)
    return env


def tasks_test_argv(
    dag_id: str, task_id: str, run: str, map_index: int | None = None, params: dict | None = None
) -> list[str]:
    argv = ["airflow", "tasks", "test", dag_id, task_id, run]
    if map_index is not None:
        argv += ["--map-index", str(map_index)]
    if params:
        argv += ["--task-params", json.dumps(params)]
    return argv


@dataclass
class TaskProcess:
    """One ``airflow tasks test`` running in its own process group, its output in a file."""

    argv: list[str]
    env: dict[str, str]
    log_path: Path
    popen: subprocess.Popen | None = None
    started_at: float = 0.0
    _log: Any = field(default=None, repr=False)

    def start(self) -> TaskProcess:
        self._log = open(self.log_path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self.popen = subprocess.Popen(
            self.argv, env=self.env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.started_at = time.monotonic()
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def group(self) -> list[psutil.Process]:
        """Every live process of this task's process group (Airflow, spark-submit JVM, PySpark driver)."""
        return processes_in_group(self.pid)

    def spark_submit_jvm(self) -> psutil.Process | None:
        """spark-submit's JVM (the SparkSubmit main class), once it runs."""
        for process in self.group():
            if is_spark_submit_jvm(process):
                return process
        return None

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)

    def wait(self, timeout: float = TASK_TIMEOUT_SECONDS) -> int:
        assert self.popen is not None
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.close()
            raise AssertionError(
                f"{' '.join(self.argv[:6])} did not finish in {timeout}s:\n{self.output()[-4000:]}"
            ) from None

    def close(self) -> None:
        """Kill whatever is left of the group and reap the CLI process. Safe to call twice."""
        if self.popen is not None:
            self.signal_group(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=30)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> TaskProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_task(
    runner: AirflowRunner,
    log_dir: Path,
    dag_id: str,
    task_id: str,
    run: str,
    connections: dict[str, dict],
    map_index: int | None = None,
    params: dict | None = None,
) -> TaskProcess:
    """Start ``airflow tasks test`` in the background; the caller waits, signals and closes it."""
    name = f"{dag_id}.{task_id}.{'' if map_index is None else map_index}.{time.monotonic_ns()}.log"
    return TaskProcess(
        argv=tasks_test_argv(dag_id, task_id, run, map_index, params),
        env=airflow_env(runner, connections),
        log_path=log_dir / name,
    ).start()


def run_task_to_end(runner: AirflowRunner, log_dir: Path, *args: Any, **kwargs: Any) -> tuple[int, str]:
    """Run ``airflow tasks test`` to completion: ``(exit code, output)``."""
    with run_task(runner, log_dir, *args, **kwargs) as task:
        code = task.wait()
        return code, task.output()


def trigger_dag_run(runner: AirflowRunner, dag_id: str, run_id: str, logical_date: str) -> None:
    """Create a DagRun with a known run id, so that every ``tasks test`` of it is the same task instance.

    ``airflow tasks test`` with a date creates a temporary DagRun and deletes it when it ends
    (unless it is SIGKILLed); parallel invocations would race to create it.
    """
    completed = runner.airflow(
        "dags",
        "trigger",
        dag_id,
        "--run-id",
        run_id,
        "--logical-date",
        f"{logical_date}T00:00:00+00:00",
        env={"AIRFLOW__CORE__DAGS_FOLDER": str(ROBUSTNESS_DAGS)},
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]


def task_succeeded(code: int, output: str) -> bool:
    """``airflow tasks test`` exits 0 even when the task fails; the log says which."""
    return code == 0 and "Task failed with exception" not in output and "state=failed" not in output


# --------------------------------------------------------------------------- processes


def command_line(process: psutil.Process) -> str:
    """The process's command line, or '' once it is gone."""
    try:
        return " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return ""


def is_spark_submit_jvm(process: psutil.Process) -> bool:
    """spark-submit's own JVM: not the ``spark-class`` shell script, not its short-lived launcher JVM."""
    try:
        name = process.name()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    line = command_line(process)
    return name == "java" and SPARK_SUBMIT_CLASS in line and "org.apache.spark.launcher.Main" not in line


def processes_in_group(pgid: int) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (ProcessLookupError, psutil.NoSuchProcess, psutil.ZombieProcess, PermissionError):
            continue
    return found


def processes_matching(needle: str) -> list[psutil.Process]:
    """Live (non-zombie) processes whose command line contains ``needle``."""
    found = []
    for process in psutil.process_iter():
        try:
            if needle in command_line(process) and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def wait_until(
    condition: Callable[[], Any],
    timeout: float,
    what: str,
    interval: float = 0.02,
    while_running: TaskProcess | None = None,
) -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds.

    With ``while_running``, fail as soon as that task ends first (the moment was missed).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if while_running is not None and not while_running.running():
            value = condition()
            if value:
                return value
            raise AssertionError(f"the task ended before {what}:\n{while_running.output()[-4000:]}")
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


# --------------------------------------------------------------------------- the table on disk


_VERSION_RE = re.compile(r"^v(\d+)\.metadata\.json$")


def metadata_version(table_dir: Path) -> int:
    """The newest committed ``vN.metadata.json`` of a Hadoop-catalog table (0 when none).

    A Hadoop catalog commits by renaming a finished temporary file to ``vN.metadata.json``, so a
    new N appearing *is* the commit.
    """
    versions = [
        int(m.group(1))
        for p in (table_dir / "metadata").glob("v*.metadata.json")
        if (m := _VERSION_RE.match(p.name))
    ]
    return max(versions, default=0)


def data_files(table_dir: Path) -> set[Path]:
    """Every data file under the table's ``data/`` folder (Hadoop's hidden ``.crc`` files excluded)."""
    root = table_dir / "data"
    if not root.exists():
        return set()
    return {p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")}


# --------------------------------------------------------------------------- Airflow's own records


def task_instance_state(
    runner: AirflowRunner, dag_id: str, task_id: str, map_index: int = -1, run_id: str | None = None
) -> list[tuple]:
    """``(run_id, state, try_number)`` of every task instance Airflow recorded for the task."""
    query = (
        "SELECT run_id, state, try_number FROM task_instance "
        "WHERE dag_id = ? AND task_id = ? AND map_index = ?"
    )
    args: tuple = (dag_id, task_id, map_index)
    if run_id is not None:
        query, args = query + " AND run_id = ?", (*args, run_id)
    with sqlite3.connect(runner.home / "airflow.db") as db:
        return db.execute(query, args).fetchall()


def xcoms(runner: AirflowRunner, dag_id: str, task_id: str, map_index: int = -1) -> list[Any]:
    """Every ``return_value`` XCom of the task, oldest first."""
    with sqlite3.connect(runner.home / "airflow.db") as db:
        rows = db.execute(
            "SELECT value FROM xcom WHERE dag_id = ? AND task_id = ? AND map_index = ? "
            "AND key = 'return_value' ORDER BY timestamp",
            (dag_id, task_id, map_index),
        ).fetchall()
    return [json.loads(value) if isinstance(value, (str, bytes)) else value for (value,) in rows]


_RESULT_DIR_RE = re.compile(r"--result-file (\S*/airflow-iceberg-[A-Za-z0-9_]+)/result\.json")


def remove_result_dirs(output: str) -> list[Path]:
    """Delete the operator's temporary result folders named in a task's output.

    The operator removes its folder itself however the task ends, except when its own process is
    SIGKILLed; tests that do that call this so nothing is left in the temp dir.
    """
    removed = []
    for folder in {Path(m) for m in _RESULT_DIR_RE.findall(output)}:
        if folder.is_dir():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed

"""A real Airflow deployment on loopback: api-server, scheduler, dag-processor and triggerer.

What ``airflow dags test`` cannot show (asset events that schedule another DAG, deferral to a
triggerer) needs the real components talking to each other. They share a private AIRFLOW_HOME
with a SQLite database, run with the LocalExecutor, and listen on 127.0.0.1 only. Every process
runs in its own process group and is killed, with its children, when the deployment stops.

Each component logs to ``<AIRFLOW_HOME>/<component>.log`` and each task try to Airflow's own
``<AIRFLOW_HOME>/logs`` tree; the home is pytest's temporary directory, kept after the session.
When a run ends in a state a test did not expect, ``run_report`` gathers what explains it (every
task's state and log, every component's lines naming the run) for the assertion message, so the
failure report in a CI log holds it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.integration.airflow_runner import DAG_FILE_LOAD_TIMEOUT_SECONDS

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
START_TIMEOUT_SECONDS = 120
#: Parse waits are longer than start-up waits: see ``DAG_FILE_LOAD_TIMEOUT_SECONDS``.
PARSE_TIMEOUT_SECONDS = 360
#: How much of each task try's log a run report keeps (its end: where a failure is told).
REPORT_TASK_LOG_CHARS = 12_000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class AirflowDeployment:
    home: Path
    env: dict[str, str]
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    @classmethod
    @contextlib.contextmanager
    def running(
        cls,
        home: Path,
        dags_folder: Path,
        env: dict[str, str],
        components: tuple[str, ...] = COMPONENTS,
        settings: dict[str, str] | None = None,
    ) -> Iterator[AirflowDeployment]:
        """Start the components; ``settings`` (``AIRFLOW__*`` variables) replace the defaults below."""
        port = free_port()
        full_env = {
            **env,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API_AUTH__JWT_SECRET": "airflow-iceberg-test-only",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "300",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": str(DAG_FILE_LOAD_TIMEOUT_SECONDS),
            **(settings or {}),
        }
        # The dag-processor's own limit per file (50 s by default) must not cut a load shorter;
        # a file it kills leaves no import error, only its stats.
        load_limit = int(float(full_env["AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT"]))
        full_env.setdefault("AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT", str(load_limit + 30))
        deployment = cls(home=home, env=full_env)
        deployment.cli("db", "migrate")
        try:
            for component in components:
                args = ["api-server", "-H", "127.0.0.1", "-p", str(port), "-w", "1"]
                deployment.start(component, args if component == "api-server" else [component])
            deployment.wait_for(
                lambda: _http_ok(f"http://127.0.0.1:{port}/api/v2/monitor/health"), "the api-server"
            )
            yield deployment
        finally:
            deployment.stop()

    def start(self, name: str, args: list[str]) -> None:
        log = open(self.home / f"{name}.log", "a")  # noqa: SIM115 - closed with the process
        self.processes[name] = subprocess.Popen(
            ["airflow", *args], env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def stop(self) -> None:
        self._terminate(list(self.processes.values()))

    def stop_component(self, name: str) -> None:
        """Stop one component as an operator would (SIGTERM, SIGKILL after 20 s); ``start`` it again."""
        self._terminate([self.processes.pop(name)])

    @staticmethod
    def _terminate(processes: list[subprocess.Popen]) -> None:
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for process in processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        completed = subprocess.run(
            ["airflow", *args], env=self.env, capture_output=True, text=True, timeout=300
        )
        assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
        return completed

    def logs(self) -> str:
        """Every component's log tail, for assertion messages."""
        parts = []
        for name in self.processes:
            text = (self.home / f"{name}.log").read_text(errors="replace")
            parts.append(f"--- {name} ---\n{text[-3000:]}")
        return "\n".join(parts)

    def run_report(self, dag_id: str, run_id: str) -> str:
        """What explains how one DAG run ended, for an assertion message.

        Its tasks' states and tries, the end of every task try's log, and every line of every
        component's log (scheduler, triggerer, dag-processor, api-server, stopped ones included)
        that names the run: the scheduler's verdicts on its tasks (a "state mismatch", a task
        without heartbeat, a timeout) are there, with the deployment's home for the rest.
        """
        rows = self.query(
            "SELECT task_id, state, try_number FROM task_instance WHERE dag_id = ? AND run_id = ? "
            "ORDER BY task_id",
            dag_id,
            run_id,
        )
        parts = [f"===== run {run_id} of {dag_id} (AIRFLOW_HOME {self.home}) ====="]
        parts += [f"{task_id}: {state} (try {try_number})" for task_id, state, try_number in rows]
        run_logs = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
        for path in sorted(run_logs.glob("task_id=*/**/*.log")):
            text = path.read_text(errors="replace")
            parts.append(f"----- {path.relative_to(run_logs)} (last {REPORT_TASK_LOG_CHARS} chars) -----")
            parts.append(text[-REPORT_TASK_LOG_CHARS:])
        for component_log in sorted(self.home.glob("*.log")):
            text = component_log.read_text(errors="replace")
            lines = [line for line in text.splitlines() if run_id in line]
            parts.append(f"----- {component_log.name}: the {len(lines)} lines naming the run -----")
            parts += lines
        return "\n".join(parts)

    def wait_until_parked(self, dag_id: str, run_id: str, task_id: str, timeout: float) -> None:
        """Wait until ``task_id`` waits for a person and the scheduler has taken in its worker's exit.

        A human-in-the-loop task parks in ``awaiting_input`` and its worker exits; the executor
        reports that exit as ``success``. On Airflow 3.3.2 an answer that resumes the task before
        the scheduler has read that report fails the task: the scheduler queues the resumed task
        (the same try), then reads the report, finds the task ``queued`` and marks it failed
        ("reported that the task instance ... finished with state success, but the task instance's
        state attribute is queued"): its guard for a resumed task covers only the ``scheduled``
        state. The window is one scheduler loop or more, longer under load. The scheduler logs
        "TaskInstance Finished: ... state=awaiting_input" once it read the report while the task
        waited; from then on an answer resumes the task.
        """
        finished = f"TaskInstance Finished: dag_id={dag_id}, task_id={task_id}, run_id={run_id}, "
        scheduler_log = self.home / "scheduler.log"

        def parked() -> bool:
            return any(
                finished in line and ", state=awaiting_input, " in line
                for line in scheduler_log.read_text(errors="replace").splitlines()
            )

        self.wait_for(parked, f"the scheduler to see {task_id} of {run_id} wait for input", timeout)

    def task_log(self, dag_id: str, task_id: str) -> str:
        paths = sorted((self.home / "logs").glob(f"dag_id={dag_id}/**/task_id={task_id}/**/*.log"))
        return "\n".join(path.read_text(errors="replace") for path in paths)

    def query(self, sql: str, *params: Any) -> list[tuple]:
        with contextlib.closing(sqlite3.connect(self.home / "airflow.db", timeout=30)) as db:
            return db.execute(sql, params).fetchall()

    def wait_for(
        self, condition: Callable[[], Any], what: str, timeout: float = START_TIMEOUT_SECONDS
    ) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                assert process.poll() is None, f"{name} exited while waiting for {what}\n{self.logs()}"
            try:
                value = condition()
            except sqlite3.OperationalError:  # the database is busy or not migrated yet
                value = None
            if value:
                return value
            time.sleep(1)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{self.logs()}")

    def wait_for_dags(self, *dag_ids: str, timeout: float = PARSE_TIMEOUT_SECONDS) -> None:
        """Wait until the dag-processor has stored each of ``dag_ids``; a timeout shows its import errors."""
        wanted = set(dag_ids)
        assert wanted, "no DAG ids to wait for"
        marks = ", ".join("?" * len(wanted))

        def parsed() -> bool:
            stored = self.query(f"SELECT dag_id FROM dag WHERE dag_id IN ({marks})", *wanted)
            return {dag_id for (dag_id,) in stored} == wanted

        try:
            self.wait_for(parsed, f"{', '.join(dag_ids)} to be parsed", timeout)
        except AssertionError as timed_out:
            errors = self.query("SELECT filename, stacktrace FROM import_error")
            shown = "\n".join(f"--- import error in {name} ---\n{trace}" for name, trace in errors)
            # (a file the dag-processor killed past its own limit leaves none: see its log below)
            raise AssertionError(f"{shown or 'no import errors recorded'}\n{timed_out}") from None

    def dag_runs(self, dag_id: str) -> list[tuple[str, str]]:
        return self.query("SELECT run_id, state FROM dag_run WHERE dag_id = ? ORDER BY id", dag_id)

    def wait_for_dag_run(self, dag_id: str, timeout: float) -> tuple[str, str]:
        """The first run of ``dag_id`` once it has finished (success or failed)."""

        def finished() -> tuple[str, str] | None:
            runs = self.dag_runs(dag_id)
            return runs[0] if runs and runs[0][1] in ("success", "failed") else None

        return self.wait_for(finished, f"a finished run of {dag_id}", timeout)

    def rest(self, method: str, path: str, body: Any = None) -> Any:
        """The decoded JSON answer of the REST API (the all-admins auth manager needs no token)."""
        data = None if body is None else json.dumps(body).encode()
        url = f"http://127.0.0.1:{self.env['AIRFLOW__API__PORT']}{path}"
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read() or b"null")

    def xcom(self, dag_id: str, task_id: str) -> Any:
        rows = self.query(
            "SELECT value FROM xcom WHERE dag_id = ? AND task_id = ? AND key = 'return_value'",
            dag_id,
            task_id,
        )
        return json.loads(rows[0][0]) if rows else None


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False

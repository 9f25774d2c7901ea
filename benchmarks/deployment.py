"""A real Airflow deployment for the scheduler benchmarks (#7, #8), and what its DAG runs recorded.

The components are the integration tests' own (:class:`tests.integration.airflow_services.
AirflowDeployment`: api-server, scheduler and dag-processor with the LocalExecutor on
127.0.0.1). On top of them this adds what a benchmark needs:

- a DAGs folder of links to the DAG files compared (the example DAGs as they are);
- the task probe as the plugins folder (:mod:`benchmarks.task_probe`), writing one record per
  task try into ``probe/``;
- connections in the metadata database, not in ``AIRFLOW_CONN_*`` variables, so that one
  deployment runs every arm: :meth:`BenchDeployment.set_connection` switches ``spark_default``
  (spark-submit or Spark Connect) and the catalog's warehouse between runs, through the REST API,
  as a user would;
- no scheduled runs (``use_job_schedule`` off): only the runs the benchmark triggers;
- one finished run's records: its ``dag_run`` and ``task_instance`` rows, the probe's records,
  the DAG's upstream lists (:mod:`benchmarks.timeline` turns them into a breakdown).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.error import HTTPError

from benchmarks.task_probe import PROBE_DIR_ENV
from benchmarks.timeline import (
    TASK_COLUMNS,
    ProbeRecord,
    RunRecord,
    TaskRecord,
    dag_file_parse_seconds,
    timestamp,
    upstream_lists,
)
from tests.integration.airflow_services import AirflowDeployment

REPO = Path(__file__).resolve().parents[1]
PROBE_PLUGIN = REPO / "benchmarks" / "probe_plugin"
#: The fields of a connection the REST API takes.
CONNECTION_FIELDS = ("conn_type", "description", "host", "login", "schema", "port", "password", "extra")
#: Runs get logical dates one day apart from here (a DAG's runs need distinct ones).
FIRST_LOGICAL_DATE = datetime(2024, 1, 1, tzinfo=timezone.utc)
#: Airflow's limit for loading a DAG file (default 30 s), raised: see :meth:`BenchDeployment.running`.
DAG_FILE_LOAD_TIMEOUT_SECONDS = 600
#: Task instance states after ``execute()`` ran (a skipped task has times, but never ran).
RAN = ("success", "failed", "up_for_retry")
#: A guard against a hung run, not a target.
RUN_TIMEOUT_SECONDS = 1800


@dataclass(frozen=True)
class FinishedRun:
    """What one DAG run left in the metadata database and the probe folder."""

    run: RunRecord
    tasks: tuple[TaskRecord, ...]
    probes: Mapping[str, ProbeRecord]
    upstream: Mapping[str, Sequence[str]]
    #: Task instance id -> seconds its task process spent loading the DAG file (its log says).
    parse_seconds: Mapping[str, float]
    #: Every task try's log of the run, concatenated.
    logs: str


class BenchDeployment:
    """One running deployment; create it with :meth:`running`."""

    def __init__(self, airflow: AirflowDeployment, probe_dir: Path) -> None:
        self.airflow = airflow
        self.probe_dir = probe_dir
        self._upstream: dict[str, dict[str, list[str]]] = {}
        self._runs = 0

    @classmethod
    @contextlib.contextmanager
    def running(
        cls,
        root: Path,
        dag_files: Sequence[Path],
        env: Mapping[str, str] | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> Iterator[BenchDeployment]:
        """Start a deployment under ``root`` running ``dag_files``; wait until every DAG is parsed.

        :param env: Variables for every component and task (the Spark line's, ``SPARK_CONF_DIR``).
        :param settings: Airflow settings (``AIRFLOW__*``) over the harness's defaults.
        """
        home, dags, probe_dir = root / "airflow_home", root / "dags", root / "probe"
        for folder in (home, dags, probe_dir):
            folder.mkdir(parents=True, exist_ok=True)
        for dag_file in dag_files:
            (dags / dag_file.name).symlink_to(dag_file.resolve())
        # Connections live in the database here: an AIRFLOW_CONN_* variable would win over it.
        inherited = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW_CONN_")}
        full_env = {
            **inherited,
            **(env or {}),
            PROBE_DIR_ENV: str(probe_dir),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), inherited.get("PYTHONPATH")])),
        }
        full_settings = {
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROBE_PLUGIN),
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
            # Loading a DAG file in a task process took 5 to 16 s on 2 loaded cores, and over 30 s
            # (Airflow's default limit) with four task processes starting at once: Airflow then
            # reschedules the task, and fails it the fourth time. The benchmark reports the time.
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": str(DAG_FILE_LOAD_TIMEOUT_SECONDS),
            **(settings or {}),
        }
        components = ("api-server", "scheduler", "dag-processor")
        print(f"==> starting an Airflow deployment in {home}", file=sys.stderr, flush=True)
        with AirflowDeployment.running(home, dags, full_env, components, full_settings) as airflow:
            deployment = cls(airflow, probe_dir)
            airflow.wait_for_dags(*dag_ids(dag_files))
            yield deployment

    # ------------------------------------------------------------------ connections and runs

    def set_connection(self, conn_id: str, connection: Mapping[str, Any]) -> None:
        """Create or replace a connection in the metadata database (REST API).

        Every field is sent, unset ones as null: a PATCH keeps the fields its body leaves out (a
        Connect server's port would stay on a ``local[2]`` master).
        """
        body = {field: None for field in CONNECTION_FIELDS} | {"connection_id": conn_id, **connection}
        if isinstance(body.get("extra"), Mapping):
            body["extra"] = json.dumps(body["extra"])
        try:
            self.airflow.rest("PATCH", f"/api/v2/connections/{conn_id}", body)
        except HTTPError as error:
            if error.code != 404:
                raise
            self.airflow.rest("POST", "/api/v2/connections", body)

    def next_logical_date(self) -> str:
        """A logical date no run of this deployment had: one day after the last one handed out."""
        self._runs += 1
        return (FIRST_LOGICAL_DATE + timedelta(days=self._runs)).strftime("%Y-%m-%dT%H:%M:%SZ")

    def trigger(
        self, dag_id: str, run_id: str, logical_date: str, conf: Mapping[str, Any] | None = None
    ) -> None:
        self.airflow.rest(
            "POST",
            f"/api/v2/dags/{dag_id}/dagRuns",
            {"dag_run_id": run_id, "logical_date": logical_date, "conf": dict(conf or {})},
        )

    def wait(self, dag_id: str, run_id: str, timeout: float = RUN_TIMEOUT_SECONDS) -> str:
        """The run's final state (success or failed), once it has one."""

        def finished() -> str | None:
            rows = self.airflow.query(
                "SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?", dag_id, run_id
            )
            return rows[0][0] if rows and rows[0][0] in ("success", "failed") else None

        return self.airflow.wait_for(finished, f"run {run_id} of {dag_id} to finish", timeout)

    def run_dag(
        self,
        dag_id: str,
        run_id: str,
        logical_date: str,
        conf: Mapping[str, Any] | None = None,
        require_success: bool = True,
    ) -> FinishedRun:
        """Trigger a run, wait for it, and return its records.

        Unless it succeeded, raise with its report, or with ``require_success=False`` return the
        failed run's records too (a comparison that counts what a failure left).
        """
        self.trigger(dag_id, run_id, logical_date, conf)
        state = self.wait(dag_id, run_id)
        if state != "success" and require_success:
            raise RuntimeError(f"run {run_id} of {dag_id} ended {state}:\n{self.report(dag_id, run_id)}")
        return self.finished(dag_id, run_id)

    def report(self, dag_id: str, run_id: str) -> str:
        return self.airflow.run_report(dag_id, run_id)[-12000:]

    # ------------------------------------------------------------------ records

    def finished(self, dag_id: str, run_id: str) -> FinishedRun:
        [(state, queued, started, ended)] = self.airflow.query(
            "SELECT state, queued_at, start_date, end_date FROM dag_run WHERE dag_id = ? AND run_id = ?",
            dag_id,
            run_id,
        )
        run = RunRecord(dag_id, run_id, state, timestamp(queued), timestamp(started), timestamp(ended))
        rows = self.airflow.query(
            f"SELECT {TASK_COLUMNS} FROM task_instance WHERE dag_id = ? AND run_id = ?", dag_id, run_id
        )
        tasks = tuple(TaskRecord.from_row(row) for row in rows)
        logs = self.run_logs(dag_id, run_id)
        return FinishedRun(
            run,
            tasks,
            self.probes([t.ti_id for t in tasks if t.started is not None and t.state in RAN]),
            self.upstream(dag_id),
            dag_file_parse_seconds(logs),
            logs,
        )

    def probes(self, ti_ids: Sequence[str]) -> dict[str, ProbeRecord]:
        """The probe's records of these task instances (their last try's), waiting briefly for stragglers.

        A task that ran without a record has none here: :func:`benchmarks.timeline.breakdown` says so.
        """
        found: dict[str, ProbeRecord] = {}
        deadline = time.monotonic() + 10
        for ti_id in ti_ids:
            path = self.probe_dir / f"{ti_id}.json"
            while not path.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            if path.exists():
                found[ti_id] = ProbeRecord.from_json(json.loads(path.read_text()))
        return found

    def upstream(self, dag_id: str) -> dict[str, list[str]]:
        """Task id -> upstream task ids of ``dag_id`` (REST API), asked once per DAG."""
        if dag_id not in self._upstream:
            answer = self.airflow.rest("GET", f"/api/v2/dags/{dag_id}/tasks")
            self._upstream[dag_id] = upstream_lists(answer["tasks"])
        return self._upstream[dag_id]

    def run_logs(self, dag_id: str, run_id: str, task_id: str | None = None, map_index: int = -1) -> str:
        """Every try's log of one run: of every task, or of one task (of one map index, if mapped)."""
        folder = self.airflow.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
        if task_id is not None:
            folder = folder / f"task_id={task_id}"
            if map_index >= 0:
                folder = folder / f"map_index={map_index}"
        return "\n".join(path.read_text(errors="replace") for path in sorted(folder.glob("**/*.log")))


def dag_ids(dag_files: Sequence[Path]) -> list[str]:
    """The DAG ids a file defines, read as text (``dag_id="..."``) so that nothing is parsed here."""
    found = []
    for dag_file in dag_files:
        found += re.findall(r'dag_id="([^"]+)"', dag_file.read_text())
    return found

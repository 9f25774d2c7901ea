"""Run the real Airflow CLI (``airflow dags test`` / ``airflow tasks test``) against a private home.

Each test session gets its own AIRFLOW_HOME with a freshly migrated SQLite database, and each
run gets its connections through ``AIRFLOW_CONN_*`` variables, exactly as a deployment would.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: A guard against a hung run, not a speed target: one `airflow dags test` of a DAG.
RUN_TIMEOUT_SECONDS = 600
#: Loading a DAG file that imports the operators means importing the apache-spark provider (and,
#: through its hook, the Kubernetes client): 3 to 5 s in a fresh process, about 10 s in a
#: dag-processor parsing two files at once on 2 idle cores, and 25 to 30 s, Airflow's
#: default ``dagbag_import_timeout``, on 2 cores shared with Spark jobs and another test file (a
#: timed-out file is an import error until its next parse). Not what the tests are about: raised.
DAG_FILE_LOAD_TIMEOUT_SECONDS = 180
#: The same guard for a batch of several DAGs in one Airflow process (four story DAGs, about
#: twelve spark-submits, took over 600 s on a busy 2-core machine).
BATCH_TIMEOUT_SECONDS = 1500


@dataclass
class AirflowRunner:
    home: Path
    base_env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def create(cls, home: Path) -> AirflowRunner:
        env = {
            **os.environ,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": str(DAG_FILE_LOAD_TIMEOUT_SECONDS),
        }
        runner = cls(home=home, base_env=env)
        runner.airflow("db", "migrate")
        return runner

    def airflow(
        self, *args: str, connections: dict[str, dict] | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        full_env = {**self.base_env, **(env or {})}
        for conn_id, connection in (connections or {}).items():
            full_env[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(connection)
        completed = subprocess.run(
            ["airflow", *args], env=full_env, capture_output=True, text=True, timeout=RUN_TIMEOUT_SECONDS
        )
        return completed

    def dags_test(
        self, logical_date: str, *dag_ids: str, connections: dict[str, dict] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``airflow dags test`` of several DAGs in one Airflow process (:mod:`.dag_batch`)."""
        full_env = dict(self.base_env)
        for conn_id, connection in (connections or {}).items():
            full_env[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(connection)
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), full_env.get("PYTHONPATH")]))
        return subprocess.run(
            [sys.executable, "-m", "tests.integration.dag_batch", logical_date, *dag_ids],
            env=full_env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=BATCH_TIMEOUT_SECONDS,
        )

    def tasks_batch(
        self,
        dag_id: str,
        run_id: str,
        *items: str,
        connections: dict[str, dict] | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """``airflow tasks test`` of several tasks of one run in one Airflow process (:mod:`.task_batch`)."""
        full_env = {**self.base_env, **(env or {})}
        for conn_id, connection in (connections or {}).items():
            full_env[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(connection)
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), full_env.get("PYTHONPATH")]))
        return subprocess.run(
            [sys.executable, "-m", "tests.integration.task_batch", dag_id, run_id, *items],
            env=full_env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_SECONDS,
        )

    def xcom(self, dag_id: str, task_id: str, key: str = "return_value") -> object:
        """The newest XCom a task pushed, read straight from the metadata database."""
        with sqlite3.connect(self.home / "airflow.db") as db:
            row = db.execute(
                "SELECT value FROM xcom WHERE dag_id = ? AND task_id = ? AND key = ? "
                "ORDER BY timestamp DESC LIMIT 1",
                (dag_id, task_id, key),
            ).fetchone()
        if row is None:
            return None
        value = row[0]
        return json.loads(value) if isinstance(value, (str, bytes)) else value


def recording_imports(path: Path) -> dict[str, str]:
    """The environment under which every task of an Airflow run records its heavy imports in ``path``.

    See tests/integration/plugins/imported_modules.py; :func:`recorded_imports` reads them back.
    """
    return {
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "tests" / "integration" / "plugins"),
        "ICEBERG_TEST_IMPORTED_MODULES": str(path),
    }


def recorded_imports(path: Path) -> list[dict]:
    """The records of :func:`recording_imports`, in the order the tasks made them."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [json.loads(line) for line in lines]


def spark_connection(**extra: str) -> dict:
    """A local[2] Spark master connection, optionally with extras such as a deploy mode."""
    return {"conn_type": "spark", "host": "local[2]", "extra": extra}


def hadoop_catalog_connection(warehouse: Path, catalog_name: str = "demo") -> dict:
    return {
        "conn_type": "iceberg_catalog",
        "extra": {
            "catalog_name": catalog_name,
            "catalog_type": "hadoop",
            "warehouse": f"file://{warehouse}",
            "spark_version": os.environ.get("SPARK_LINE", "3.5"),  # the worker's Spark (local_env.sh)
            "runtime_jar": os.environ["ICEBERG_RUNTIME_JAR"],
        },
    }

"""The commit id on real Airflow: the same for a retry, new after the task instance is cleared.

No Spark: the probe DAG records the id an Iceberg write would carry on each try. ``airflow dags
test`` runs the first try (it fails on purpose) and Airflow's retry; ``airflow tasks clear``
clears the task instance as a user repairing it would; ``airflow tasks test`` runs it again.
"""

from __future__ import annotations

import json

from tests.integration.robustness_dags.commit_id_probe import LOG_ENV
from tests.integration.task_processes import ROBUSTNESS_DAGS, task_instance_state

DAG_ID = "robust_commit_ids"
DATE = "2024-01-05"


def test_a_retry_keeps_the_commit_id_and_a_clear_gives_a_new_one(airflow_runner, tmp_path):
    log = tmp_path / "tries.jsonl"
    env = {"AIRFLOW__CORE__DAGS_FOLDER": str(ROBUSTNESS_DAGS), LOG_ENV: str(log)}

    def airflow(*args: str) -> None:
        completed = airflow_runner.airflow(*args, env=env)
        assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]

    airflow("dags", "test", DAG_ID, DATE)
    [(run_id, state, _)] = task_instance_state(airflow_runner, DAG_ID, "probe")
    assert state == "success"
    airflow("dags", "clear", DAG_ID, "--run-id", run_id, "--yes")  # clears its one task instance
    airflow("tasks", "test", DAG_ID, "probe", run_id)

    first, retry, repair = (json.loads(line) for line in log.read_text().splitlines())
    assert (first["try"], retry["try"]) == (1, 2)
    assert first["commit_id"].startswith(f"{DAG_ID}:probe:{run_id}:-1:1:")
    assert retry["commit_id"] == first["commit_id"]  # Airflow's retry: the same id, so it finds the commit
    assert repair["commit_id"].startswith(f"{DAG_ID}:probe:{run_id}:-1:3:")  # first try after the clear

"""Run an airflow-iceberg operator in this process, with a real spark-submit, as a worker would.

``operator.execute(context)`` is what Airflow's task runner calls; doing it here skips the Airflow
CLI (several seconds per task) while keeping everything that matters for the job: connection
lookup through ``AIRFLOW_CONN_*``, validation, the spark-submit command, the job's result file.
A watchdog calls the operator's ``on_kill`` (which kills spark-submit) if a job outlives its
timeout, so a hung JVM cannot hang the suite.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

EXECUTE_TIMEOUT_SECONDS = 240


@dataclass
class FakeTaskInstance:
    """The task-instance fields the operators read: identity for commit ids and snapshot tags."""

    dag_id: str
    task_id: str
    run_id: str = "manual__robustness"
    map_index: int = -1
    try_number: int = 1


def execute(
    operator: Any, timeout: float = EXECUTE_TIMEOUT_SECONDS, try_number: int = 1, **context: Any
) -> Any:
    """``operator.execute`` with a minimal context (plus ``context``, e.g. ``outlet_events``).

    ``on_kill`` fires if it runs past ``timeout``; ``try_number`` makes it a retry of the same task
    instance (same commit id).
    """
    ti = FakeTaskInstance(dag_id="robust_bad_input", task_id=operator.task_id, try_number=try_number)
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        operator.on_kill()

    watchdog = threading.Timer(timeout, kill)
    watchdog.daemon = True
    watchdog.start()
    try:
        return operator.execute({"ti": ti, **context})
    finally:
        watchdog.cancel()
        if timed_out.is_set():
            raise AssertionError(f"{operator.task_id} ran longer than {timeout}s and was killed")

"""An Airflow listener that records which heavy modules a task process has imported.

Loaded from this plugins folder only by tests that set ``AIRFLOW__CORE__PLUGINS_FOLDER`` to it and
``ICEBERG_TEST_IMPORTED_MODULES`` to a JSON-lines file: when a task starts (its DAG file loaded,
nothing executed yet) and when it ends, one line ``{"task": ..., "when": ..., "heavy": [...]}``
with :func:`tests.heavy_modules.loaded`. The listener runs in the task's own process, the one a
worker starts, so it sees what that task really imported (tests/integration/test_imported_modules.py).
"""

from __future__ import annotations

import json
import os
import sys

from airflow.listeners import hookimpl
from airflow.plugins_manager import AirflowPlugin

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _record(task_instance, when: str) -> None:
    path = os.environ.get("ICEBERG_TEST_IMPORTED_MODULES")
    if not path:
        return
    if _REPO not in sys.path:
        sys.path.append(_REPO)
    from tests.heavy_modules import loaded

    line = {"task": f"{task_instance.dag_id}.{task_instance.task_id}", "when": when, "heavy": loaded()}
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")


class ImportedModulesListener:
    @hookimpl
    def on_task_instance_running(self, previous_state, task_instance):
        _record(task_instance, "started")

    @hookimpl
    def on_task_instance_success(self, previous_state, task_instance):
        _record(task_instance, "succeeded")

    @hookimpl
    def on_task_instance_failed(self, previous_state, task_instance, error=None):
        _record(task_instance, "failed")


class ImportedModulesPlugin(AirflowPlugin):
    name = "iceberg_test_imported_modules"
    listeners = [ImportedModulesListener()]

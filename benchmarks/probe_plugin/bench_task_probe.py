"""The deployment's plugins folder for `make bench` #7 and #8: the task probe's listener.

Airflow imports every module of its plugins folder; this one registers a listener whose
``on_task_instance_running`` (called in the task process just before ``execute()``) hands the
task to :func:`benchmarks.task_probe.watch`. Nothing else: the probe itself lives in
``benchmarks/task_probe.py``.
"""

from __future__ import annotations

import sys

from airflow.listeners import hookimpl
from airflow.plugins_manager import AirflowPlugin


@hookimpl
def on_task_instance_running(previous_state, task_instance):
    from benchmarks.task_probe import watch

    watch(task_instance)


class BenchTaskProbePlugin(AirflowPlugin):
    name = "airflow_iceberg_bench_task_probe"
    listeners = [sys.modules[__name__]]

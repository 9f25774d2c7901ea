"""A light probe inside each task process: when ``execute()`` ran, and when Spark ran inside it.

The scheduler benchmarks (#7, #8) need, per task, what the metadata database cannot tell: where
``execute()`` began and ended, and how much of it was Spark. The deployment loads
``benchmarks/probe_plugin`` as its plugins folder; its listener calls :func:`watch` when a task
starts running (``on_task_instance_running``, just before Airflow calls ``execute()``). The probe
then times, with ``time.time()`` (the clock the database's timestamps come from):

- ``execute``: the task's own ``execute()`` (the operator's instance method, wrapped);
- ``spark_submit``: each ``SparkSubmitHook.submit``: the spark-submit process, from building its
  command to its exit (the peer arm's SparkSubmitOperator and the operators alike);
- ``connect_job``: each ``ConnectJob.run``, a job over Spark Connect: the channel to the server,
  the settling below, opening and configuring the session, the job's Spark calls, releasing it;
- ``settle``: inside it, ``EarlierRuns.settle``, the provider's check that no earlier try of the
  commit can still commit (the provider's own work, not Spark's; see
  :func:`benchmarks.timeline.spark_seconds`).

and writes them, when ``execute()`` returns or raises, to ``<BENCH_TASK_PROBE_DIR>/<ti id>.json``.
It adds a few microseconds per task and changes nothing the task does. Without the variable it
does nothing, so loading the plugin elsewhere is harmless.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

PROBE_DIR_ENV = "BENCH_TASK_PROBE_DIR"

#: name -> [[start, end], ...] for the task now running in this process.
_intervals: dict[str, list[list[float]]] = {}


@contextlib.contextmanager
def timed(name: str) -> Iterator[None]:
    """Record one interval of ``name`` for the running task."""
    started = time.time()
    try:
        yield
    finally:
        _intervals.setdefault(name, []).append([started, time.time()])


def _timing(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with timed(name):
            return function(*args, **kwargs)

    wrapper.__bench_probe__ = True  # type: ignore[attr-defined]
    return wrapper


def _wrap_method(owner: type, attribute: str, name: str) -> None:
    method = getattr(owner, attribute, None)
    if method is not None and not getattr(method, "__bench_probe__", False):
        setattr(owner, attribute, _timing(name, method))


def install() -> None:
    """Wrap the methods Spark time is measured by (once per process)."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    _wrap_method(SparkSubmitHook, "submit", "spark_submit")
    with contextlib.suppress(ImportError):  # the peer arm's worker needs no airflow_iceberg
        from airflow_iceberg.operators.connect import ConnectJob
        from airflow_iceberg.operators.connect_tries import EarlierRuns

        _wrap_method(ConnectJob, "run", "connect_job")
        _wrap_method(EarlierRuns, "settle", "settle")


def record_path(ti_id: str) -> Path | None:
    folder = os.environ.get(PROBE_DIR_ENV)
    return Path(folder) / f"{ti_id}.json" if folder else None


def watch(task_instance: Any) -> None:
    """Time this task's ``execute()`` and the Spark calls inside it; write the record at its end."""
    path = record_path(str(task_instance.id))
    if path is None:
        return
    install()
    task = task_instance.task
    execute = task.execute
    identity = {
        "ti_id": str(task_instance.id),
        "dag_id": task_instance.dag_id,
        "task_id": task_instance.task_id,
        "run_id": task_instance.run_id,
        "map_index": getattr(task_instance, "map_index", -1),
        "try_number": getattr(task_instance, "try_number", 1),
        "pid": os.getpid(),
    }

    @functools.wraps(execute)
    def timed_execute(*args: Any, **kwargs: Any) -> Any:
        _intervals.clear()
        started = time.time()
        try:
            return execute(*args, **kwargs)
        finally:
            record = {**identity, "execute": [started, time.time()], "intervals": dict(_intervals)}
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(record))

    task.execute = timed_execute

"""The commit id: the same for a retry of a task instance, new when the task instance is cleared.

What Airflow 3 keeps, and the id reads (see ``IcebergSparkSubmitOperator._commit_id``):
``try_number`` grows on every try, retries and clears alike; a clear (``clear_task_instances``)
sets ``max_tries = try_number + task.retries`` while a retry leaves it alone, so
``max_tries - retries + 1`` is the first try since the last clear. ``dag_run.clear_number``
grows when *any* task of the run is cleared, so it is deliberately not part of the id. The
sequences below replay those rules.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone

import pytest

from airflow_iceberg.operators import IcebergAppendOperator

RETRIES = 2


@dataclass(frozen=True)
class TaskInstance:
    dag_id: str = "orders"
    task_id: str = "append"
    run_id: str = "scheduled__2024-01-02T00:00:00+00:00"
    map_index: int = -1
    try_number: int = 1
    max_tries: int = RETRIES  # TaskInstance.__init__: max_tries = task.retries


@dataclass(frozen=True)
class DagRun:
    start_date: datetime | None = datetime(2024, 1, 3, 0, 5, tzinfo=timezone.utc)
    clear_number: int = 0


def retried(ti: TaskInstance) -> TaskInstance:
    return replace(ti, try_number=ti.try_number + 1)


def cleared_and_run(ti: TaskInstance) -> TaskInstance:
    return replace(ti, max_tries=ti.try_number + RETRIES, try_number=ti.try_number + 1)


@pytest.fixture
def commit_id():
    op = IcebergAppendOperator(task_id="append", table="db.orders", source_query="SELECT 1", retries=RETRIES)
    return lambda ti, dag_run=DagRun(): op._commit_id({"ti": ti, "dag_run": dag_run})


def test_a_retry_keeps_the_id_and_a_clear_makes_a_new_one(commit_id):
    first = TaskInstance()
    run, started = first.run_id, "2024-01-03T00:05:00+00:00"
    assert commit_id(first) == f"orders:append:{run}:-1:1:{started}"
    second = retried(first)
    assert commit_id(second) == commit_id(first)

    repair = cleared_and_run(second)  # try 3, the first after the clear
    assert commit_id(repair) == f"orders:append:{run}:-1:3:{started}"
    assert commit_id(repair) != commit_id(first)
    assert commit_id(retried(repair)) == commit_id(repair)  # a retry of the repair keeps the repair's id
    assert commit_id(cleared_and_run(repair)) not in {commit_id(first), commit_id(repair)}


def test_clearing_another_task_of_the_run_does_not_change_the_id(commit_id):
    ti = TaskInstance()
    assert commit_id(retried(ti), DagRun(clear_number=1)) == commit_id(ti, DagRun())


def test_a_run_deleted_and_created_again_gets_new_ids(commit_id):
    ti = TaskInstance()
    again = DagRun(start_date=datetime(2024, 1, 9, 12, 0, tzinfo=timezone.utc))
    assert commit_id(ti, again) != commit_id(ti, DagRun())


def test_limit_a_dag_edit_to_retries_between_two_tries_changes_the_commit_id():
    """A documented limit (docs/guarantees.md, exactly-once conditions: "the task's ``retries``
    unchanged in between"). The first try is ``ti.max_tries - retries + 1``; Airflow stores
    ``max_tries`` when the task instance is created or cleared and never refreshes it from the
    DAG, while ``retries`` is the DAG file as parsed for this try. Raise ``retries`` from 1 to 3
    while try 1 runs, and try 2 computes another commit id: it neither finds try 1's commit nor,
    over Spark Connect, settles its write."""
    from types import SimpleNamespace

    import pendulum

    started = SimpleNamespace(start_date=pendulum.datetime(2026, 12, 1, tz="UTC"))

    def commit_id(retries: int, try_number: int) -> str:
        op = IcebergAppendOperator(task_id="load", table="db.t", source_query="SELECT 1", retries=retries)
        ti = SimpleNamespace(dag_id="sales", task_id="load", run_id="r", map_index=-1, try_number=try_number)
        ti.max_tries = 1  # queued with retries=1
        return op._commit_id({"ti": ti, "dag_run": started})

    assert commit_id(retries=1, try_number=2) == commit_id(retries=1, try_number=1)
    assert commit_id(retries=3, try_number=2) != commit_id(retries=1, try_number=1)  # the limit

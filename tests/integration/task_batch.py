"""``airflow dags clear`` and ``airflow tasks test`` for the tasks of one DAG run, in one Airflow process.

Like :mod:`.dag_batch`: each ``airflow`` CLI start costs seconds before any task runs. This calls
the CLI's own ``dag_clear`` (with ``--clear``: every task instance of the run, as a user
repairing it would) and then its ``task_test`` for each task in turn, in the run's order::

    python -m tests.integration.task_batch DAG_ID RUN_ID --clear task_a 'task_b:{"param": 1}'

A task id may be followed by ``:`` and params as JSON (``tasks test --task-params``). It stops
at the first task that does not succeed; the exit code is 1 then.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str]) -> int:
    from airflow.cli.commands.dag_command import dag_clear
    from airflow.cli.commands.task_command import task_test
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    dag_id, run_id, *items = argv
    if items and items[0] == "--clear":
        items = items[1:]
        dag_clear(
            argparse.Namespace(
                dag_id=dag_id,
                run_id=run_id,
                partition_key=None,
                partition_date_start=None,
                partition_date_end=None,
                only_failed=False,
                only_running=False,
                yes=True,
                verbose=False,
            )
        )
    for item in items:
        task_id, _, params = item.partition(":")
        task_test(
            argparse.Namespace(
                dag_id=dag_id,
                task_id=task_id,
                logical_date_or_run_id=run_id,
                map_index=-1,
                task_params=params or None,
                env_vars=None,
                bundle_name=None,
                post_mortem=False,
                verbose=False,
            )
        )
        with create_session() as session:
            state = session.scalar(
                select(TaskInstance.state).where(
                    TaskInstance.dag_id == dag_id,
                    TaskInstance.run_id == run_id,
                    TaskInstance.task_id == task_id,
                )
            )
        print(f"task-batch: {task_id} {state}", flush=True)
        if state != "success":
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Run an example DAG's tasks as Airflow would, each one's Spark job handed to a job test to run.

The job tests run in the Spark runtime's interpreter, with one shared SparkSession; the operators
need Airflow's. This module runs in Airflow's interpreter, started by a job test
(``tests/jobs/test_openlineage_dag.py``): it loads the DAG file with Airflow's ``DagBag``, and
for each task in dependency order renders its templates (``ti.xcom_pull`` returns what the
upstream tasks returned) and calls its real ``execute()``. Only the apache-spark provider's
spark-submit is replaced: the job's arguments go to the job test, which runs them in its session
(as spark-submit would run ``iceberg_job.py``) and answers once the result file is written. Each
task's OpenLineage event, as the operator reports it (``get_openlineage_facets_on_complete``),
is validated against the OpenLineage schemas here and sent back with the task's XCom.

Messages are JSON lines prefixed :data:`PREFIX` on stdout (Airflow may log there too); answers
are JSON lines on stdin. ``python -m tests.dag_task_runner <dag file> <dag id>``.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from typing import Any

PREFIX = "@dag-task-runner "
#: The run the tasks belong to, as Airflow would name a manual run on the demo's day.
LOGICAL_DATE = datetime(2024, 1, 2, tzinfo=timezone.utc)
RUN_ID = "manual__2024-01-02T00:00:00+00:00"


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(PREFIX + json.dumps(message, default=str) + "\n")
    sys.stdout.flush()


def receive() -> dict[str, Any]:
    line = sys.stdin.readline()
    if not line:
        raise SystemExit("the job test closed the pipe")
    return json.loads(line)


class DagRun:
    """What a task reads of its DAG run: the run's ids and dates, as a manual run has them."""

    run_id = RUN_ID
    logical_date = LOGICAL_DATE
    run_after = LOGICAL_DATE
    start_date = LOGICAL_DATE
    clear_number = 0
    conf: dict[str, Any] = {}


class TaskInstance:
    """``ti`` of a first try: its ids, and ``xcom_pull`` of what the upstream tasks returned."""

    run_id, try_number, map_index, max_tries = RUN_ID, 1, -1, 0

    def __init__(self, dag_id: str, task_id: str, xcoms: dict[str, Any]) -> None:
        self.dag_id, self.task_id, self.xcoms = dag_id, task_id, xcoms
        self.dag_run = DagRun()

    def xcom_pull(self, task_ids: str, key: str = "return_value", **kwargs: Any) -> Any:
        return self.xcoms[task_ids]


def run_job_in_caller(operator: Any, context: Any) -> None:
    """In place of spark-submit: the job test runs the job's arguments and answers when done."""
    send({"job": list(operator.application_args), "conf": dict(operator.conf or {})})
    answer = receive()
    if answer.get("error"):
        raise RuntimeError(f"the job test could not run the job: {answer['error']}")


def main(dag_file: str, dag_id: str) -> None:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from tests.openlineage_validation import operator_event, validate_event

    bag = DagBag(dag_folder=dag_file)
    assert not bag.import_errors, bag.import_errors
    dag = bag.dags[dag_id]
    SparkSubmitOperator.execute = run_job_in_caller  # this process only runs the DAG's tasks
    xcoms: dict[str, Any] = {}
    for task in dag.topological_sort():
        ti = TaskInstance(dag_id, task.task_id, xcoms)
        context = {
            "ti": ti,
            "task_instance": ti,
            "dag_run": ti.dag_run,
            "run_id": RUN_ID,
            "logical_date": LOGICAL_DATE,
            "ds": LOGICAL_DATE.date().isoformat(),
            "ds_nodash": LOGICAL_DATE.strftime("%Y%m%d"),
            "params": {},
        }
        task.render_template_fields(context)
        xcoms[task.task_id] = result = task.execute(context)
        event = operator_event(task.get_openlineage_facets_on_complete(ti), f"{dag_id}.{task.task_id}")
        foreign = validate_event(event)
        send({"task_id": task.task_id, "result": result, "event": event, "foreign_facets": foreign})
    send({"done": True})


if __name__ == "__main__":
    main(*sys.argv[1:3])

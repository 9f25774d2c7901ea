"""Time one bench task's ``execute()`` in this interpreter, without Airflow's task runner around it.

Benchmark #1 runs this in a fresh process (``python -m benchmarks.execute_probe TASK PARAMS``)
to separate what the provider costs (validation, connection to Spark settings, building argv,
reading the result) from what ``airflow tasks test`` costs (CLI start-up, DAG bundle parsing,
the in-process execution API). Prints ``{"seconds": ..., "submit_seconds": ..., "result": ...}``:
``submit_seconds`` is the time spent inside ``SparkSubmitHook.submit`` (spark-submit running,
its output relayed to the log), so ``seconds - submit_seconds`` is the provider's own work,
measured without the noise of a second Spark run.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import uuid
from types import SimpleNamespace

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from benchmarks.workspace import BENCH_DAG_ID, BENCH_DAGS

_submit_seconds: list[float] = []
_submit = SparkSubmitHook.submit


def _timed_submit(self, *args, **kwargs):
    started = time.perf_counter()
    try:
        return _submit(self, *args, **kwargs)
    finally:
        _submit_seconds.append(time.perf_counter() - started)


SparkSubmitHook.submit = _timed_submit


def load_bench_dag():
    spec = importlib.util.spec_from_file_location(
        "airflow_iceberg_bench_dag", BENCH_DAGS / f"{BENCH_DAG_ID}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def main(task_id: str, params_json: str) -> None:
    dag = load_bench_dag()
    task = dag.get_task(task_id)
    # the task-instance fields the operator reads (job name, snapshot-summary tags), as a stand-in
    ti = SimpleNamespace(
        dag_id=dag.dag_id,
        task_id=task_id,
        run_id=f"execute_probe_{uuid.uuid4().hex}",
        map_index=-1,
        try_number=1,
    )
    context = {"params": {**dag.params.dump(), **json.loads(params_json)}, "ti": ti}
    task.render_template_fields(context)
    started = time.perf_counter()
    result = task.execute(context)
    elapsed = time.perf_counter() - started
    if isinstance(result, dict) and result.get("reused_earlier_commit"):
        raise RuntimeError("the job found this run's commit id in the table and wrote nothing")
    answer = {"seconds": elapsed, "submit_seconds": sum(_submit_seconds), "result": result}
    print(json.dumps(answer, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:3])

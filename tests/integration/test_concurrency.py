"""Concurrent writers on one table, in a real JDBC catalog on PostgreSQL.

Parallel Airflow tasks are separate ``airflow tasks test`` processes of one DagRun, each with
its own spark-submit, exactly as parallel workers would run them:

* four mapped appends (``.partial().expand()``) at once: every commit lands, once, and the row
  count is exact;
* two dynamic partition overwrites of different partitions at once: both land;
* two ``overwrite(condition)`` corrections of the same rows that both validate from the snapshot
  before either ran (``isolation-level=serializable``): the first commits, the second fails with
  Iceberg's ValidationException in the task log, and no committed row is lost.

pyiceberg's SqlCatalog on the same PostgreSQL database is the judge.
"""

from __future__ import annotations

import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.integration.airflow_runner import spark_connection
from tests.integration.catalog_connections import postgres_connection, postgres_reader
from tests.integration.robustness_dags.iceberg_robustness import BATCH_ROWS, BATCHES
from tests.integration.task_processes import (
    TaskProcess,
    run_task,
    run_task_to_end,
    task_instance_state,
    task_succeeded,
    trigger_dag_run,
    xcoms,
)

DAG_ID = "robust_concurrency"
RUN_ID = "concurrency"
CATALOG = "robust"  # its own catalog name: other suites share this PostgreSQL server
TABLE = "db.sales"
SEED_ROWS = 10  # create_sales's rows
COMMIT_ID = "airflow-iceberg.commit-id"


@dataclass
class Parallel:
    """Tasks that ran at the same time: their results and how much they overlapped."""

    codes: list[int]
    outputs: list[str]
    max_jvms_alive: int
    seconds: float


@dataclass
class SalesLake:
    runner: Any
    logs: Path
    connections: dict[str, dict]
    catalog: Any
    phases: dict[str, Any] = field(default_factory=dict)

    def table(self) -> Any:
        return self.catalog.load_table(TABLE)

    def rows(self) -> list[dict]:
        return self.table().scan().to_arrow().to_pylist()

    def run(self, task_id: str, **kwargs: Any) -> tuple[int, str]:
        return run_task_to_end(self.runner, self.logs, DAG_ID, task_id, RUN_ID, self.connections, **kwargs)

    def run_in_parallel(self, tasks: list[tuple[str, int | None]]) -> Parallel:
        """Start every ``(task_id, map_index)`` at once and wait for all; count overlapping JVMs."""
        started = time.monotonic()
        with ExitStack() as stack:
            running: list[TaskProcess] = [
                stack.enter_context(
                    run_task(
                        self.runner, self.logs, DAG_ID, task_id, RUN_ID, self.connections, map_index=index
                    )
                )
                for task_id, index in tasks
            ]
            max_jvms = 0
            deadline = started + 600
            while any(t.running() for t in running) and time.monotonic() < deadline:
                alive = sum(1 for t in running if t.spark_submit_jvm() is not None)
                max_jvms = max(max_jvms, alive)
                time.sleep(0.25)
            codes = [t.wait(30) for t in running]
            outputs = [t.output() for t in running]
        return Parallel(codes, outputs, max_jvms, time.monotonic() - started)


@pytest.fixture(scope="module")
def lake(airflow_runner, postgres_server, tmp_path_factory) -> SalesLake:
    warehouse = tmp_path_factory.mktemp("concurrency-warehouse")
    connections = {
        "iceberg_catalog_default": postgres_connection(postgres_server, warehouse, catalog_name=CATALOG),
        "spark_default": spark_connection(),
    }
    lake = SalesLake(
        runner=airflow_runner,
        logs=tmp_path_factory.mktemp("concurrency-logs"),
        connections=connections,
        catalog=postgres_reader(postgres_server, warehouse, catalog_name=CATALOG),
    )
    code, output = run_task_to_end(
        airflow_runner, lake.logs, DAG_ID, "create_sales", "2024-03-01", connections
    )
    assert task_succeeded(code, output), output[-6000:]
    # One DagRun for the parallel tasks: concurrent `tasks test` runs would each try to create it.
    trigger_dag_run(airflow_runner, DAG_ID, RUN_ID, "2024-03-02")
    assert len(lake.rows()) == SEED_ROWS
    return lake


@pytest.fixture(scope="module")
def appended(lake) -> Parallel:
    return lake.run_in_parallel([("append_batch", index) for index in range(BATCHES)])


def test_parallel_mapped_appends_all_land_exactly_once(lake, appended):
    for code, output in zip(appended.codes, appended.outputs, strict=True):
        assert task_succeeded(code, output), output[-6000:]
    assert appended.max_jvms_alive == BATCHES, "the appends must really have run at the same time"

    table = lake.table()
    appends = [s for s in table.snapshots() if s.summary.get("airflow.task-id") == "append_batch"]
    assert all(s.summary.operation.value == "append" for s in appends)
    assert sorted(int(s.summary["airflow.map-index"]) for s in appends) == list(range(BATCHES))
    assert len({s.summary[COMMIT_ID] for s in appends}) == BATCHES
    rows = lake.rows()
    assert len(rows) == SEED_ROWS + BATCHES * BATCH_ROWS
    assert len({r["sale_id"] for r in rows}) == len(rows)
    assert Counter(r["region"] for r in rows) == {
        "seed": SEED_ROWS,
        **{f"batch{i}": BATCH_ROWS for i in range(BATCHES)},
    }
    retries = sum(output.count("Retrying task after failure") for output in appended.outputs)
    print(
        f"{BATCHES} appends: {appended.max_jvms_alive} spark-submit JVMs alive at once, "
        f"{retries} Iceberg commit retries, {appended.seconds:.0f}s"
    )
    by_index = {int(s.summary["airflow.map-index"]): s.snapshot_id for s in appends}
    for index in range(BATCHES):
        [result] = xcoms(lake.runner, DAG_ID, "append_batch", map_index=index)
        assert (result["snapshot_id"], result["added_records"]) == (by_index[index], BATCH_ROWS)


def test_parallel_overwrites_of_different_partitions_both_land(lake, appended):
    before = len(lake.table().snapshots())
    replaced = lake.run_in_parallel([("replace_batch0", None), ("replace_batch1", None)])
    for code, output in zip(replaced.codes, replaced.outputs, strict=True):
        assert task_succeeded(code, output), output[-6000:]
    assert replaced.max_jvms_alive == 2

    snapshots = lake.table().snapshots()
    assert len(snapshots) == before + 2
    assert {s.summary["airflow.task-id"] for s in snapshots[-2:]} == {"replace_batch0", "replace_batch1"}
    regions = Counter(r["region"] for r in lake.rows())
    assert regions == {
        "seed": SEED_ROWS,
        "batch0": 7,
        "batch1": 5,
        "batch2": BATCH_ROWS,
        "batch3": BATCH_ROWS,
    }
    lake.phases["replaced"] = replaced


def test_a_conflicting_serializable_overwrite_fails_and_loses_nothing(lake, appended):
    if "replaced" not in lake.phases:
        pytest.skip("needs the partition overwrites of the previous test")
    base = lake.table().current_snapshot().snapshot_id  # both corrections start from here
    params = {"validate_from": str(base)}

    code, output = lake.run("correct_batch0_a", params=params)
    assert task_succeeded(code, output), output[-6000:]
    after_a = lake.table()
    rows_after_a = sorted(
        (r["sale_id"], r["region"], r["amount"]) for r in after_a.scan().to_arrow().to_pylist()
    )

    code, output = lake.run("correct_batch0_b", params=params)
    assert not task_succeeded(code, output)
    failure = [
        line for line in output.splitlines() if "IcebergJobError" in line and "ValidationException" in line
    ]
    assert failure, output[-6000:]
    assert "Found conflicting files that can contain records matching" in failure[0]
    assert "batch0" in failure[0]
    [(_, state, _)] = task_instance_state(lake.runner, DAG_ID, "correct_batch0_b", run_id=RUN_ID)
    assert state == "failed"

    after_b = lake.table()
    assert [s.snapshot_id for s in after_b.snapshots()] == [s.snapshot_id for s in after_a.snapshots()]
    rows = sorted((r["sale_id"], r["region"], r["amount"]) for r in after_b.scan().to_arrow().to_pylist())
    assert rows == rows_after_a  # the winner's rows are all there, unchanged
    batch0 = [amount for _, region, amount in rows if region == "batch0"]
    assert batch0 == [sale_id * 2 for sale_id in range(10_000, 10_007)]
    assert len(rows) == SEED_ROWS + 7 + 5 + 2 * BATCH_ROWS

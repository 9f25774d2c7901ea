"""Crash safety and exactly-once on real Airflow, real spark-submit and a real Iceberg table.

Two stories, each told with ``airflow tasks test`` processes that the test interrupts on purpose:

* **Killed after the commit.** A write commits, and the whole task (Airflow, spark-submit, the
  PySpark driver) is SIGKILLed the moment the new metadata file appears, before Airflow can hear
  of it. Airflow's retry of that task instance must find the commit and write nothing.
* **Killed while writing.** A long append is interrupted three ways while its data files are
  being written: SIGTERM to the task's whole process group (a container stop), SIGKILL to
  spark-submit's JVM alone (the OOM killer), and SIGTERM to the Airflow task process alone, which
  makes Airflow call the operator's ``on_kill``. None of them may change what readers see; the
  files they leave are found and removed by ``IcebergRemoveOrphanFilesOperator``; and the next
  try of the same task instance commits exactly once.

The judge is pyiceberg reading the table's metadata files, plus the files on disk and Airflow's
own metadata database; never the job's own report.
"""

from __future__ import annotations

import contextlib
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from pyiceberg.table import StaticTable

from scripts.show_table import load_table
from tests.integration.airflow_runner import hadoop_catalog_connection, spark_connection
from tests.integration.robustness_dags.iceberg_robustness import BIG_APPEND_ROWS
from tests.integration.task_processes import (
    TaskProcess,
    data_files,
    metadata_version,
    processes_in_group,
    processes_matching,
    remove_result_dirs,
    run_task,
    run_task_to_end,
    task_instance_state,
    task_succeeded,
    trigger_dag_run,
    wait_until,
    xcoms,
)

COMMIT_ID = "airflow-iceberg.commit-id"


def referenced_files(table: StaticTable) -> set[Path]:
    """The data files the current snapshot references."""
    return {Path(task.file.file_path.removeprefix("file:")) for task in table.scan().plan_files()}


def succeeded(code: int, output: str) -> str:
    assert task_succeeded(code, output), output[-6000:]
    return output


def connections(warehouse: Path) -> dict[str, dict]:
    return {
        "iceberg_catalog_default": hadoop_catalog_connection(warehouse),
        "spark_default": spark_connection(),
    }


# =========================================================================== killed after the commit

RETRY_DAG = "robust_retry"
RETRY_DATE = "2024-01-02"


@pytest.fixture(scope="module")
def orders_lake(airflow_runner, tmp_path_factory) -> dict[str, Any]:
    """The orders table after its create task ran (100 rows of day one)."""
    warehouse = tmp_path_factory.mktemp("retry-warehouse")
    logs = tmp_path_factory.mktemp("retry-logs")
    conns = connections(warehouse)
    succeeded(*run_task_to_end(airflow_runner, logs, RETRY_DAG, "create_orders", RETRY_DATE, conns))
    assert load_table(warehouse, "db.orders").scan().to_arrow().num_rows == 100
    return {"warehouse": warehouse, "logs": logs, "connections": conns}


@pytest.mark.parametrize(
    ("task_id", "operation", "rows_after"),
    [("append_day_two", "append", 180), ("correct_day_one", "overwrite", 170)],
    ids=["append", "overwrite_partitions"],
)
def test_a_retry_after_a_commit_airflow_never_recorded_writes_nothing(
    airflow_runner, orders_lake, task_id, operation, rows_after
):
    warehouse, conns = orders_lake["warehouse"], orders_lake["connections"]
    table_dir = warehouse / "db" / "orders"
    before = load_table(warehouse, "db.orders")
    version_before = metadata_version(table_dir)

    # Try 1: SIGKILL the whole task the moment its commit (a new vN.metadata.json) is on disk.
    with run_task(airflow_runner, orders_lake["logs"], RETRY_DAG, task_id, RETRY_DATE, conns) as first:
        wait_until(
            lambda: metadata_version(table_dir) > version_before, 240, "the commit", while_running=first
        )
        first.signal_group(signal.SIGKILL)
        assert first.wait(30) == -signal.SIGKILL
        killed_output = first.output()
    remove_result_dirs(killed_output)  # the one thing a SIGKILLed operator cannot clean up itself

    # The commit landed, exactly once ...
    version_committed = metadata_version(table_dir)
    committed = load_table(warehouse, "db.orders")
    new = [
        s for s in committed.snapshots() if s.snapshot_id not in {b.snapshot_id for b in before.snapshots()}
    ]
    assert len(new) == 1 and new[0].summary.operation.value == operation
    snapshot = new[0]
    assert committed.current_snapshot().snapshot_id == snapshot.snapshot_id
    assert committed.scan().to_arrow().num_rows == rows_after
    # ... but Airflow never heard of it: the operator logged no result, the try is not a success,
    # and there is no XCom.
    # (the operator's own logger; Iceberg's "Committed snapshot" comes through the hook's)
    assert "Committed snapshot" not in "\n".join(
        line for line in killed_output.splitlines() if "airflow.task.operators.airflow_iceberg" in line
    )
    [(run_id, state, _)] = task_instance_state(airflow_runner, RETRY_DAG, task_id)
    assert state != "success"
    assert xcoms(airflow_runner, RETRY_DAG, task_id) == []
    # The task instance, its first try since the last clear (no clear: 1), then when its run started.
    assert snapshot.summary[COMMIT_ID].startswith(f"{RETRY_DAG}:{task_id}:{run_id}:-1:1:")

    # Try 2, the retry of the same task instance (same DagRun, same run_id): nothing is written.
    output = succeeded(
        *run_task_to_end(airflow_runner, orders_lake["logs"], RETRY_DAG, task_id, RETRY_DATE, conns)
    )

    after = load_table(warehouse, "db.orders")
    assert [s.snapshot_id for s in after.snapshots()] == [s.snapshot_id for s in committed.snapshots()]
    assert metadata_version(table_dir) == version_committed  # not even new metadata
    assert after.scan().to_arrow().num_rows == rows_after
    assert f"already has snapshot {snapshot.snapshot_id} committed by an earlier try" in output
    [(retried_run_id, state, _)] = task_instance_state(airflow_runner, RETRY_DAG, task_id)
    assert (retried_run_id, state) == (run_id, "success")
    [result] = xcoms(airflow_runner, RETRY_DAG, task_id)
    assert result["snapshot_id"] == snapshot.snapshot_id
    assert result["reused_earlier_commit"] is True
    assert result["total_records"] == rows_after


# =========================================================================== killed while writing

KILL_DAG = "robust_kill"
KILL_RUN = "kill_story"
BASE_ROWS = 1000


def _kill_group_with_sigterm(task: TaskProcess) -> None:
    """A container or pod stop: every process of the task gets SIGTERM at once."""
    task.signal_group(signal.SIGTERM)


def _kill_the_jvm(task: TaskProcess) -> None:
    """The OOM killer: spark-submit's JVM alone dies, Airflow lives on and sees it go."""
    jvm = task.spark_submit_jvm()
    assert jvm is not None, "spark-submit's JVM must be running while files are written"
    jvm.send_signal(signal.SIGKILL)


def _terminate_airflow(task: TaskProcess) -> None:
    """SIGTERM to the Airflow task process only: Airflow calls on_kill, which must stop spark-submit."""
    task.popen.send_signal(signal.SIGTERM)


KILLS = {
    "sigterm_task_process_group": _kill_group_with_sigterm,
    "sigkill_spark_submit_jvm": _kill_the_jvm,
    "sigterm_airflow_on_kill": _terminate_airflow,
}


@dataclass
class Kill:
    """What one interrupted try looked like."""

    name: str
    exit_code: int
    output: str
    seconds_to_stop: float  # from the signal until no process of the try was left
    processes_left: list[str]
    snapshots_after: list[int]
    metadata_version_after: int
    rows_after: int
    max_event_id_after: int
    leftover_files: set[Path]
    leftover_bytes: int
    task_state: str | None


@dataclass
class KillStory:
    warehouse: Path
    table_dir: Path
    snapshots_before: list[int]
    metadata_version_before: int
    kills: list[Kill] = field(default_factory=list)
    older_than_ms: int = 0
    dry_run: dict | None = None
    files_after_dry_run: set[Path] = field(default_factory=set)
    removal: dict | None = None
    files_after_removal: set[Path] = field(default_factory=set)
    referenced_before_retry: set[Path] = field(default_factory=set)
    retry_output: str = ""
    retry_result: dict | None = None


def _interrupt(airflow_runner, logs, conns, story: KillStory, name: str) -> Kill:
    files_before = data_files(story.table_dir)

    def writing() -> bool:
        # "Writing" = a new data file already holds bytes (row groups are 1 MiB on this table).
        return any(f.stat().st_size > 0 for f in data_files(story.table_dir) - files_before if f.exists())

    with run_task(airflow_runner, logs, KILL_DAG, "big_append", KILL_RUN, conns) as task:
        wait_until(writing, 240, "data files being written", while_running=task)
        signalled = time.monotonic()
        KILLS[name](task)
        code = task.wait(120)
        # Whatever the signal, nothing of the try may survive it: not the JVM, not the PySpark driver.
        with contextlib.suppress(AssertionError):
            wait_until(lambda: not processes_in_group(task.pid), 30, "the task's processes to exit")
        stopped = time.monotonic()
        left = [" ".join(p.cmdline())[:200] for p in processes_in_group(task.pid)]
        left += [" ".join(p.cmdline())[:200] for p in processes_matching(str(story.warehouse))]
        output = task.output()
    table = load_table(story.warehouse, "db.events")
    arrow = table.scan().to_arrow()
    leftovers = data_files(story.table_dir) - files_before
    return Kill(
        name=name,
        exit_code=code,
        output=output,
        seconds_to_stop=stopped - signalled,
        processes_left=left,
        snapshots_after=[s.snapshot_id for s in table.snapshots()],
        metadata_version_after=metadata_version(story.table_dir),
        rows_after=arrow.num_rows,
        max_event_id_after=pc.max(arrow["event_id"]).as_py(),
        leftover_files=leftovers,
        leftover_bytes=sum(f.stat().st_size for f in leftovers),
        task_state=task_instance_state(airflow_runner, KILL_DAG, "big_append", run_id=KILL_RUN)[0][1],
    )


@pytest.fixture(scope="module")
def kill_story(airflow_runner, tmp_path_factory) -> KillStory:
    """Create the table, interrupt one task instance three ways, clean up, then let it succeed."""
    warehouse = tmp_path_factory.mktemp("kill-warehouse")
    logs = tmp_path_factory.mktemp("kill-logs")
    conns = connections(warehouse)
    succeeded(*run_task_to_end(airflow_runner, logs, KILL_DAG, "create_events", "2024-01-01", conns))
    # One DagRun for all tries, so every try below is the same task instance (same commit id).
    trigger_dag_run(airflow_runner, KILL_DAG, KILL_RUN, "2024-01-02")

    table_dir = warehouse / "db" / "events"
    created = load_table(warehouse, "db.events")
    story = KillStory(
        warehouse=warehouse,
        table_dir=table_dir,
        snapshots_before=[s.snapshot_id for s in created.snapshots()],
        metadata_version_before=metadata_version(table_dir),
    )
    for name in KILLS:
        story.kills.append(_interrupt(airflow_runner, logs, conns, story, name))
    # Just after the last kill: every leftover file is older, and no write is running.
    story.older_than_ms = int(time.time() * 1000) + 1

    params = {"older_than": story.older_than_ms}
    succeeded(
        *run_task_to_end(airflow_runner, logs, KILL_DAG, "find_orphans", KILL_RUN, conns, params=params)
    )
    story.dry_run = xcoms(airflow_runner, KILL_DAG, "find_orphans")[-1]
    story.files_after_dry_run = data_files(table_dir)
    succeeded(
        *run_task_to_end(airflow_runner, logs, KILL_DAG, "remove_orphans", KILL_RUN, conns, params=params)
    )
    story.removal = xcoms(airflow_runner, KILL_DAG, "remove_orphans")[-1]
    story.files_after_removal = data_files(table_dir)
    story.referenced_before_retry = referenced_files(load_table(warehouse, "db.events"))

    story.retry_output = succeeded(
        *run_task_to_end(airflow_runner, logs, KILL_DAG, "big_append", KILL_RUN, conns)
    )
    story.retry_result = xcoms(airflow_runner, KILL_DAG, "big_append")[-1]
    return story


def test_every_kill_happened_mid_write_and_failed_the_try(kill_story):
    assert [k.name for k in kill_story.kills] == list(KILLS)
    for kill in kill_story.kills:
        assert kill.task_state == "failed", (kill.name, kill.output[-3000:])
        assert "Committed snapshot" not in kill.output, kill.name


def test_no_process_of_a_killed_try_survives(kill_story):
    for kill in kill_story.kills:
        assert kill.processes_left == [], kill.name
        print(
            f"{kill.name}: stopped {kill.seconds_to_stop:.1f}s after the signal, "
            f"left {len(kill.leftover_files)} files ({kill.leftover_bytes} bytes)"
        )
    on_kill = kill_story.kills[2]
    assert "Sending kill signal to spark-submit" in on_kill.output  # the operator's on_kill did it


def test_a_killed_write_changes_nothing_readers_see(kill_story):
    for kill in kill_story.kills:
        assert kill.snapshots_after == kill_story.snapshots_before, kill.name
        assert kill.metadata_version_after == kill_story.metadata_version_before, kill.name
        assert (kill.rows_after, kill.max_event_id_after) == (BASE_ROWS, BASE_ROWS - 1), kill.name


def test_a_killed_write_leaves_files_no_snapshot_references(kill_story):
    for kill in kill_story.kills:
        assert kill.leftover_files, f"{kill.name} left no data file behind"
        assert not kill.leftover_files & kill_story.referenced_before_retry


def test_orphan_files_are_reported_by_a_dry_run_then_removed(kill_story):
    leftovers = set().union(*(k.leftover_files for k in kill_story.kills))
    expected = sorted(f"file:{path}" for path in leftovers)
    dry_run, removal = kill_story.dry_run, kill_story.removal
    assert (dry_run["dry_run"], dry_run["orphan_file_count"], dry_run["orphan_files"]) == (
        True,
        len(expected),
        expected,
    )
    assert leftovers <= kill_story.files_after_dry_run  # a dry run deletes nothing
    assert (removal["dry_run"], removal["orphan_file_count"], sorted(removal["orphan_files"])) == (
        False,
        len(expected),
        expected,
    )
    assert kill_story.files_after_removal == kill_story.referenced_before_retry
    assert dry_run["snapshot_id"] == removal["snapshot_id"] == kill_story.snapshots_before[-1]


def test_the_next_try_commits_exactly_once(kill_story):
    table = load_table(kill_story.warehouse, "db.events")
    snapshots = table.snapshots()
    assert [s.snapshot_id for s in snapshots[:-1]] == kill_story.snapshots_before
    retry = snapshots[-1]
    assert retry.summary[COMMIT_ID].startswith(f"{KILL_DAG}:big_append:{KILL_RUN}:-1:1:")
    assert int(retry.summary["added-records"]) == BIG_APPEND_ROWS
    ids = table.scan(selected_fields=("event_id",)).to_arrow()["event_id"]
    assert len(ids) == BASE_ROWS + BIG_APPEND_ROWS
    assert pc.count_distinct(ids).as_py() == len(ids)  # no row twice
    assert "earlier try" not in kill_story.retry_output
    result = kill_story.retry_result
    assert (result["snapshot_id"], result["added_records"]) == (retry.snapshot_id, BIG_APPEND_ROWS)
    assert "reused_earlier_commit" not in result
    assert data_files(kill_story.table_dir) == referenced_files(table)  # and it left nothing behind

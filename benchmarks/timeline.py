"""Where a DAG run's time went, task by task: pure functions over what Airflow and the probe recorded.

Inputs are the run's row of ``dag_run`` and its rows of ``task_instance`` in the metadata
database, the DAG's upstream lists, and the task probe's records
(:mod:`benchmarks.task_probe`). Every time is a Unix timestamp in seconds. For one task:

- **ready**: when it could start: the latest ``end_date`` of its upstream tasks, or, for a task
  without upstream tasks, the run's ``queued_at`` (the trigger);
- **queue and scheduling delay**: ready to ``start_date``: the scheduler seeing the upstream
  finish (``scheduled_dttm``), queueing it (``queued_dttm``), the executor picking it up and
  the supervisor forking the task process (``start_date`` is taken right after the fork);
- **task process start**: ``start_date`` to the start of ``execute()`` (probe): the task process
  loading the DAG file (its share, ``dag_file_parse_ms``, is in the task log), fetching its
  context, rendering templates, pre-execute hooks;
- **Spark time**: inside ``execute()``, the spark-submit process (``SparkSubmitHook.submit``), or
  the Spark Connect job (``ConnectJob.run``) without the provider's settling of earlier tries;
- **own work**: the rest of ``execute()``: for the operators, the provider's validation,
  connection lookups, settings, job archive, settling, result reading, lineage; for a plain
  SparkSubmitOperator, the apache-spark provider's own;
- **finishing**: the end of ``execute()`` to ``end_date``: pushing the XCom and reporting success.

A task's **run time** is ``start_date`` to ``end_date`` (process start + own work + Spark +
finishing); the run's **run completion** is its last task's ``end_date`` to the run's
``end_date`` (the scheduler noticing). The whole DAG, trigger to success, is ``queued_at`` to
``end_date``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

#: The components of a task's time, in order, as reported.
COMPONENTS = ("delay", "process_start", "own_work", "spark", "finishing")
COMPONENT_LABELS = {
    "delay": "queue and scheduling delay",
    "process_start": "task process start",
    "own_work": "own work",
    "spark": "Spark time",
    "finishing": "finishing",
}


def timestamp(value: str | datetime | None) -> float | None:
    """A metadata-database time (ISO text, naive meaning UTC) as a Unix timestamp."""
    if value is None or value == "":
        return None
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


@dataclass(frozen=True)
class RunRecord:
    """A ``dag_run`` row: when it was triggered (``queued_at``), started and ended."""

    dag_id: str
    run_id: str
    state: str
    queued: float
    started: float | None
    ended: float | None

    @property
    def seconds(self) -> float:
        """Whole-DAG wall time, from the trigger to the run's end."""
        if self.ended is None:
            raise ValueError(f"run {self.run_id} of {self.dag_id} has not ended ({self.state})")
        return self.ended - self.queued


#: The ``task_instance`` columns :meth:`TaskRecord.from_row` reads, in order.
TASK_COLUMNS = (
    "id, task_id, map_index, state, operator, try_number, scheduled_dttm, queued_dttm, start_date, end_date"
)


@dataclass(frozen=True)
class TaskRecord:
    """A ``task_instance`` row (the times it holds, as Unix timestamps)."""

    ti_id: str
    task_id: str
    map_index: int
    state: str
    operator: str
    try_number: int
    scheduled: float | None
    queued: float | None
    started: float | None
    ended: float | None

    @classmethod
    def from_row(cls, row: Sequence) -> TaskRecord:
        """A row of ``SELECT`` :data:`TASK_COLUMNS` ``FROM task_instance``."""
        ti_id, task_id, map_index, state, operator, try_number, *times = row
        scheduled, queued, started, ended = (timestamp(value) for value in times)
        return cls(
            str(uuid.UUID(str(ti_id))),  # SQLite keeps the id as 32 hex digits, the probe with dashes
            task_id,
            int(map_index),
            str(state),
            str(operator or ""),
            int(try_number or 0),
            scheduled,
            queued,
            started,
            ended,
        )


@dataclass(frozen=True)
class ProbeRecord:
    """What the task probe saw in the task process: ``execute()`` and named intervals inside it."""

    execute: tuple[float, float]
    intervals: Mapping[str, Sequence[Sequence[float]]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping) -> ProbeRecord:
        start, end = data["execute"]
        return cls((float(start), float(end)), dict(data.get("intervals") or {}))

    def total(self, name: str) -> float:
        return sum(end - start for start, end in self.intervals.get(name, ()))


def spark_seconds(probe: ProbeRecord) -> float:
    """Spark time inside ``execute()``: spark-submit runs, plus Connect jobs without their settling."""
    return probe.total("spark_submit") + max(0.0, probe.total("connect_job") - probe.total("settle"))


#: The task runner's log event after it loaded the DAG file, with ``dag_file_parse_ms``.
PARSED_EVENT = "Worker startup parse complete"


def dag_file_parse_seconds(task_logs: str) -> dict[str, float]:
    """Task instance id -> seconds its task process spent parsing the DAG file, from its JSON log lines."""
    found: dict[str, float] = {}
    for line in task_logs.splitlines():
        if PARSED_EVENT not in line:
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") == PARSED_EVENT and "dag_file_parse_ms" in event and event.get("ti_id"):
            found[str(event["ti_id"])] = float(event["dag_file_parse_ms"]) / 1000
    return found


@dataclass(frozen=True)
class TaskBreakdown:
    """One task's time, split into :data:`COMPONENTS` (seconds)."""

    task_id: str
    map_index: int
    operator: str
    delay: float
    process_start: float
    own_work: float
    spark: float
    finishing: float
    ti_id: str = ""
    #: Over Spark Connect, the provider's settling of earlier tries (part of ``own_work``).
    settle: float = 0.0
    #: Loading the DAG file in the task process (part of ``process_start``; Airflow logs it).
    parse: float = 0.0

    @property
    def run_time(self) -> float:
        """``start_date`` to ``end_date``: the task's own time in the worker."""
        return self.process_start + self.own_work + self.spark + self.finishing

    @property
    def own_share(self) -> float:
        """The own work as a share of the task's run time."""
        return self.own_work / self.run_time if self.run_time > 0 else 0.0

    def component(self, name: str) -> float:
        return float(getattr(self, name))


def upstream_lists(tasks: Iterable[Mapping]) -> dict[str, list[str]]:
    """Task id -> its upstream task ids, from the REST API's task list (``downstream_task_ids``)."""
    upstream: dict[str, list[str]] = {}
    for task in tasks:
        upstream.setdefault(task["task_id"], [])
        for downstream in task.get("downstream_task_ids") or ():
            upstream.setdefault(downstream, []).append(task["task_id"])
    return upstream


def ready_time(
    task: TaskRecord, run: RunRecord, tasks: Sequence[TaskRecord], upstream: Sequence[str]
) -> float:
    """When ``task`` could start: its upstream tasks' latest end, or the trigger for a first task."""
    ends = [t.ended for t in tasks if t.task_id in upstream and t.ended is not None]
    return max(ends) if ends else run.queued


def breakdown(
    run: RunRecord,
    tasks: Sequence[TaskRecord],
    upstream: Mapping[str, Sequence[str]],
    probes: Mapping[str, ProbeRecord],
    parse_seconds: Mapping[str, float] | None = None,
) -> list[TaskBreakdown]:
    """Every task that ran (it has a start, an end and a probe record), in the order it started.

    Tasks that never ran (skipped, upstream failed) are left out; a task that ran without a
    probe record is an error: its breakdown would be a guess.
    """
    ran = sorted(
        (t for t in tasks if t.started is not None and t.state == "success"), key=lambda t: t.started
    )
    result = []
    for task in ran:
        probe = probes.get(task.ti_id)
        if probe is None or task.ended is None:
            raise ValueError(f"{task.task_id}[{task.map_index}] of {run.run_id} ran but has no probe record")
        ready = ready_time(task, run, tasks, upstream.get(task.task_id, ()))
        started, ended = task.started, task.ended
        execute_start, execute_end = probe.execute
        spark = spark_seconds(probe)
        result.append(
            TaskBreakdown(
                task_id=task.task_id,
                map_index=task.map_index,
                operator=task.operator,
                delay=started - ready,
                process_start=execute_start - started,
                own_work=(execute_end - execute_start) - spark,
                spark=spark,
                finishing=ended - execute_end,
                ti_id=task.ti_id,
                settle=probe.total("settle"),
                parse=(parse_seconds or {}).get(task.ti_id, 0.0),
            )
        )
    return result


@dataclass(frozen=True)
class RunBreakdown:
    """A whole run: its wall time and its tasks' components summed (the DAGs here are chains)."""

    seconds: float
    tasks: tuple[TaskBreakdown, ...]
    #: The last task's end to the run's end: the scheduler noticing the run is done.
    completion: float

    def total(self, name: str, spark_tasks_only: bool = False) -> float:
        return sum(t.component(name) for t in self.tasks if not spark_tasks_only or is_spark_task(t))

    @property
    def airflow_part(self) -> float:
        """What Airflow itself adds: delays, process starts, finishing and run completion."""
        return sum(self.total(name) for name in ("delay", "process_start", "finishing")) + self.completion


def run_breakdown(
    run: RunRecord,
    tasks: Sequence[TaskRecord],
    upstream: Mapping[str, Sequence[str]],
    probes: Mapping[str, ProbeRecord],
    parse_seconds: Mapping[str, float] | None = None,
) -> RunBreakdown:
    parts = breakdown(run, tasks, upstream, probes, parse_seconds)
    last_end = max((t.ended for t in tasks if t.ended is not None), default=run.queued)
    return RunBreakdown(run.seconds, tuple(parts), (run.ended or last_end) - last_end)


#: Operators whose ``execute()`` runs a Spark job: the provider's, and the plain one of the peer.
SPARK_OPERATOR_PREFIXES = ("Iceberg", "SparkSubmitOperator")


def is_spark_task(task: TaskBreakdown) -> bool:
    return task.operator.startswith(SPARK_OPERATOR_PREFIXES)

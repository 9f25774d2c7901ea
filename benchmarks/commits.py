"""Exactly-once, counted: a run's commits by commit id, and Iceberg's commit retries in its logs.

Pure functions over what pyiceberg read from the table (each snapshot's summary) and over log
text, for #8's concurrent appends. Every commit of the provider carries the task instance that
made it (``airflow.run-id``, ``airflow.task-id``, ``airflow.map-index``) and its commit id
(``airflow-iceberg.commit-id``), so a run's commits can be counted independently of Airflow's
own view of its tasks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

COMMIT_ID = "airflow-iceberg.commit-id"
#: What Iceberg's ``Tasks`` logs (WARN) before it retries a commit that lost a race.
RETRY_MESSAGE = "Retrying task after failure"
#: The exception of a commit that lost a race: Iceberg retries only on it, and fails with it at the end.
CONFLICT_EXCEPTION = "org.apache.iceberg.exceptions.CommitFailedException"


@dataclass(frozen=True)
class CommitCount:
    """A run's commits of one task: distinct commit ids, extra commits of an id, map indexes with none."""

    commits: int
    duplicates: int
    lost: tuple[int, ...]
    expected: int

    @property
    def exactly_once(self) -> bool:
        return self.commits == self.expected and self.duplicates == 0 and not self.lost

    def __str__(self) -> str:
        return f"{self.commits} commits, {self.duplicates} duplicates, {len(self.lost)} lost"


def count_commits(
    summaries: Iterable[Mapping[str, str]], run_id: str, task_id: str, map_indexes: Sequence[int]
) -> CommitCount:
    """Count the commits ``task_id``'s mapped tries of ``run_id`` left, from the snapshots' summaries.

    ``duplicates`` counts snapshots beyond the first with the same commit id (a retry that wrote
    again), plus map indexes that committed under more than one commit id; ``lost`` lists the map
    indexes without any commit.
    """
    mine = [s for s in summaries if s.get("airflow.run-id") == run_id and s.get("airflow.task-id") == task_id]
    by_commit = Counter(s.get(COMMIT_ID) for s in mine)
    ids_by_index: dict[int, set[str | None]] = {}
    for summary in mine:
        ids_by_index.setdefault(int(summary.get("airflow.map-index", -1)), set()).add(summary.get(COMMIT_ID))
    duplicates = sum(count - 1 for count in by_commit.values())
    duplicates += sum(len(ids) - 1 for ids in ids_by_index.values())
    lost = tuple(sorted(set(map_indexes) - set(ids_by_index)))
    return CommitCount(len(by_commit), duplicates, lost, len(map_indexes))


def commit_retries(log_text: str) -> int:
    """How many times Iceberg retried a commit, in a driver's (or a Connect server's) log."""
    return sum(RETRY_MESSAGE in line for line in log_text.splitlines())


def gave_up(log_text: str) -> bool:
    """Whether a failed task's log shows a commit that lost its race after its last retry."""
    return CONFLICT_EXCEPTION in log_text


def most_at_once(intervals: Iterable[tuple[float, float]]) -> int:
    """The largest number of ``(start, end)`` intervals open at one moment (an end before a start)."""
    events = sorted(
        [(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
        key=lambda event: (event[0], event[1]),
    )
    running = most = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most

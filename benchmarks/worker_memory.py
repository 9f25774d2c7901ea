"""The worker's peak memory per task: psutil samples of each task process and its children.

Airflow records no memory figure per task, so a thread samples every process a few times a
second. A task process is recognised by the title Airflow's task runner gives it
(``airflow worker -- <task instance id>``); its tree is it and every descendant (spark-submit's
JVM and the PySpark driver in spark-submit mode; nothing more over Spark Connect, whose Spark
runs in the server). For each task instance the peak RSS of the task process alone and of its
tree (the sum of their RSS at one sample; pages shared between them are counted in each) are kept.
Named extra processes (the Spark Connect server) are sampled the same way, outside any task.

A task shorter than the interval can be missed, and a peak between two samples is not seen.
"""

from __future__ import annotations

import re
import statistics
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import psutil

TASK_TITLE = re.compile(r"airflow worker -- ([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")
MIB = 1024 * 1024


@dataclass(frozen=True)
class PeakMemory:
    """Peak RSS in bytes: of the task process, and of it with its descendants."""

    process: int
    tree: int

    def merged(self, other: PeakMemory) -> PeakMemory:
        return PeakMemory(max(self.process, other.process), max(self.tree, other.tree))


def task_instance_id(command_line: Iterable[str]) -> str | None:
    """The task instance id in a task process's title, or None for any other process."""
    found = TASK_TITLE.search(" ".join(command_line))
    return found.group(1) if found else None


def _tree_rss(process: psutil.Process) -> tuple[int, int]:
    own = process.memory_info().rss
    tree = own
    for child in process.children(recursive=True):
        try:
            tree += child.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return own, tree


class WorkerMemorySampler:
    """Sample task processes (and ``named`` pids) every ``interval`` seconds while in the ``with`` block."""

    def __init__(self, interval: float = 0.25, named: Mapping[str, int] | None = None) -> None:
        self.interval = interval
        self.named = dict(named or {})
        self.peaks: dict[str, PeakMemory] = {}
        self.named_peaks: dict[str, PeakMemory] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="worker-memory-sampler", daemon=True)

    def __enter__(self) -> WorkerMemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> None:
        for process in psutil.process_iter(["cmdline"]):
            ti_id = task_instance_id(process.info.get("cmdline") or ())
            if ti_id is None:
                continue
            self._keep(self.peaks, ti_id, process)
        for name, pid in list(self.named.items()):
            try:
                self._keep(self.named_peaks, name, psutil.Process(pid))
            except psutil.NoSuchProcess:
                continue

    @staticmethod
    def _keep(peaks: dict[str, PeakMemory], key: str, process: psutil.Process) -> None:
        try:
            own, tree = _tree_rss(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return
        seen = PeakMemory(own, tree)
        peaks[key] = peaks[key].merged(seen) if key in peaks else seen


def mib(value: float) -> str:
    return f"{value / MIB:,.0f} MiB"


def summary(peaks: Iterable[PeakMemory]) -> tuple[float, float, float, float] | None:
    """Median and largest peak, of the task process and of its tree, over tasks (bytes); None if none."""
    values = list(peaks)
    if not values:
        return None
    processes, trees = [p.process for p in values], [p.tree for p in values]
    return statistics.median(processes), max(processes), statistics.median(trees), max(trees)

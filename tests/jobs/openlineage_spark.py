"""Reading openlineage-spark's events: the datasets it names in a role, their symlinks and schemas.

The job tests that compare the operators' OpenLineage datasets with openlineage-spark's
(``test_openlineage_spark.py``, ``test_openlineage_dag.py``) read the listener's events (the
``openlineage_events`` fixture of ``conftest.py``) with these.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyspark
import pytest

Name = tuple[str, str]
#: A dataset as both producers name it: (namespace, name), and its symlink (namespace, name) or None.
Names = tuple[Name, Name | None]


#: How long a reader waits for the listener to catch up (it returns as soon as it has): more than
#: Spark's default 10 s, which the listener's start in a busy machine's warm JVM exceeded.
BUS_TIMEOUT_MS = 120_000


@contextmanager
def openlineage_listener(spark: Any, events: Path) -> Iterator[Callable[[], list[dict]]]:
    """openlineage-spark's listener on the shared session, writing to ``events``; a reader of them.

    The listener gets the session's SparkConf with a file transport, as ``spark.extraListeners``
    would create it, and is removed afterwards, so no other test runs with it. The reader returns
    every event since the listener was ready: the listener emits on Spark's listener bus thread,
    so once the bus is empty every event of the jobs run until then is in the file.

    Ready means initialised before the first job, as on spark-submit, where the listener's
    ``onApplicationStart`` builds its event emitter before any job. Added to a running session, it
    builds it on the first SQL execution or job it hears of
    (``OpenLineageSparkListener.initializeContextFactoryIfNotInitialized``), on the listener bus
    thread, which hears of an execution after the fact and looks its plan up by id
    (``ContextFactory.createSparkSQLExecutionContext``: ``SQLExecution.getQueryExecution``);
    Spark drops the plan when the execution ends. In a JVM warmed by other job tests, a one-row
    query ended 4 s before the listener had caught up with it (over 10 s, Spark's default wait for
    the bus, with three job suites on this 2-core machine), so the first writes under a new
    listener logged "Query execution is null: can't emit event for executionId ...": no START
    event (the only kind with ``spark_applicationDetails``), and a COMPLETE built from the end
    event alone, without ``outputStatistics``. (openlineage-spark 1.53's
    ``integration/spark/app/src/main/java/io/openlineage/spark/agent/OpenLineageSparkListener.java``
    and ``lifecycle/ContextFactory.java``; OpenLineage/OpenLineage#1646, "Missing events for super
    quick spark jobs".) Alone, in a cold JVM, the first write is slow enough to hide this. So one
    query runs here, under the listener, and is waited for; its events are not read.
    """
    context = spark.sparkContext
    bus = context._jsc.sc().listenerBus()
    conf = context._jsc.sc().conf().clone()
    conf.set("spark.openlineage.transport.type", "file")
    conf.set("spark.openlineage.transport.location", str(events))
    conf.set("spark.openlineage.namespace", "job-tests")
    listener = context._jvm.io.openlineage.spark.agent.OpenLineageSparkListener(conf)
    context._jsc.sc().addSparkListener(listener)

    def lines() -> list[str]:
        bus.waitUntilEmpty(BUS_TIMEOUT_MS)
        if not events.exists():  # no job has run under the listener yet
            return []
        return [line for line in events.read_text().splitlines() if line.strip()]

    try:
        spark.range(1).collect()
        ready = len(lines())
        assert ready, "openlineage-spark's listener emitted no event for a query: it is not running"
        yield lambda: [json.loads(line) for line in lines()[ready:]]
    finally:
        context._jsc.sc().removeSparkListener(listener)


def spark_names(events: list[dict], role: str) -> dict[tuple[str, str], set[tuple[str, str] | None]]:
    """openlineage-spark's datasets in ``role`` (inputs, outputs): name → the symlinks it gave it."""
    named: dict[tuple[str, str], set[tuple[str, str] | None]] = {}
    for event in events:
        for dataset in event.get(role) or []:
            identifiers = (dataset.get("facets") or {}).get("symlinks", {}).get("identifiers") or [None]
            for identifier in identifiers:
                symlink = (identifier["namespace"], identifier["name"]) if identifier else None
                named.setdefault((dataset["namespace"], dataset["name"]), set()).add(symlink)
    return named


def spark_schemas(events: list[dict], name: tuple[str, str]) -> list[list[dict]]:
    """Every ``schema`` facet openlineage-spark gave the dataset ``name``, without facet metadata."""
    schemas = []
    for event in events:
        for dataset in [*(event.get("inputs") or []), *(event.get("outputs") or [])]:
            if (dataset["namespace"], dataset["name"]) == name and "schema" in (dataset.get("facets") or {}):
                schemas.append(dataset["facets"]["schema"]["fields"])
    return schemas


def assert_named_alike(events: list[dict], role: str, ours: list[Names]) -> None:
    theirs = spark_names(events, role)
    for name, symlink in ours:
        assert name in theirs, f"{role}: openlineage-spark has no {name}; it named {sorted(theirs)}"
        assert symlink in theirs[name], f"{role} {name}: symlink {symlink}, openlineage-spark {theirs[name]}"


#: openlineage-spark 1.53 documents Spark 3.0-4.0; on Spark 4.1 its listener plans a MERGE's
#: analysed plan (``JobNameBuilder.sparkNodeName`` -> ``QueryExecution.executedPlan``) while it
#: still holds Spark 4.1's ``TableReference`` node: "No plan for TableReference", which Spark's
#: ``LazyTry`` then rethrows to the MERGE itself. (Its other events on 4.1 have every facet the
#: comparisons read, output statistics included: the example DAG's tests run there.)
LISTENER_FAILS_ON_SPARK_41 = pytest.mark.skipif(
    tuple(int(part) for part in pyspark.__version__.split(".")[:2]) >= (4, 1),
    reason="openlineage-spark 1.53 supports Spark 3.0-4.0: on 4.1 its listener fails planning a "
    "MERGE ('No plan for TableReference'), and the MERGE with it",
)

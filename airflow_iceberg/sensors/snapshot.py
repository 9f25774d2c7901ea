"""Wait for an Iceberg table to gain a new snapshot, deferring to the triggerer while it waits.

The sensor waits for a snapshot after a *baseline*: the one given, or the table's head when the
sensor started. The baseline is fixed once per task instance and kept, so a commit that lands
while the sensor is not running (between two pokes in reschedule mode, while it is deferred, or
between a failed try and its retry) is reported, never taken for the starting point:

- with Airflow's task state store (Airflow 3.3+, ``context["task_state_store"]``) the first poke
  stores it, and every later poke, reschedule, deferral and retry reads it back. A cleared task
  instance waits afresh: the stored baseline belongs to the clear generation that stored it (the
  first try since the last clear, as commit ids count it). A sensor cleared while it runs is
  restarted by Airflow, not cleared (``max_tries`` stays): it keeps its baseline, as a write
  keeps its commit id;
- without one (Airflow < 3.3), in reschedule mode, it is the snapshot that was the table's head
  when this try's first poke started (Airflow's first reschedule date), read back from the
  table's snapshot log. A retry then starts afresh, and a commit whose writer's clock is behind
  Airflow's by more than the time between the first poke's start and its read could count as
  before the start.

A catalog that is down when the baseline is first read does not fail the sensor: the baseline
becomes *pending*, the head the table had when the sensor started, read back from its snapshot
log by the first poke (or, deferred, the trigger's first poll) that reaches the catalog; the
state store keeps the start time meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseSensorOperator

from airflow_iceberg.exceptions import IcebergJobError
from airflow_iceberg.hooks.iceberg_catalog import IcebergCatalogHook
from airflow_iceberg.timestamps import to_snapshot_id
from airflow_iceberg.triggers.snapshot import (
    DEFAULT_POLL_INTERVAL,
    DEFAULT_POLL_RETRIES,
    IcebergSnapshotTrigger,
)

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

#: The task state store key that keeps a sensor's baseline across pokes, deferrals and retries.
BASELINE_KEY = "airflow_iceberg.snapshot_sensor.baseline"


@dataclass(frozen=True)
class PendingBaseline:
    """A baseline not read yet: the sensor started at ``started_ms`` while the catalog was down.

    It is the head the table had then, read back from the table's snapshot log once the catalog
    answers (:func:`~airflow_iceberg.catalog.new_snapshots.baseline_snapshot_id` at ``started_ms``).
    """

    started_ms: int


def first_try_since_clear(context: Context, retries: int) -> int:
    """The try number that started the task instance's current clear generation.

    Airflow sets ``max_tries = try_number + retries`` when it clears a task instance and leaves
    it alone on a retry, so ``max_tries - retries + 1`` is the same for every try, reschedule and
    deferral since the last clear, and changes with each clear.
    """
    max_tries = getattr(context.get("ti"), "max_tries", None)
    return max_tries - retries + 1 if isinstance(max_tries, int) else 1


class IcebergSnapshotSensor(BaseSensorOperator):
    """Succeed when ``table`` has a snapshot newer than when the sensor started (or ``after_snapshot_id``).

    Any writer counts (Spark, Flink, pyiceberg, another Airflow): the sensor reads the table's
    metadata with pyiceberg. The XCom is the newest matching snapshot: ``snapshot_id``,
    ``operation``, ``summary``, ``sequence_number``, ``timestamp_ms``, and
    ``matching_snapshot_ids``, every matching snapshot since the baseline. The baseline is kept
    for the task instance across pokes, reschedules, deferrals and retries (see the module's
    docstring); a cleared sensor waits afresh. For a branch that does not exist yet it is the
    table's newest snapshot, so none of the snapshots that existed when the sensor started counts.

    A poke or poll that fails because the catalog is briefly unreachable (connection refused,
    timeout, HTTP 5xx or 429, throttling) does not fail the task: a poke counts as "not yet", a
    deferred wait retries ``poll_retries`` times with backoff; the same holds for the first read
    of the baseline. A configuration error fails at once.

    :param table: ``namespace.table`` (or ``catalog.namespace.table``). (templated)
    :param iceberg_conn_id: The ``iceberg_catalog`` connection of the table's catalog. (templated)
    :param after_snapshot_id: Wait for a snapshot after this one; default: the head when the
        sensor starts. (templated)
    :param operation: Only this operation (or one of these): ``append``, ``overwrite``,
        ``delete``, ``replace``. (templated)
    :param summary: Only snapshots whose summary has all these entries. (templated)
    :param branch: Watch this branch instead of main. (templated)
    :param deferrable: Wait in the triggerer instead of a worker slot (default True).
    :param poll_retries: Deferred: how many polls in a row may fail for a transient reason
        before the wait fails (see :class:`IcebergSnapshotTrigger`). Default 10.
    """

    template_fields: Sequence[str] = (
        "table",
        "iceberg_conn_id",
        "after_snapshot_id",
        "operation",
        "summary",
        "branch",
    )

    def __init__(
        self,
        *,
        table: str,
        iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
        after_snapshot_id: int | str | None = None,
        operation: str | Sequence[str] | None = None,
        summary: Mapping[str, str] | None = None,
        branch: str | None = None,
        deferrable: bool = True,
        poke_interval: float = DEFAULT_POLL_INTERVAL,
        poll_retries: int = DEFAULT_POLL_RETRIES,
        **kwargs: Any,
    ) -> None:
        super().__init__(poke_interval=poke_interval, **kwargs)
        self.table = table
        self.iceberg_conn_id = iceberg_conn_id
        self.after_snapshot_id = after_snapshot_id
        self.operation = operation
        self.summary = summary
        self.branch = branch
        self.deferrable = deferrable
        self.poll_retries = poll_retries

    def _trigger(self, baseline: int | PendingBaseline | None) -> IcebergSnapshotTrigger:
        pending = baseline if isinstance(baseline, PendingBaseline) else None
        return IcebergSnapshotTrigger(
            table=self.table,
            iceberg_conn_id=self.iceberg_conn_id,
            after_snapshot_id=None if pending else baseline,
            operation=self.operation or None,
            summary=dict(self.summary or {}),
            branch=self.branch or None,
            poll_interval=self.poke_interval,
            baseline_at_start=False,  # the sensor fixed its baseline in execute, before deferring
            baseline_at_ms=pending.started_ms if pending else None,  # ...or the trigger reads it back
            poll_retries=self.poll_retries,
            error_event=True,  # giving up fails this task with the trigger's reason
        )

    # ------------------------------------------------------------------ the baseline

    def baseline(self, context: Context) -> int | PendingBaseline | None:
        """The snapshot to wait past: the given one, else the one kept for this task instance.

        Stored on the first poke (task state store), or, without a store, the head when this
        try's first poke started. ``None``: the table did not exist or had no snapshot then,
        so its first snapshot counts. A :class:`PendingBaseline` when the catalog did not answer.
        """
        given = to_snapshot_id(self.after_snapshot_id, "after_snapshot_id")
        if given is not None:
            return given
        store = context.get("task_state_store")
        if store is not None:
            return self._stored_baseline(context, store)
        started = self._first_poke_started(context)
        if started is not None:
            started_ms = int(started.timestamp() * 1000)
            head = self._read_baseline_or_pending(at_ms=started_ms, started_ms=started_ms)
            self.log.info("The head of %s when the first poke started (%s): %s", self.table, started, head)
            return head
        return self._read_baseline_or_pending(at_ms=None, started_ms=_now_ms())

    def _stored_baseline(self, context: Context, store: Any) -> int | PendingBaseline | None:
        generation = first_try_since_clear(context, self.retries or 0)
        kept = store.get(BASELINE_KEY)
        if (
            isinstance(kept, dict)
            and kept.get("first_try") == generation
            and kept.get("watch") == self._watch()
        ):
            if "snapshot_id" in kept:
                self.log.info(
                    "Kept baseline of %s (stored by try %s): %s", self.table, generation, kept["snapshot_id"]
                )
                return kept["snapshot_id"]
            if "pending_since_ms" in kept:  # the first try could not read it; the first poll that can will
                return PendingBaseline(int(kept["pending_since_ms"]))
        baseline = self._read_baseline_or_pending(at_ms=None, started_ms=_now_ms())
        self._store(context, baseline, generation)
        return baseline

    def _store(
        self, context: Context, baseline: int | PendingBaseline | None, generation: int | None = None
    ) -> None:
        from airflow.sdk.execution_time.context import NEVER_EXPIRE

        store = context.get("task_state_store")
        if store is None:
            return
        kept: dict[str, Any] = {
            "first_try": generation
            if generation is not None
            else first_try_since_clear(context, self.retries or 0),
            "watch": self._watch(),
        }
        if isinstance(baseline, PendingBaseline):
            kept["pending_since_ms"] = baseline.started_ms
        else:
            kept["snapshot_id"] = baseline
        # the row goes with its DAG run; expiring it earlier would lose the baseline of a long wait
        store.set(BASELINE_KEY, kept, retention=NEVER_EXPIRE)

    def _watch(self) -> dict[str, Any]:
        return {"table": self.table, "branch": self.branch or None, "conn_id": self.iceberg_conn_id}

    def _first_poke_started(self, context: Context) -> datetime | None:
        """When this try's first poke started, in reschedule mode after the first poke; else None."""
        if not self.reschedule:
            return None
        first_reschedule_date = getattr(context.get("ti"), "get_first_reschedule_date", None)
        return first_reschedule_date(context) if first_reschedule_date is not None else None

    def _read_baseline_or_pending(self, at_ms: int | None, started_ms: int) -> int | PendingBaseline | None:
        """The baseline read now (at ``at_ms``), or, the catalog down, one pending since ``started_ms``."""
        from airflow_iceberg.catalog.transient_errors import is_transient_error

        try:
            return self._read_baseline(at_ms)
        except Exception as error:
            if not is_transient_error(error):
                raise
            self.log.warning(
                "Could not read the baseline of %s (%s: %s); it will be the head the table had at "
                "%s, read back once the catalog answers",
                self.table,
                type(error).__name__,
                error,
                datetime.fromtimestamp(started_ms / 1000).astimezone().isoformat(),
            )
            return PendingBaseline(started_ms)

    def _read_baseline(self, at_ms: int | None = None) -> int | None:
        """The table's baseline now (or as it was at ``at_ms``); None if the table does not exist."""
        config = IcebergCatalogHook(iceberg_conn_id=self.iceberg_conn_id).catalog_config
        return self._trigger(None).read_baseline(config, at_ms)

    # ------------------------------------------------------------------ waiting

    def execute(self, context: Context) -> Any:
        self._baseline_id = self.baseline(context)
        self.log.info("Waiting for %s to gain a snapshot after %s", self.table, self._baseline_id)
        if not self.deferrable:
            return super().execute(context)
        timeout = timedelta(seconds=self.timeout) if self.timeout else None
        self.defer(trigger=self._trigger(self._baseline_id), method_name="execute_complete", timeout=timeout)
        return None

    def poke(self, context: Context) -> Any:
        from airflow.providers.common.compat.sdk import PokeReturnValue

        from airflow_iceberg.catalog.transient_errors import is_transient_error

        config = IcebergCatalogHook(iceberg_conn_id=self.iceberg_conn_id).catalog_config
        try:
            if isinstance(self._baseline_id, PendingBaseline):
                pending = self._baseline_id
                self._baseline_id = self._trigger(None).read_baseline(config, pending.started_ms)
                self.log.info("Baseline of %s (its head at the start): %s", self.table, self._baseline_id)
                self._store(context, self._baseline_id)
            found = self._trigger(self._baseline_id).poll(config, self._baseline_id)
        except Exception as error:
            if not is_transient_error(error):
                raise
            reason = f"{type(error).__name__}: {error}"
            self.log.warning("Could not read %s (%s); trying again at the next poke", self.table, reason)
            return PokeReturnValue(is_done=False)
        return PokeReturnValue(is_done=found is not None, xcom_value=found)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("status") != "success":
            reason = event.get("message") or event
            raise IcebergJobError(f"waiting for a snapshot of {self.table} failed: {reason}")
        self.log.info("%s has snapshot %s (%s)", self.table, event["snapshot_id"], event["operation"])
        return event


def _now_ms() -> int:
    return int(time.time() * 1000)

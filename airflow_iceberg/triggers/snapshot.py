"""Fire when an Iceberg table gains a new snapshot, whoever wrote it: a deferrable sensor's trigger
and an ``AssetWatcher`` event trigger.

It polls the table's metadata through pyiceberg (no Spark), from the ``iceberg_catalog``
connection: REST, Hive, Glue, JDBC (SQLite / PostgreSQL) and Hadoop catalogs. Blocking catalog
calls run in a worker thread, so the triggerer's event loop never waits on them.

A catalog that is down for a while (connection refused, timeouts, HTTP 5xx, throttling) does not
end the wait: the failed poll is logged and retried with exponential backoff, up to
``poll_retries`` failures in a row. A configuration error (a wrong connection, refused
credentials) fails at once, since waiting would not fix it. A trigger that takes its baseline
when it starts and finds the catalog down takes, once it answers, the snapshot that was the head
when the trigger started (from the table's snapshot log), so a commit made during the outage is
reported, not taken for the starting point.

Run by an ``AssetWatcher`` on Airflow 3.3+, the trigger keeps a *watermark* in the watched
asset's state store (:mod:`~airflow_iceberg.triggers.watermark_store`): the last snapshot of the
watched ref it looked at (:mod:`~airflow_iceberg.catalog.snapshot_watermark`). It then never
stops: it yields one event per matching commit, oldest first, and on every start resumes from the
stored watermark, so commits made while no triggerer ran are reported once it runs again, and a
restart reports nothing twice. The watermark of a commit is written, and acknowledged by Airflow,
*before* its event is yielded: the triggerer keeps a yielded event in memory and stores the asset
event up to a couple of seconds later, so a triggerer killed in that interval loses the event
(at most once; never twice). Without a state store (the deferrable sensor; Airflow < 3.3) the
trigger yields one event and returns, as before.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_iceberg.catalog.snapshot_watermark import Watermark
from airflow_iceberg.hooks.iceberg_catalog import IcebergCatalogHook
from airflow_iceberg.triggers.watermark_store import SeveralAssetsError, WatermarkStore

DEFAULT_POLL_INTERVAL = 60.0
#: Failed polls in a row that the trigger waits out before it gives up.
DEFAULT_POLL_RETRIES = 10
#: The longest wait between two retries of a failed poll (unless the poll interval is longer).
MAX_RETRY_DELAY = 300.0


def _operations(operation: str | Sequence[str] | None) -> tuple[str, ...]:
    if not operation:
        return ()
    return (operation,) if isinstance(operation, str) else tuple(operation)


def retry_delay(poll_interval: float, failures: int) -> float:
    """Seconds before retrying after ``failures`` failed polls in a row: the interval, doubled each time.

    Capped at :data:`MAX_RETRY_DELAY` (or the poll interval, if that is longer), so a catalog
    that comes back is noticed soon.
    """
    return min(poll_interval * 2 ** (failures - 1), max(poll_interval, MAX_RETRY_DELAY))


class GaveUp(Exception):
    """The catalog failed ``poll_retries`` polls in a row; ``payload`` is the error event to yield."""

    def __init__(self, payload: dict[str, Any]) -> None:
        super().__init__(payload["message"])
        self.payload = payload


class IcebergSnapshotTrigger(BaseEventTrigger):
    """Yield one event, the newest matching snapshot, once the table has one after the baseline.

    The event's payload describes that snapshot (``snapshot_id``, ``operation``, ``summary`` ...)
    and lists, in ``matching_snapshot_ids``, every matching snapshot since the baseline, oldest
    first, for when several commits land between two polls.

    Given an asset state store (an ``AssetWatcher`` on Airflow 3.3+), it yields instead one event
    per matching commit (``matching_snapshot_ids`` is that snapshot alone) and keeps running,
    keeping its watermark in the store and resuming from it whenever it starts (see the module).

    :param table: ``namespace.table`` (or ``catalog.namespace.table``).
    :param iceberg_conn_id: The ``iceberg_catalog`` connection of the table's catalog.
    :param after_snapshot_id: Only snapshots committed after this one count. ``None``: the head
        when the trigger starts (for an ``AssetWatcher``: each time it starts watching; for a
        branch that does not exist yet, the table's newest snapshot), or, with
        ``baseline_at_start=False``, every snapshot (the table's first one fires). With an asset
        state store these only place the first watermark; once one is stored, it wins.
    :param baseline_at_start: See ``after_snapshot_id``. Default True.
    :param baseline_at_ms: With ``after_snapshot_id=None``: the wait started at this time
        (milliseconds since the epoch) but could not read the table then; the baseline is the
        head the table had at that time, read back from its snapshot log at the first poll that
        succeeds. The deferrable sensor passes it when the catalog was down as it started.
    :param operation: Only snapshots with this operation (or one of these): ``append``,
        ``overwrite``, ``delete``, ``replace``.
    :param summary: Only snapshots whose summary has all these entries, e.g.
        ``{"airflow.dag-id": "load_orders"}`` or a writer's own ``snapshot-property``.
    :param branch: Watch this branch's head instead of the main one.
    :param poll_interval: Seconds between two reads of the table's metadata.
    :param poll_retries: How many polls in a row may fail for a transient reason (the catalog
        unreachable, timing out, answering 5xx or 429) before the trigger gives up. Each failure
        is logged; the retries wait ``poll_interval``, then twice as long each time, up to
        5 minutes. Default 10 (about 40 minutes of outage at the default interval).
    :param error_event: What giving up does. False (default): raise the last error, which fails
        the trigger (an ``AssetWatcher``'s trigger must not yield anything but commits: each of
        its events becomes an asset event). True: yield ``{"status": "error", "table", "message",
        "failed_polls", "after_snapshot_id"}``, which :class:`IcebergSnapshotSensor` turns into a
        task failure that says what happened.
    """

    def __init__(
        self,
        *,
        table: str,
        iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
        after_snapshot_id: int | None = None,
        operation: str | Sequence[str] | None = None,
        summary: Mapping[str, str] | None = None,
        branch: str | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        baseline_at_start: bool = True,
        poll_retries: int = DEFAULT_POLL_RETRIES,
        error_event: bool = False,
        baseline_at_ms: int | None = None,
    ) -> None:
        super().__init__()
        self.table = table
        self.iceberg_conn_id = iceberg_conn_id
        self.after_snapshot_id = int(after_snapshot_id) if after_snapshot_id is not None else None
        self.operation = list(_operations(operation))
        self.summary = dict(summary or {})
        self.branch = branch
        self.poll_interval = float(poll_interval)
        self.baseline_at_start = bool(baseline_at_start)
        self.poll_retries = int(poll_retries)
        self.error_event = bool(error_event)
        self.baseline_at_ms = int(baseline_at_ms) if baseline_at_ms is not None else None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table": self.table,
                "iceberg_conn_id": self.iceberg_conn_id,
                "after_snapshot_id": self.after_snapshot_id,
                "operation": self.operation,
                "summary": self.summary,
                "branch": self.branch,
                "poll_interval": self.poll_interval,
                "baseline_at_start": self.baseline_at_start,
                "poll_retries": self.poll_retries,
                "error_event": self.error_event,
                "baseline_at_ms": self.baseline_at_ms,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        accessor = getattr(self, "asset_state_store", None)  # set by the triggerer for an AssetWatcher
        if accessor is not None:
            store = WatermarkStore(accessor, self.watch())
            try:
                watermark = await store.load()
            except SeveralAssetsError:
                self.log.warning(
                    "The trigger on %s is shared by several assets (equal arguments); it keeps no "
                    "watermark, so commits made while no triggerer runs are not reported",
                    self.table,
                )
            else:
                async for event in self.run_with_watermark(store, watermark):
                    yield event
                return
        async for event in self.run_from_baseline():
            yield event

    def watch(self) -> dict[str, Any]:
        """What this trigger reports: its state store key and stored value derive from it."""
        return {
            "conn_id": self.iceberg_conn_id,
            "table": self.table,
            "branch": self.branch or None,
            "operation": sorted(self.operation),
            "summary": self.summary,
        }

    # ------------------------------------------------------------------ with a watermark (AssetWatcher)

    async def run_with_watermark(
        self, store: WatermarkStore, watermark: Watermark | None
    ) -> AsyncIterator[TriggerEvent]:
        """Report each matching commit after ``watermark`` (or the baseline) as one event, forever."""
        from airflow_iceberg.catalog.config import config_from_connection

        started_ms = int(time.time() * 1000)
        connection = await IcebergCatalogHook.aget_connection(self.iceberg_conn_id)
        config = config_from_connection(connection)
        try:
            if watermark is None:
                # with the catalog down at the start, the baseline is its head at the start
                watermark = await self.retrying(
                    functools.partial(self.initial_watermark, config, self.baseline_at_ms),
                    None,
                    after_failure=functools.partial(
                        self.initial_watermark,
                        config,
                        self.baseline_at_ms or (started_ms if self.baseline_at_start else None),
                    ),
                )
                await store.save(watermark)
                self.log.info("Watching %s from snapshot %s (no watermark kept yet)", self.table, watermark)
            else:
                self.log.info("Resuming the watch of %s from its watermark %s", self.table, watermark)
            while True:
                watermark = await self.moved_on(store, watermark) or watermark
                found, head = await self.retrying(
                    functools.partial(self.poll_since, config, watermark), watermark.snapshot_id
                )
                for payload, reported in found:
                    if await self.moved_on(store, watermark):
                        break  # another instance reported it meanwhile: poll again from its watermark
                    await store.save(reported)  # acknowledged by Airflow before the event leaves
                    watermark = reported
                    self.log.info("%s has a new snapshot %s", self.table, payload["snapshot_id"])
                    yield TriggerEvent(payload)
                else:
                    if head != watermark and not await self.moved_on(store, watermark):
                        await store.save(head)  # commits past the last match that fail the filters
                        watermark = head
                await asyncio.sleep(self.poll_interval)
        except GaveUp as gave_up:
            yield TriggerEvent(gave_up.payload)

    async def moved_on(self, store: WatermarkStore, watermark: Watermark) -> Watermark | None:
        """The stored watermark, when another instance of this watch has moved it off ``watermark``.

        Two instances of one watch run at once for a while when a DAG change replaces a watcher's
        trigger (the old one runs until its triggerer's next loop) or a triggerer whose heartbeat
        is late is taken over while it still runs. Each re-reads the store before it reports, so
        a commit the other reported is not reported again. The store has no compare-and-set: two
        instances reading it in the same instant (one round trip to Airflow) can still both report.
        ``None``: the store holds ``watermark``, or nothing (a row deleted through the API).
        """
        stored = await store.load()
        return stored if stored is not None and stored != watermark else None

    async def retrying(
        self, read: Callable[[], Any], baseline: int | None, after_failure: Callable[[], Any] | None = None
    ) -> Any:
        """``read()`` in a worker thread, waiting out transient catalog errors with backoff.

        Once a call has failed, the retries call ``after_failure`` instead (when given). Past
        ``poll_retries`` failures in a row, raises the error, or (``error_event``) :class:`GaveUp`.
        """
        from airflow_iceberg.catalog.transient_errors import is_transient_error

        failures = 0
        while True:
            try:
                result = await asyncio.to_thread(read)
            except Exception as error:
                if not is_transient_error(error):
                    raise
                failures += 1
                read = after_failure or read
                gave_up = self.after_failure(error, failures, baseline)
                if gave_up is not None:
                    raise GaveUp(gave_up) from error
                await asyncio.sleep(retry_delay(self.poll_interval, failures))
                continue
            if failures:
                self.log.info("%s can be read again after %d failed polls", self.table, failures)
            return result

    def initial_watermark(self, config: Any, at_ms: int | None) -> Watermark:
        """Where a watch with no stored watermark starts: ``after_snapshot_id``, or the baseline.

        The baseline is the head now (or at ``at_ms``), or, with ``baseline_at_start=False``,
        nothing: every snapshot is new. A table that does not exist yet: nothing seen either.
        """
        from pyiceberg.exceptions import NoSuchTableError

        from airflow_iceberg.catalog.new_snapshots import baseline_snapshot_id
        from airflow_iceberg.catalog.pyiceberg_tables import load_table
        from airflow_iceberg.catalog.snapshot_watermark import watermark_at

        try:
            table = load_table(config, self.table)
        except NoSuchTableError:
            return watermark_at(None, None)
        if self.after_snapshot_id is not None:
            return watermark_at(table, self.after_snapshot_id)
        if self.baseline_at_start or at_ms is not None:
            return watermark_at(table, baseline_snapshot_id(table, self.branch, at_ms))
        return watermark_at(table, None)

    def poll_since(
        self, config: Any, watermark: Watermark
    ) -> tuple[list[tuple[dict[str, Any], Watermark]], Watermark]:
        """The matching commits since ``watermark``, oldest first, each with its watermark; and the next one.

        The next watermark is the newest new snapshot, matching or not (``watermark`` itself when
        nothing is new, or the table does not exist). Catalog errors are raised.
        """
        from pyiceberg.exceptions import NoSuchTableError

        from airflow_iceberg.catalog.new_snapshots import describe_snapshot, matches
        from airflow_iceberg.catalog.pyiceberg_tables import load_table
        from airflow_iceberg.catalog.snapshot_watermark import snapshots_since, watermark_of

        try:
            table = load_table(config, self.table)
        except NoSuchTableError:
            return [], watermark
        new = snapshots_since(table, watermark, self.branch)
        if not new:
            return [], watermark
        found = []
        for snapshot in new:
            described = describe_snapshot(self.table, snapshot)
            if matches(described, tuple(self.operation), self.summary):
                payload = {"status": "success", **described, "matching_snapshot_ids": [snapshot.snapshot_id]}
                found.append((payload, watermark_of(table, snapshot)))
        return found, watermark_of(table, new[-1])

    # ------------------------------------------------------------ from a baseline (sensor; Airflow < 3.3)

    async def run_from_baseline(self) -> AsyncIterator[TriggerEvent]:
        """Yield one event, for the newest matching snapshot after the baseline, and return."""
        from airflow_iceberg.catalog.config import config_from_connection
        from airflow_iceberg.catalog.transient_errors import is_transient_error

        started_ms = int(time.time() * 1000)
        connection = await IcebergCatalogHook.aget_connection(self.iceberg_conn_id)
        config = config_from_connection(connection)
        baseline = self.after_snapshot_id
        since_ms = self.baseline_at_ms
        needs_baseline = baseline is None and (self.baseline_at_start or since_ms is not None)
        failures = 0
        while True:
            try:
                if needs_baseline:
                    baseline = await asyncio.to_thread(self.read_baseline, config, since_ms)
                    needs_baseline = False
                    self.log.info("Waiting for %s to gain a snapshot after %s", self.table, baseline)
                    if since_ms is None:  # the head now: the first look only fixes the baseline
                        failures = 0
                        await asyncio.sleep(self.poll_interval)
                        continue
                found = await asyncio.to_thread(self.poll, config, baseline)
            except Exception as error:
                if not is_transient_error(error):
                    raise  # a configuration error: waiting would not fix it
                if needs_baseline and since_ms is None:  # take the head at the start once it answers
                    since_ms = started_ms
                failures += 1
                gave_up = self.after_failure(error, failures, baseline)
                if gave_up is not None:
                    yield TriggerEvent(gave_up)
                    return
                await asyncio.sleep(retry_delay(self.poll_interval, failures))
                continue
            if failures:
                self.log.info("%s can be read again after %d failed polls", self.table, failures)
                failures = 0
            if found is not None:
                self.log.info(
                    "%s has a new snapshot %s (%s)", self.table, found["snapshot_id"], found["operation"]
                )
                yield TriggerEvent({"status": "success", **found})
                return
            await asyncio.sleep(self.poll_interval)

    def after_failure(self, error: Exception, failures: int, baseline: int | None) -> dict[str, Any] | None:
        """Log a failed poll; past ``poll_retries`` give up: return the error event, or raise it."""
        if failures <= self.poll_retries:
            self.log.warning(
                "Polling %s failed (%s: %s); retry %d of %d in %.1f s",
                self.table,
                type(error).__name__,
                error,
                failures,
                self.poll_retries,
                retry_delay(self.poll_interval, failures),
            )
            return None
        message = (
            f"gave up waiting for a snapshot of {self.table}: the catalog failed "
            f"{failures} polls in a row, the last with {type(error).__name__}: {error}"
        )
        self.log.error("%s", message)
        if not self.error_event:
            raise error
        return self.error_payload(message, failures, baseline)

    def error_payload(self, message: str, failures: int, baseline: int | None) -> dict[str, Any]:
        """The event of a trigger that gave up (``error_event=True``): what, why, and since when."""
        return {
            "status": "error",
            "table": self.table,
            "message": message,
            "failed_polls": failures,
            "after_snapshot_id": baseline,
        }

    def read_baseline(self, config: Any, at_ms: int | None = None) -> int | None:
        """The baseline of a wait that starts now, or that started at ``at_ms``; None without a table.

        See :func:`~airflow_iceberg.catalog.new_snapshots.baseline_snapshot_id`. Catalog errors are raised.
        """
        from pyiceberg.exceptions import NoSuchTableError

        from airflow_iceberg.catalog.new_snapshots import baseline_snapshot_id
        from airflow_iceberg.catalog.pyiceberg_tables import load_table

        try:
            table = load_table(config, self.table)
        except NoSuchTableError:
            return None
        return baseline_snapshot_id(table, self.branch, at_ms)

    def poll(self, config: Any, baseline: int | None) -> dict[str, Any] | None:
        """The newest snapshot after ``baseline`` that passes the filters, naming every such one.

        A table that does not exist (yet) has no new snapshot. Catalog errors are raised.
        """
        from pyiceberg.exceptions import NoSuchTableError

        from airflow_iceberg.catalog.new_snapshots import describe_snapshot, matches, snapshots_after
        from airflow_iceberg.catalog.pyiceberg_tables import load_table

        try:
            table = load_table(config, self.table)
        except NoSuchTableError:
            return None
        described = [describe_snapshot(self.table, s) for s in snapshots_after(table, baseline, self.branch)]
        found = [d for d in described if matches(d, tuple(self.operation), self.summary)]
        if not found:
            return None
        # one event per poll: the newest match, naming every match since the baseline
        return {**found[-1], "matching_snapshot_ids": [d["snapshot_id"] for d in found]}

"""Wait for an Iceberg table to gain a new snapshot, deferring to the triggerer while it waits."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseSensorOperator

from airflow_iceberg.exceptions import IcebergJobError
from airflow_iceberg.hooks.iceberg_catalog import IcebergCatalogHook
from airflow_iceberg.timestamps import to_snapshot_id
from airflow_iceberg.triggers.snapshot import DEFAULT_POLL_INTERVAL, IcebergSnapshotTrigger

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context


class IcebergSnapshotSensor(BaseSensorOperator):
    """Succeed when ``table`` has a snapshot newer than when the sensor started (or ``after_snapshot_id``).

    Any writer counts (Spark, Flink, pyiceberg, another Airflow): the sensor reads the table's
    metadata with pyiceberg. The XCom is the newest matching snapshot: ``snapshot_id``,
    ``operation``, ``summary``, ``sequence_number``, ``timestamp_ms``.

    :param table: ``namespace.table`` (or ``catalog.namespace.table``). (templated)
    :param iceberg_conn_id: The ``iceberg_catalog`` connection of the table's catalog. (templated)
    :param after_snapshot_id: Wait for a snapshot after this one; default: the head when the
        sensor starts. (templated)
    :param operation: Only this operation (or one of these): ``append``, ``overwrite``,
        ``delete``, ``replace``. (templated)
    :param summary: Only snapshots whose summary has all these entries. (templated)
    :param branch: Watch this branch instead of main. (templated)
    :param deferrable: Wait in the triggerer instead of a worker slot (default True).
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

    def _trigger(self, after_snapshot_id: int | None) -> IcebergSnapshotTrigger:
        return IcebergSnapshotTrigger(
            table=self.table,
            iceberg_conn_id=self.iceberg_conn_id,
            after_snapshot_id=after_snapshot_id,
            operation=self.operation or None,
            summary=dict(self.summary or {}),
            branch=self.branch or None,
            poll_interval=self.poke_interval,
            baseline_at_start=False,  # the sensor fixed its baseline in execute, before deferring
        )

    def _baseline(self) -> int | None:
        """The snapshot to wait past: the given one, or the head now (before any wait starts)."""
        given = to_snapshot_id(self.after_snapshot_id, "after_snapshot_id")
        if given is not None:
            return given
        from pyiceberg.exceptions import NoSuchTableError

        from airflow_iceberg.catalog.pyiceberg_tables import head_snapshot_id, load_table

        try:
            table = load_table(
                IcebergCatalogHook(iceberg_conn_id=self.iceberg_conn_id).catalog_config, self.table
            )
        except NoSuchTableError:
            return None
        return head_snapshot_id(table, self.branch or None)

    def execute(self, context: Context) -> Any:
        self._baseline_id = self._baseline()
        self.log.info("Waiting for %s to gain a snapshot after %s", self.table, self._baseline_id)
        if not self.deferrable:
            return super().execute(context)
        timeout = timedelta(seconds=self.timeout) if self.timeout else None
        self.defer(trigger=self._trigger(self._baseline_id), method_name="execute_complete", timeout=timeout)
        return None

    def poke(self, context: Context) -> Any:
        from airflow.providers.common.compat.sdk import PokeReturnValue

        trigger = self._trigger(self._baseline_id)
        config = IcebergCatalogHook(iceberg_conn_id=self.iceberg_conn_id).catalog_config
        _, found = trigger._poll(config, self._baseline_id)
        return PokeReturnValue(is_done=found is not None, xcom_value=found)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("status") != "success":
            raise IcebergJobError(f"waiting for a snapshot of {self.table} failed: {event}")
        self.log.info("%s has snapshot %s (%s)", self.table, event["snapshot_id"], event["operation"])
        return event

"""Run only the upkeep a table needs: read its health from metadata, then branch to the steps it needs.

An upkeep DAG on a cron compacts and expires whether or not anything changed. This operator reads
the table's metadata with pyiceberg (no Spark, see :mod:`airflow_iceberg.catalog.table_health`),
decides for each step whether Iceberg's procedure would find work, logs each decision with its
reason, returns the report as its XCom, and skips the upkeep tasks that are not needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseOperator, SkipMixin

from airflow_iceberg.catalog.table_health import STEPS, assess
from airflow_iceberg.exceptions import InvalidSpecError
from airflow_iceberg.hooks.iceberg_catalog import IcebergCatalogHook
from airflow_iceberg.operators.rendered import as_branch, as_dict, as_int

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context


class IcebergTableHealthOperator(BaseOperator, SkipMixin):
    """Decide which upkeep ``table`` needs, from its metadata, and skip the upkeep tasks it does not.

    Each step is judged by the rule of the Iceberg procedure it stands for, with the same options,
    so a step is skipped only when the procedure would find nothing to do
    (docs/operators.md, "Health-driven upkeep"):

    - ``rewrite_data_files`` and ``rewrite_position_delete_files``: the bin-pack planner's size and
      delete rules, per partition of the files ``where`` selects;
    - ``expire_snapshots``: the snapshots ``older_than``/``retain_last`` would remove;
    - ``rewrite_manifests``: ``max_manifests`` data manifests or more.

    :param table: ``namespace.table`` (or ``catalog.namespace.table``). (templated)
    :param steps: Which steps to judge, and the downstream task(s) that run each: for example
        ``{"rewrite_data_files": "compact_recent_days"}``. The tasks of a step judged not needed
        are skipped; other tasks are left alone. Give a task after a skipped one
        ``trigger_rule="none_failed"`` to let it run. Without ``steps`` every step is judged and
        nothing is skipped.
    :param where: The rewrite's ``where`` (Spark's ``DATE'…'`` literals are read as dates). (templated)
    :param branch: Judge this branch's head instead of ``main``'s (branch-scoped upkeep). (templated)
    :param options: The data-file rewrite's options, as given to it: ``min-input-files``,
        ``target-file-size-bytes``, ``min-file-size-bytes``, ``max-file-size-bytes``,
        ``delete-file-threshold``, ``delete-ratio-threshold``. (templated)
    :param delete_options: The position-delete rewrite's options, as given to it. (templated)
    :param older_than: The expiry's cutoff, as given to it (default: the table's
        ``history.expire.max-snapshot-age-ms`` before now). (templated)
    :param retain_last: The expiry's ``retain_last`` (default: the table's
        ``history.expire.min-snapshots-to-keep``, 1). (templated)
    :param max_manifests: Data manifests from which ``rewrite_manifests`` is needed (100). (templated)
    :param iceberg_conn_id: The ``iceberg_catalog`` connection (pyiceberg catalogs: REST, Hive, Glue,
        JDBC, Hadoop).
    """

    template_fields: Sequence[str] = (
        "table",
        "where",
        "branch",
        "options",
        "delete_options",
        "older_than",
        "retain_last",
        "max_manifests",
    )
    ui_color = "#c6e3f7"

    def __init__(
        self,
        *,
        table: str,
        steps: Mapping[str, str | Sequence[str]] | None = None,
        where: str | None = None,
        branch: str | None = None,
        options: Mapping[str, Any] | str | None = None,
        delete_options: Mapping[str, Any] | str | None = None,
        older_than: Any = None,
        retain_last: Any = None,
        max_manifests: Any = None,
        iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        unknown = sorted(set(steps or {}) - set(STEPS))
        if unknown:
            raise InvalidSpecError(f"steps: unknown upkeep step(s) {unknown}; the steps are {list(STEPS)}")
        self.steps = {
            step: [task_ids] if isinstance(task_ids, str) else list(task_ids)
            for step, task_ids in (steps or {}).items()
        }
        self.table = table
        self.where = where
        self.branch = branch
        self.options = options
        self.delete_options = delete_options
        self.older_than = older_than
        self.retain_last = retain_last
        self.max_manifests = max_manifests
        self.iceberg_conn_id = iceberg_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_iceberg.catalog.pyiceberg_tables import load_table

        config = IcebergCatalogHook(iceberg_conn_id=self.iceberg_conn_id).catalog_config
        table = load_table(config, self.table)
        report = assess(
            table,
            branch=as_branch(self.branch),
            where=self.where or None,
            options=as_dict(self.options, "options"),
            delete_options=as_dict(self.delete_options, "delete_options"),
            older_than=self.older_than,
            retain_last=as_int(self.retain_last, "retain_last"),
            max_manifests=as_int(self.max_manifests, "max_manifests"),
            steps=self.steps or STEPS,
        )
        report["table"] = self.table
        self.log.info(
            "Health of %s at snapshot %s: %s", self.table, report["snapshot_id"], report["measured"]
        )
        for step, decision in report["steps"].items():
            verdict = "needed" if decision["needed"] else "not needed"
            self.log.info("%s: %s (%s)", step, verdict, decision["reason"])
        if not self.steps:
            return report
        named = {task for tasks in self.steps.values() for task in tasks}
        outside = sorted(named - set(self.get_flat_relative_ids(upstream=False)))
        if outside:
            raise InvalidSpecError(f"steps: {outside} must be downstream of {self.task_id}")
        needed = {
            task for step, tasks in self.steps.items() if report["steps"][step]["needed"] for task in tasks
        }
        report["run"] = sorted(needed)
        report["skipped"] = sorted(named - needed)
        if report["skipped"]:
            # skip() raises (Airflow 3 skips through the task runner, which then pushes no return
            # value), so the report is pushed first.
            context["ti"].xcom_push(key="return_value", value=report)
            self.skip(context["ti"], [self.dag.get_task(task) for task in report["skipped"]])
        return report

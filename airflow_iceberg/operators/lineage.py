"""Assets and OpenLineage for the operators: which tables a task reads and writes, and at what snapshot.

A table's asset URI needs its catalog's identity, which is in the connection, and DAG parsing
must not look connections up. So at parse time an operator only declares an
:class:`~airflow.sdk.AssetAlias` per table (``iceberg-table:<conn id>:<table>``; a templated
table or connection id is a different table in each DAG that renders it, so its alias is the
task's own: ``iceberg-table:<conn id>:<template text>@<dag id>:<task id>``). At run time,
*before* the job starts, every written table's ``iceberg://`` URI is named from the connections
(:meth:`TableLineageMixin.plan_lineage`): a connection whose catalog cannot be named fails the
task there, while nothing is committed.
Once the job has committed, that asset is attached to its alias with an event whose extra is the
commit: snapshot id, operation, counts, commit id. Airflow then triggers every DAG scheduled on
the asset (or on the alias).

With ``partition_events`` the commit goes instead to the table's asset itself, one event per
partition it changed, each with its ``partition_key`` (:meth:`TableLineageMixin.emit_partition_events`):
Airflow attaches per-event keys to concrete assets only, never to an alias's events.

After the commit nothing here fails the task (:meth:`TableLineageMixin.finish_lineage`): the
table has changed, and a failed task would tell Airflow, and its retries, that it has not. An
asset event or OpenLineage dataset that cannot be made is logged as a warning that says why and
what it means.

:class:`TableLineageMixin` is the whole mechanism; an operator opts in with the class
attributes ``writes_table`` (its ``table`` is an outlet) and ``reads_table`` (an inlet).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_iceberg.assets import catalog_identity, split_table, table_asset_uri
from airflow_iceberg.exceptions import InvalidCatalogConfigError, InvalidSpecError
from airflow_iceberg.jobs.spec.request import COMMIT_ID_PROPERTY
from airflow_iceberg.naming import normalize_location

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

    from airflow_iceberg.catalog.config import CatalogConfig

ALIAS_PREFIX = "iceberg-table"
#: Keys of a commit result copied into the asset event's extra.
EVENT_KEYS = (
    "snapshot_id",
    "parent_snapshot_id",
    "operation",
    "committed_at",
    "added_records",
    "deleted_records",
    "total_records",
    "added_data_files",
    "deleted_data_files",
    "total_data_files",
    "reused_earlier_commit",
)
#: The longest partition key Airflow stores (its ``StringID`` column).
MAX_PARTITION_KEY_LENGTH = 250
#: What the log says when a commit's asset event could not be added (table, reason, snapshot,
#: asset URI, alias, extra): the commit stands, the DAGs scheduled on the asset do not run.
SKIPPED_EVENT_WARNING = (
    "No asset event for %s: %s. Snapshot %s is committed and stays committed, but DAGs scheduled "
    "on %s (or on the alias %s) are not triggered by it, and the asset's history does not show "
    "it. To trigger them, create the event by hand (the asset's page in the UI, or "
    "POST /api/v2/assets/events) with this extra: %s"
)


def airflow_accepts_partition_key(key: str) -> bool:
    """Whether ``add_partitions`` takes the key: not blank, at most :data:`MAX_PARTITION_KEY_LENGTH`.

    An identity partition on ``''`` or ``' '`` has such a key; Airflow refuses the whole call for it.
    """
    return bool(key.strip()) and len(key) <= MAX_PARTITION_KEY_LENGTH


def check_partition_events_supported() -> None:
    """Refuse ``partition_events`` at parse time on a task SDK without per-event partition keys.

    Such an Airflow would register the commit as one event without a key (or with the run's),
    which no ``PartitionedAssetTimetable`` could map to the partitions that changed.
    """
    from airflow.sdk.execution_time.context import OutletEventAccessor

    if not hasattr(OutletEventAccessor, "add_partitions"):
        raise InvalidSpecError(
            "partition_events needs an Airflow whose task SDK attaches partition keys to asset "
            "events (OutletEventAccessor.add_partitions); this one does not: upgrade Airflow, or "
            "leave partition_events False for one event per commit on the table's alias"
        )


def table_alias_name(iceberg_conn_id: str, table: str, dag_id: str = "", task_id: str = "") -> str:
    """The alias an operator declares for ``table`` of the catalog behind ``iceberg_conn_id``.

    A plain table on a plain connection is one table wherever it is written, so every task that
    writes it shares the alias ``iceberg-table:<conn id>:<table>``. A templated one renders to a
    different table in each DAG (a DAG factory, a shared default), and Airflow names aliases
    globally, so its alias is the task's own: ``...@<dag id>:<task id>`` (neither id can hold
    ``@`` or ``:``). Otherwise one DAG's commit would trigger the DAGs scheduled on another's.
    """
    name = f"{ALIAS_PREFIX}:{iceberg_conn_id}:{table}"
    if is_templated(iceberg_conn_id) or is_templated(table):
        name = f"{name}@{dag_id}:{task_id}"
    return name


def is_templated(text: str) -> bool:
    """Whether Airflow renders ``text`` (it holds a Jinja expression, statement or comment)."""
    return any(marker in str(text) for marker in ("{{", "{%", "{#"))


def event_extra(table: str, commit: Mapping[str, Any]) -> dict[str, Any]:
    """The asset event's extra for one commit: what it committed, and the id that tags it."""
    extra = {key: commit[key] for key in EVENT_KEYS if commit.get(key) is not None}
    extra["table"] = table
    commit_id = (commit.get("summary") or {}).get(COMMIT_ID_PROPERTY)
    if commit_id:
        extra["commit_id"] = commit_id
    return extra


def committed_ref(commit: Mapping[str, Any]) -> str:
    """The branch a result's commit landed on: a publish's target, a branch write's branch, else ``main``."""
    return str(commit.get("target_branch") or commit.get("branch") or "main")


def catalog_of(table: str, configs: Mapping[str, CatalogConfig]) -> CatalogConfig:
    """The catalog of a table qualified by one of ``configs``' catalog names, else the first one."""
    catalog, _ = split_table(table, list(configs))
    return configs[catalog] if catalog else next(iter(configs.values()))


def table_asset_uri_in(table: str, configs: Mapping[str, CatalogConfig]) -> str:
    """The ``iceberg://`` URI of a table qualified by one of ``configs``' catalogs (else the first's)."""
    return table_asset_uri(catalog_of(table, configs), table)


@dataclass(frozen=True)
class WrittenTable:
    """A declared outlet alias, the qualified table it stands for in this run, and that table's URI.

    ``table`` and ``uri`` are None when an optional table (a templated ``sink_table``) rendered empty.
    """

    alias: str
    table: str | None
    uri: str | None


@dataclass(frozen=True)
class LineagePlan:
    """Every asset URI a task needs, named from its connections before its job runs.

    ``written`` follows the declared outlet aliases. ``uris`` has every table the task names
    (written, read, source) for the OpenLineage symlinks; a table that is only read and whose
    catalog cannot be named is missing from it, and its dataset then carries no symlink.
    """

    written: tuple[WrittenTable, ...] = ()
    uris: Mapping[str, str] = field(default_factory=dict)
    #: The ``catalog`` facet's fields of each table in ``uris`` (:func:`catalog_facet`).
    catalogs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: The task's catalogs by Spark catalog name, to name the tables a source query turns out to read.
    configs: Mapping[str, CatalogConfig] = field(default_factory=dict)


class TableLineageMixin:
    """Declare a task's tables as asset aliases; at run time emit their assets and OpenLineage facets.

    The host operator provides ``table``, ``iceberg_conn_id`` and ``inlets``/``outlets``; it calls
    :meth:`declare_table_assets` at the end of ``__init__``, :meth:`plan_lineage` before the job
    runs (with its catalogs by Spark catalog name) and :meth:`finish_lineage` after a successful
    job. Subclasses that write more tables call :meth:`declare_written_table` and override
    :meth:`written_commits` and :meth:`written_table_names` to match.
    """

    #: The task's ``table`` is written: declare it as an outlet and emit an asset event per commit.
    writes_table: ClassVar[bool] = False
    #: The task's ``table`` is read: declare it as an inlet.
    reads_table: ClassVar[bool] = False
    #: Emit one event per partition a commit changed, with its ``partition_key``, on the table's
    #: asset itself (:meth:`emit_partition_events`), instead of one event per commit on the alias.
    partition_events: bool = False

    table: str
    iceberg_conn_id: str
    inlets: list[Any]
    outlets: list[Any]

    def declare_table_assets(self) -> None:
        """Add the parse-time aliases to ``inlets`` / ``outlets`` (no connection is looked up).

        The alias names are kept in ``table_alias_names``: at run time ``table`` and
        ``iceberg_conn_id`` are rendered, while the aliases keep the names they were declared with.
        """
        from airflow.sdk import AssetAlias

        if self.reads_table:
            self.inlets = [*self.inlets, AssetAlias(self.alias_name(self.table))]
        self.table_alias_names = [self.alias_name(t) for t in self.written_tables()]
        self.outlets = [*self.outlets, *(AssetAlias(name) for name in self.table_alias_names)]

    def alias_name(self, table: str) -> str:
        """This task's alias for ``table`` (see :func:`table_alias_name`), by its DAG and task id."""
        dag_id, task_id = self.dag_id, self.task_id  # type: ignore[attr-defined]
        return table_alias_name(self.iceberg_conn_id, table, dag_id, task_id)

    def _convert__dag(self, dag: Any) -> Any:
        """Airflow's hook when the task is given its DAG: rename a templated table's alias after it.

        ``with DAG(...)`` and ``dag=`` set the DAG before the aliases are declared, but a task made
        outside a DAG and added later (``dag.add_task(task)``, ``task.dag = dag``) was named
        ``adhoc_<owner>`` when its aliases were declared; every such task would share them.
        """
        dag = super()._convert__dag(dag)  # type: ignore[misc]
        if dag is not None and hasattr(self, "table_alias_names"):
            self.rename_task_aliases(f"@{self.dag_id}:", f"@{dag.dag_id}:")  # type: ignore[attr-defined]
        return dag

    def rename_task_aliases(self, old: str, new: str) -> None:
        """Rename this task's own aliases (a templated table's, ``...@<dag id>:<task id>``)."""
        from airflow.sdk import AssetAlias

        suffix = self.task_id  # type: ignore[attr-defined]

        def renamed(name: str) -> str:
            if name.startswith(f"{ALIAS_PREFIX}:") and name.endswith(f"{old}{suffix}"):
                return name[: -len(old + suffix)] + new + suffix
            return name

        def aliases(items: list[Any]) -> list[Any]:
            return [
                AssetAlias(renamed(item.name)) if isinstance(item, AssetAlias) else item for item in items
            ]

        if old == new:
            return
        self.table_alias_names = [renamed(name) for name in self.table_alias_names]
        self.inlets = aliases(list(self.inlets))
        self.outlets = aliases(list(self.outlets))

    def written_tables(self) -> list[str]:
        """The tables this task commits to, as given (maybe templates); see :meth:`declare_written_table`."""
        return [self.table] if self.writes_table else []

    def declare_written_table(self, table: str) -> None:
        """Declare one more table this task commits to, e.g. a read's sink table."""
        from airflow.sdk import AssetAlias

        name = self.alias_name(table)
        self.table_alias_names = [*self.table_alias_names, name]
        self.outlets = [*self.outlets, AssetAlias(name)]

    def written_commits(self, result: Mapping[str, Any]) -> list[Mapping[str, Any] | None]:
        """The commit in the job's result for each of :meth:`written_tables`, in the same order."""
        return [result] if self.writes_table else []

    def written_table_names(self, spec: Any) -> list[str | None]:
        """The qualified table behind each of :meth:`written_tables`, from the (rendered) job spec."""
        return [spec.table] if self.writes_table else []

    def read_table_names(self, spec: Any) -> list[str]:
        """The qualified tables the job reads: a read's table, and a write's or merge's source table."""
        source = getattr(getattr(spec, "source", None), "table", None)
        return [*([spec.table] if self.reads_table else []), *([source] if source else [])]

    # ------------------------------------------------------------------ run time

    def plan_lineage(self, spec: Any, configs: Mapping[str, CatalogConfig]) -> LineagePlan:
        """Name each written table's asset before the job runs, so that a failure here changes nothing.

        A table's URI is a function of its connection and its name alone. A written table whose
        catalog cannot be named raises :class:`InvalidCatalogConfigError` naming the connection
        field; a table that is only read loses its OpenLineage symlink instead, with a warning.
        """
        written, uris = [], {}
        for alias, table in zip(self.table_alias_names, self.written_table_names(spec), strict=False):
            uri = None
            if table:
                try:
                    uri = uris[table] = table_asset_uri_in(table, configs)
                except ValueError as error:  # InvalidCatalogConfigError is one
                    raise InvalidCatalogConfigError(
                        f"{table}: cannot name its asset, so nothing was run: {error}"
                    ) from error
            written.append(WrittenTable(alias=alias, table=table, uri=uri))
        for table in self.read_table_names(spec):
            if table not in uris:
                try:
                    uris[table] = table_asset_uri_in(table, configs)
                except ValueError as error:
                    self.log.warning("No OpenLineage symlink for %s: %s", table, error)  # type: ignore[attr-defined]
        catalogs = {}
        for table in uris:
            try:
                catalogs[table] = catalog_facet(catalog_of(table, configs))
            except ValueError as error:  # only the facet is lost; the asset URI was named
                self.log.warning("No OpenLineage catalog facet for %s: %s", table, error)  # type: ignore[attr-defined]
        return LineagePlan(written=tuple(written), uris=uris, catalogs=catalogs, configs=dict(configs))

    def emit_table_events(self, context: Context, result: Mapping[str, Any], plan: LineagePlan) -> None:
        """Attach each committed table's asset, with the commit as extra, to its declared alias.

        A table whose event cannot be added is logged (:data:`SKIPPED_EVENT_WARNING`), and the
        other tables still get theirs.
        """
        from airflow.sdk import Asset, AssetAlias

        outlet_events = context.get("outlet_events")
        if outlet_events is None:
            return
        for written, commit in zip(plan.written, self.written_commits(result), strict=False):
            if not commit or commit.get("snapshot_id") is None or committed_ref(commit) != "main":
                continue  # nothing committed, or committed to an audit branch: readers of main see no change
            table = str(commit.get("table") or written.table)
            extra = event_extra(table, commit)
            try:
                if written.uri is None:
                    raise ValueError("no asset URI was named for it before the job ran")
                asset = Asset(name=written.uri, uri=written.uri)
                if self.partition_events:
                    self.emit_partition_events(outlet_events, asset, commit, extra)
                else:
                    outlet_events[AssetAlias(written.alias)].add(asset, extra=extra)
            except Exception as error:
                self.log.warning(  # type: ignore[attr-defined]
                    SKIPPED_EVENT_WARNING,
                    table,
                    _reason(error),
                    commit.get("snapshot_id"),
                    written.uri or "the table's asset",
                    written.alias,
                    extra,
                )
                continue
            self.log.info("Asset event for %s: %s (alias %s)", table, written.uri, written.alias)  # type: ignore[attr-defined]

    def emit_partition_events(
        self, outlet_events: Any, asset: Any, commit: Mapping[str, Any], extra: dict[str, Any]
    ) -> None:
        """One event on the table's asset per partition key of the commit, each with the commit's extra.

        Airflow attaches per-event partition keys only to a concrete asset among the task's
        outlets: an alias event takes the run's own key (``add_partitions`` refuses an alias). The
        URI is only known now, so the asset joins the outlets now; Airflow reads them when the task
        succeeds. A commit without keys (an unpartitioned table, a spec of buckets only) is one
        event, which Airflow gives the run's partition key, if the run has one.
        """
        if asset not in self.outlets:
            self.outlets = [*self.outlets, asset]
        listed = list(commit.get("partition_keys") or [])
        keys = [key for key in listed if airflow_accepts_partition_key(key)]
        if len(keys) < len(listed):  # add_partitions would refuse every key of the commit
            self.log.warning(  # type: ignore[attr-defined]
                "Partition keys that are empty, blank or longer than %s characters get no event: %s",
                MAX_PARTITION_KEY_LENGTH,
                sorted(set(listed) - set(keys)),
            )
        if commit.get("partition_keys_error"):
            self.log.warning(  # type: ignore[attr-defined]
                "The partitions snapshot %s of %s changed could not be listed (%s): its asset event "
                "carries no partition key, so DAGs on a PartitionedAssetTimetable do not see it",
                commit.get("snapshot_id"),
                extra.get("table"),
                commit["partition_keys_error"],
            )
        if commit.get("unkeyable_partitions"):
            self.log.warning(  # type: ignore[attr-defined]
                "Partitions that no key can name apart from another get no event (rename the value "
                "or partition by a time transform): %s",
                commit["unkeyable_partitions"],
            )
        accessor = outlet_events[asset]
        if keys:  # before the extra: a refused key must not leave a keyless event behind
            accessor.add_partitions(keys)
        accessor.extra = {**extra, "partition_count": len(keys)}
        self.log.info("Asset events for %s: %s, partitions %s", extra.get("table"), asset.uri, keys or "none")  # type: ignore[attr-defined]

    def finish_lineage(self, context: Context, plan: LineagePlan, spec: Any, result: dict[str, Any]) -> None:
        """After a successful job: emit asset events and keep the OpenLineage datasets. Never raises.

        Pops the job's ``lineage`` description from ``result`` (it is not part of the XCom). The
        job has committed by now, so an error here is a warning: failing the task would make
        Airflow, and a retry, take a changed table for an unchanged one.
        """
        described = result.pop("lineage", None) or {}
        try:
            self.emit_table_events(context, result, plan)
        except Exception as error:
            self.log.warning(  # type: ignore[attr-defined]
                "No asset events for this task's commits: %s. The commits stay, but DAGs scheduled on "
                "their tables' assets are not triggered by them",
                _reason(error),
                exc_info=True,
            )
        try:
            self.record_lineage(described, spec, result, plan)
        except Exception as error:
            self.log.warning(  # type: ignore[attr-defined]
                "No OpenLineage datasets for this task: %s. Its OpenLineage events name no tables; "
                "the commits and their asset events are not affected",
                _reason(error),
                exc_info=True,
            )

    # ------------------------------------------------------------------ OpenLineage

    #: The task's ``table`` is read as well as written (a merge, a delete): it is an input too.
    reads_written_table: ClassVar[bool] = False

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage inputs, outputs and run facets, as openlineage-spark names and describes them.

        See :mod:`airflow_iceberg.operators.openlineage_datasets` for each dataset's facets.
        """
        from airflow.providers.openlineage.extractors import OperatorLineage

        inputs, outputs, run_facets = getattr(self, "_lineage_datasets", ([], [], {}))
        return OperatorLineage(inputs=list(inputs), outputs=list(outputs), run_facets=dict(run_facets))

    def record_lineage(
        self, described: Mapping[str, Any], spec: Any, result: Mapping[str, Any], plan: LineagePlan
    ) -> None:
        """Remember this run's OpenLineage datasets for :meth:`get_openlineage_facets_on_complete`.

        Inputs: a read's table (at the snapshot read), a source table, the tables a source query
        read (as the job found them in Spark's plan), a file source, and a merge's or delete's
        own table (at the snapshot it changed). Outputs: every commit, and a read's files.
        """
        try:
            from airflow_iceberg.operators import openlineage_datasets as ol
        except ImportError:  # OpenLineage provider not installed: nothing to report
            return
        tables = described.get("tables") or {}
        commits = [commit for commit in self.written_commits(result) if commit and commit.get("table")]

        def table(name: str, output: bool, version: Any = None, commit: Any = None) -> Any:
            uri, catalog = plan.uris.get(name), plan.catalogs.get(name)
            if uri is None:  # a query's table, known only now: named as the plan names the others
                uri, catalog = self.name_table(name, plan)
            return ol.table_dataset(
                tables.get(name),
                output=output,
                version=version,
                asset_uri=uri,
                catalog=catalog,
                commit=commit,
            )

        read_version = result.get("snapshot_id") if self.reads_table else None  # a read's snapshot
        inputs = [
            table(name, False, read_version if index == 0 else None)
            for index, name in enumerate(self.read_table_names(spec))
        ]
        inputs += [
            table(read["table"], False, read.get("snapshot_id"))
            for read in described.get("query_tables") or []
        ]
        if self.reads_written_table and commits:  # the snapshot the merge or delete changed
            inputs.append(table(spec.table, False, commits[0].get("parent_snapshot_id")))
        source = getattr(spec, "source", None)
        if getattr(source, "path", None):
            inputs.append(ol.path_dataset(source.path, output=False, file_format=source.format))
        outputs = [table(str(c["table"]), True, c.get("snapshot_id"), c) for c in commits]
        sink = result.get("sink") or {}
        if sink.get("path"):
            outputs.append(ol.path_dataset(str(sink["path"]), output=True, file_format=sink.get("format")))
        self._lineage_datasets = (
            unique_datasets(inputs),
            unique_datasets(outputs),
            ol.application_run_facets(described.get("application")),
        )

    def name_table(self, table: str, plan: LineagePlan) -> tuple[str | None, dict[str, str] | None]:
        """The asset URI and catalog facet of a query's table (``catalog.ns.table``); (None, None) if unknown.

        Only a table of one of the task's catalogs is named: one in a catalog the task has no
        connection for (the session catalog, one set in ``conf``) keeps its location as its name
        and gets no symlink, rather than the identity of another catalog.
        """
        catalog, _ = split_table(table, list(plan.configs))
        if catalog is None:
            return None, None
        try:
            config = plan.configs[catalog]
            return table_asset_uri(config, table), catalog_facet(config)
        except Exception as error:
            self.log.warning("No OpenLineage symlink for %s: %s", table, _reason(error))  # type: ignore[attr-defined]
            return None, None


def unique_datasets(datasets: Sequence[Any]) -> list[Any]:
    """The datasets that could be built, each (namespace, name) once: a table read twice is one input."""
    seen, unique = set(), []
    for dataset in datasets:
        if dataset is not None and (dataset.namespace, dataset.name) not in seen:
            seen.add((dataset.namespace, dataset.name))
            unique.append(dataset)
    return unique


def catalog_facet(config: CatalogConfig) -> dict[str, str]:
    """The ``catalog`` facet's catalog fields: Spark catalog name, type, warehouse and URI, free of secrets.

    As openlineage-spark's ``IcebergHandler`` fills them, with the warehouse and URI put through
    the asset URI's normaliser (openlineage-spark copies the Spark settings, which may hold a
    password in a URI's user info).
    """
    kind, identity = catalog_identity(config)
    fields = {"name": config.catalog_name, "type": kind}
    warehouse = identity.get("warehouse") or (
        normalize_location(config.warehouse) if config.warehouse and kind != "rest" else config.warehouse
    )
    if warehouse:
        fields["warehouseUri"] = warehouse.strip()
    if identity.get("uri"):
        fields["metadataUri"] = identity["uri"]
    return fields


def _reason(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


__all__ = [
    "LineagePlan",
    "TableLineageMixin",
    "WrittenTable",
    "event_extra",
    "is_templated",
    "table_alias_name",
]

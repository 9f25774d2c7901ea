"""Assets and OpenLineage for the operators: which tables a task reads and writes, and at what snapshot.

A table's asset URI needs its catalog's identity, which is in the connection, and DAG parsing
must not look connections up. So at parse time an operator only declares an
:class:`~airflow.sdk.AssetAlias` per table (``iceberg-table:<conn id>:<table>``, the template
text for a templated table). At run time, once the job has committed, the real ``iceberg://``
asset is attached to that alias with an event whose extra is the commit: snapshot id,
operation, counts, commit id. Airflow then triggers every DAG scheduled on the asset (or on the
alias).

:class:`TableLineageMixin` is the whole mechanism; an operator opts in with the class
attributes ``writes_table`` (its ``table`` is an outlet) and ``reads_table`` (an inlet).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_iceberg.assets import (
    catalog_symlink,
    location_dataset_name,
    split_table,
    table_asset_uri,
)
from airflow_iceberg.jobs.job_spec import COMMIT_ID_PROPERTY

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


def table_alias_name(iceberg_conn_id: str, table: str) -> str:
    """The alias an operator declares for ``table`` of the catalog behind ``iceberg_conn_id``."""
    return f"{ALIAS_PREFIX}:{iceberg_conn_id}:{table}"


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


class TableLineageMixin:
    """Declare a task's tables as asset aliases; at run time emit their assets and OpenLineage facets.

    The host operator provides ``table``, ``iceberg_conn_id`` and ``inlets``/``outlets``; it calls
    :meth:`declare_table_assets` at the end of ``__init__`` and :meth:`finish_lineage` after a
    successful job, with its catalogs by Spark catalog name. Subclasses that write more tables
    call :meth:`declare_written_table` and override :meth:`written_commits` to match.
    """

    #: The task's ``table`` is written: declare it as an outlet and emit an asset event per commit.
    writes_table: ClassVar[bool] = False
    #: The task's ``table`` is read: declare it as an inlet.
    reads_table: ClassVar[bool] = False

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
            self.inlets = [*self.inlets, AssetAlias(table_alias_name(self.iceberg_conn_id, self.table))]
        self.table_alias_names = [table_alias_name(self.iceberg_conn_id, t) for t in self.written_tables()]
        self.outlets = [*self.outlets, *(AssetAlias(name) for name in self.table_alias_names)]

    def written_tables(self) -> list[str]:
        """The tables this task commits to, as given (maybe templates); see :meth:`declare_written_table`."""
        return [self.table] if self.writes_table else []

    def declare_written_table(self, table: str) -> None:
        """Declare one more table this task commits to, e.g. a read's sink table."""
        from airflow.sdk import AssetAlias

        name = table_alias_name(self.iceberg_conn_id, table)
        self.table_alias_names = [*self.table_alias_names, name]
        self.outlets = [*self.outlets, AssetAlias(name)]

    def written_commits(self, result: Mapping[str, Any]) -> list[Mapping[str, Any] | None]:
        """The commit in the job's result for each of :meth:`written_tables`, in the same order."""
        return [result] if self.writes_table else []

    # ------------------------------------------------------------------ run time

    def table_asset_uri(self, table: str, configs: Mapping[str, CatalogConfig]) -> str:
        """The ``iceberg://`` URI of a qualified table (``catalog.namespace.table``)."""
        catalog, _ = split_table(table, list(configs))
        config = configs[catalog] if catalog else next(iter(configs.values()))
        return table_asset_uri(config, table)

    def emit_table_events(
        self, context: Context, result: Mapping[str, Any], configs: Mapping[str, CatalogConfig]
    ) -> None:
        """Attach each committed table's asset, with the commit as extra, to its declared alias."""
        from airflow.sdk import Asset, AssetAlias

        outlet_events = context.get("outlet_events")
        if outlet_events is None:
            return
        for alias, commit in zip(self.table_alias_names, self.written_commits(result), strict=False):
            if not commit or commit.get("snapshot_id") is None or committed_ref(commit) != "main":
                continue  # nothing committed, or committed to an audit branch: readers of main see no change
            table = str(commit["table"])
            uri = self.table_asset_uri(table, configs)
            outlet_events[AssetAlias(alias)].add(Asset(name=uri, uri=uri), extra=event_extra(table, commit))
            self.log.info("Asset event for %s: %s (alias %s)", table, uri, alias)  # type: ignore[attr-defined]

    def finish_lineage(
        self, context: Context, spec: Any, result: dict[str, Any], configs: Mapping[str, CatalogConfig]
    ) -> None:
        """After a successful job: emit asset events and keep the OpenLineage datasets.

        Pops the job's ``lineage`` description from ``result`` (it is not part of the XCom).
        Lineage is never worth failing a task that committed, so errors are logged, not raised.
        """
        described = result.pop("lineage", None) or {}
        self.emit_table_events(context, result, configs)
        try:
            inputs: list[tuple[str, int | None]] = []
            if self.reads_table:
                inputs.append((spec.table, result.get("snapshot_id")))
            source = getattr(getattr(spec, "source", None), "table", None)
            if source:
                inputs.append((source, None))
            outputs = [
                (str(commit["table"]), commit.get("snapshot_id"))
                for commit in self.written_commits(result)
                if commit and commit.get("table")
            ]
            self.record_lineage(described, inputs, outputs, configs)
        except Exception:
            self.log.warning("Could not build OpenLineage datasets", exc_info=True)  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ OpenLineage

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage inputs and outputs, named by table location as openlineage-spark names them.

        Each dataset carries a ``symlinks`` facet with the catalog's identity, a ``schema`` facet
        and, as its version, the snapshot id read or committed.
        """
        from airflow.providers.openlineage.extractors import OperatorLineage

        inputs, outputs = getattr(self, "_lineage_datasets", ([], []))
        return OperatorLineage(inputs=list(inputs), outputs=list(outputs))

    def record_lineage(
        self,
        described: Mapping[str, Mapping[str, Any]],
        inputs: Sequence[tuple[str, int | None]],
        outputs: Sequence[tuple[str, int | None]],
        configs: Mapping[str, CatalogConfig],
    ) -> None:
        """Remember the OpenLineage datasets of this run for ``get_openlineage_facets_on_complete``."""
        try:
            from airflow.providers.common.compat.openlineage.facet import InputDataset, OutputDataset
        except ImportError:  # OpenLineage provider not installed: nothing to report
            return
        self._lineage_datasets = (
            [
                InputDataset(**ol)
                for t, v in inputs
                if (ol := openlineage_dataset(t, described.get(t), v, configs, self.table_asset_uri))
            ],
            [
                OutputDataset(**ol)
                for t, v in outputs
                if (ol := openlineage_dataset(t, described.get(t), v, configs, self.table_asset_uri))
            ],
        )


def openlineage_dataset(
    table: str,
    description: Mapping[str, Any] | None,
    snapshot_id: int | None,
    configs: Mapping[str, CatalogConfig],
    uri_of: Any,
) -> dict[str, Any] | None:
    """``namespace``, ``name`` and ``facets`` of one table for an OpenLineage dataset."""
    if not description or not description.get("location"):
        return None
    from airflow.providers.common.compat.openlineage.facet import (
        Identifier,
        SchemaDatasetFacet,
        SchemaDatasetFacetFields,
        SymlinksDatasetFacet,
    )
    from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet

    from airflow_iceberg.assets import parse_uri

    namespace, name = location_dataset_name(str(description["location"]))
    kind, parts, identity = parse_uri(uri_of(table, configs))
    symlink_namespace, symlink_name = catalog_symlink(kind, parts, identity)
    facets: dict[str, Any] = {
        "symlinks": SymlinksDatasetFacet(
            identifiers=[Identifier(namespace=symlink_namespace, name=symlink_name, type="TABLE")]
        ),
        "schema": SchemaDatasetFacet(
            fields=[
                SchemaDatasetFacetFields(name=f["name"], type=f["type"])
                for f in description.get("schema", [])
            ]
        ),
    }
    version = snapshot_id if snapshot_id is not None else description.get("snapshot_id")
    if version is not None:
        facets["version"] = DatasetVersionDatasetFacet(datasetVersion=str(version))
    return {"namespace": namespace, "name": name, "facets": facets}


__all__ = ["TableLineageMixin", "event_extra", "table_alias_name"]

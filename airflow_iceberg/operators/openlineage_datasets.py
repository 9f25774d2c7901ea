"""The OpenLineage datasets and run facet of one task, built as openlineage-spark builds them.

:class:`~airflow_iceberg.operators.lineage.TableLineageMixin` decides *which* tables and files a
task read and wrote; this module turns each into an OpenLineage ``InputDataset`` or
``OutputDataset`` with the facets openlineage-spark gives the same dataset (checked side by side
in ``tests/jobs/test_openlineage_spark.py``):

- name: the table's storage location (:func:`airflow_iceberg.naming.location_dataset`);
- ``symlinks``: the table by its catalog (:func:`airflow_iceberg.assets.catalog_symlink`); a
  commit to a branch is ``<table>.branch_<branch>`` there, as Spark names a branch write;
- ``schema`` (openlineage-spark's type names and nested fields, from the job), ``version`` (the
  snapshot read or committed), ``catalog``, ``storage`` (``iceberg`` and the write format) and
  ``dataSource``;
- outputs: ``lifecycleStateChange`` (``CREATE``, ``OVERWRITE``) and ``outputStatistics`` (the
  commit's added records, files and bytes);
- the run: ``spark_applicationDetails`` (openlineage-spark's facet name and keys) with the id and
  name of the Spark application that ran the job.

Imported only when a task reports lineage (it imports the OpenLineage client), never at DAG parsing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attr
from airflow.providers.common.compat.openlineage.facet import (
    Identifier,
    InputDataset,
    OutputDataset,
    RunFacet,
    SchemaDatasetFacet,
    SchemaDatasetFacetFields,
    SymlinksDatasetFacet,
)
from openlineage.client.generated.catalog_dataset import CatalogDatasetFacet
from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet
from openlineage.client.generated.datasource_dataset import DatasourceDatasetFacet
from openlineage.client.generated.lifecycle_state_change_dataset import (
    LifecycleStateChange,
    LifecycleStateChangeDatasetFacet,
)
from openlineage.client.generated.output_statistics_output_dataset import OutputStatisticsOutputDatasetFacet
from openlineage.client.generated.storage_dataset import StorageDatasetFacet

from airflow_iceberg.assets import table_dataset_names
from airflow_iceberg.naming import location_dataset

#: The write modes that replace a table's rows, and those that create it (a lifecycle change each).
OVERWRITE_MODES = ("overwrite", "overwrite_partitions", "replace")
CREATE_MODES = ("create",)


@attr.define
class SparkApplicationDetailsRunFacet(RunFacet):
    """The Spark application that ran the job: openlineage-spark's ``spark_applicationDetails`` keys."""

    applicationId: str | None = attr.field(default=None)
    appName: str | None = attr.field(default=None)


def table_dataset(
    description: Mapping[str, Any] | None,
    *,
    output: bool,
    version: int | None = None,
    asset_uri: str | None = None,
    catalog: Mapping[str, str] | None = None,
    commit: Mapping[str, Any] | None = None,
) -> InputDataset | OutputDataset | None:
    """One Iceberg table as an input or output dataset; None when the job could not describe it.

    ``commit`` is the write's result (for an output: its mode, branch and counts); ``version``
    the snapshot read or committed, else the one the job saw.
    """
    if not description or not description.get("location"):
        return None
    branch = commit_branch(commit) if commit else None
    (namespace, name), symlink = table_dataset_names(str(description["location"]), asset_uri, branch)
    facets: dict[str, Any] = {
        "schema": SchemaDatasetFacet(fields=schema_fields(description.get("schema") or [])),
        "dataSource": DatasourceDatasetFacet(name=namespace, uri=namespace),
        "storage": StorageDatasetFacet(
            storageLayer="iceberg", fileFormat=str(description.get("format") or "parquet")
        ),
    }
    if symlink:
        facets["symlinks"] = SymlinksDatasetFacet(
            identifiers=[Identifier(namespace=symlink[0], name=symlink[1], type="TABLE")]
        )
    if catalog:
        facets["catalog"] = CatalogDatasetFacet(
            framework="iceberg", source="spark", catalogProperties=None, **catalog
        )
    version = version if version is not None else description.get("snapshot_id")
    if version is not None:
        facets["version"] = DatasetVersionDatasetFacet(datasetVersion=str(version))
    if not output:
        return InputDataset(namespace=namespace, name=name, facets=facets)
    state = lifecycle_state(commit or {})
    if state is not None:
        facets["lifecycleStateChange"] = LifecycleStateChangeDatasetFacet(lifecycleStateChange=state)
    statistics = output_statistics(commit or {})
    output_facets = {"outputStatistics": statistics} if statistics else {}
    return OutputDataset(namespace=namespace, name=name, facets=facets, outputFacets=output_facets)


def path_dataset(path: str, *, output: bool, file_format: str | None = None) -> InputDataset | OutputDataset:
    """Files read or written at ``path`` (a file source, a read's ``sink_path``), named by location."""
    namespace, name = location_dataset(path)
    facets: dict[str, Any] = {"dataSource": DatasourceDatasetFacet(name=namespace, uri=namespace)}
    if file_format:
        facets["storage"] = StorageDatasetFacet(storageLayer="file", fileFormat=file_format)
    if output:
        return OutputDataset(namespace=namespace, name=name, facets=facets)
    return InputDataset(namespace=namespace, name=name, facets=facets)


def schema_fields(fields: list[Mapping[str, Any]]) -> list[SchemaDatasetFacetFields]:
    """The job's schema description (name, type, description, nested fields) as facet fields."""
    return [
        SchemaDatasetFacetFields(
            name=str(field["name"]),
            type=str(field["type"]),
            description=field.get("description"),
            fields=schema_fields(field["fields"]) if field.get("fields") else None,  # leaves have none
        )
        for field in fields
    ]


def commit_branch(commit: Mapping[str, Any]) -> str | None:
    """The branch other than ``main`` a commit landed on (a branch write's, a publish's target), if any."""
    branch = commit.get("target_branch") or commit.get("branch")
    return str(branch) if branch and branch != "main" else None


def lifecycle_state(commit: Mapping[str, Any]) -> LifecycleStateChange | None:
    """``CREATE`` for a write that created the table, ``OVERWRITE`` for one that replaced its rows.

    ``create_or_replace`` is a ``CREATE`` when the table had no snapshot before (no parent), an
    ``OVERWRITE`` otherwise. Appends, merges and deletes change rows, not the dataset's lifecycle.
    """
    if not commit.get("snapshot_id"):
        return None
    mode = commit.get("mode")
    if mode in CREATE_MODES or (mode == "create_or_replace" and commit.get("parent_snapshot_id") is None):
        return LifecycleStateChange.CREATE
    if mode in OVERWRITE_MODES or mode == "create_or_replace":
        return LifecycleStateChange.OVERWRITE
    return None


def output_statistics(commit: Mapping[str, Any]) -> OutputStatisticsOutputDatasetFacet | None:
    """Rows, files and bytes the commit added, from its result and snapshot summary; None without a commit."""
    if not commit.get("snapshot_id"):
        return None
    size = (commit.get("summary") or {}).get("added-files-size")
    return OutputStatisticsOutputDatasetFacet(
        rowCount=commit.get("added_records"),
        fileCount=commit.get("added_data_files"),
        size=int(size) if size is not None else None,
    )


def application_run_facets(application: Mapping[str, Any] | None) -> dict[str, Any]:
    """``{"spark_applicationDetails": ...}`` naming the Spark application, when the job told it."""
    if not application or not application.get("id"):
        return {}
    return {
        "spark_applicationDetails": SparkApplicationDetailsRunFacet(
            applicationId=str(application["id"]), appName=application.get("name")
        )
    }

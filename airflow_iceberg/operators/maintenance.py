"""Table maintenance through the same spark-submit path as the reads and writes."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_iceberg.jobs.job_spec import JobSpec, OrphanFilesSpec
from airflow_iceberg.operators.base import IcebergSparkSubmitOperator
from airflow_iceberg.timestamps import to_epoch_millis


class IcebergRemoveOrphanFilesOperator(IcebergSparkSubmitOperator):
    """Find and delete files under a table that no snapshot references.

    A write killed before its commit leaves data files nobody reads; this reports them (XCom
    ``orphan_file_count`` and up to 1000 ``orphan_files``) and, unless ``dry_run``, deletes them.
    Only delete files older than any write that may still be running: a younger file may belong
    to a commit in progress.

    :param older_than: Only files last modified before this: epoch ms, ISO-8601 or a datetime.
        Default: Iceberg's, three days ago. (templated)
    :param dry_run: Report, do not delete. Default False.
    """

    template_fields: Sequence[str] = (*IcebergSparkSubmitOperator.template_fields, "older_than")

    def __init__(self, *, older_than: Any = None, dry_run: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.older_than = older_than
        self.dry_run = dry_run

    def build_spec(self) -> OrphanFilesSpec:
        return OrphanFilesSpec(
            table=self.table, older_than=to_epoch_millis(self.older_than, "older_than"), dry_run=self.dry_run
        )

    def qualify_spec(self, spec: JobSpec, catalog_names: Sequence[str]) -> OrphanFilesSpec:
        return dataclasses.replace(spec, table=self.qualify(spec.table, catalog_names))

    def log_result(self, result: Mapping[str, Any]) -> None:
        verb = "found (dry run)" if result.get("dry_run") else "removed"
        self.log.info(
            "%s orphan files %s under %s", result.get("orphan_file_count"), verb, result.get("table")
        )

"""Operators that run Iceberg writes, row-level changes, reads, audits, branches and upkeep."""

from airflow_iceberg.operators.audit import IcebergAuditOperator
from airflow_iceberg.operators.branches import IcebergPublishOperator, IcebergTagOperator
from airflow_iceberg.operators.health import IcebergTableHealthOperator
from airflow_iceberg.operators.maintenance import (
    IcebergExpireSnapshotsOperator,
    IcebergRemoveOrphanFilesOperator,
    IcebergRewriteDataFilesOperator,
    IcebergRewriteManifestsOperator,
    IcebergRewritePositionDeleteFilesOperator,
    IcebergRollbackOperator,
)
from airflow_iceberg.operators.merge import IcebergDeleteOperator, IcebergMergeOperator
from airflow_iceberg.operators.read import (
    IcebergIncrementalReadOperator,
    IcebergReadOperator,
    IcebergStreamReadOperator,
    IcebergTimeTravelReadOperator,
)
from airflow_iceberg.operators.write import (
    IcebergAppendOperator,
    IcebergCreateTableOperator,
    IcebergOverwriteOperator,
    IcebergOverwritePartitionsOperator,
)

__all__ = [
    "IcebergAppendOperator",
    "IcebergAuditOperator",
    "IcebergCreateTableOperator",
    "IcebergDeleteOperator",
    "IcebergExpireSnapshotsOperator",
    "IcebergIncrementalReadOperator",
    "IcebergMergeOperator",
    "IcebergOverwriteOperator",
    "IcebergOverwritePartitionsOperator",
    "IcebergPublishOperator",
    "IcebergReadOperator",
    "IcebergRemoveOrphanFilesOperator",
    "IcebergRewriteDataFilesOperator",
    "IcebergRewriteManifestsOperator",
    "IcebergRewritePositionDeleteFilesOperator",
    "IcebergRollbackOperator",
    "IcebergStreamReadOperator",
    "IcebergTableHealthOperator",
    "IcebergTagOperator",
    "IcebergTimeTravelReadOperator",
]

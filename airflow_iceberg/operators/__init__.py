"""Operators that run Iceberg writes and reads through spark-submit."""

from airflow_iceberg.operators.maintenance import IcebergRemoveOrphanFilesOperator
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
    "IcebergCreateTableOperator",
    "IcebergIncrementalReadOperator",
    "IcebergOverwriteOperator",
    "IcebergOverwritePartitionsOperator",
    "IcebergReadOperator",
    "IcebergRemoveOrphanFilesOperator",
    "IcebergStreamReadOperator",
    "IcebergTimeTravelReadOperator",
]

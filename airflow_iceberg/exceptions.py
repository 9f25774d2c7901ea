"""The errors airflow-iceberg raises. Each names what is wrong, so a task log says what to fix."""

from __future__ import annotations

from airflow_iceberg.jobs.spec.errors import InvalidSpecError

__all__ = [
    "CatalogSettingsConflictError",
    "IcebergJobError",
    "InvalidCatalogConfigError",
    "InvalidSpecError",
]


class InvalidCatalogConfigError(ValueError):
    """An Iceberg catalog connection is incomplete or contradictory; the message names the field."""


class CatalogSettingsConflictError(ValueError):
    """Two catalog connections used in one job would set the same Spark setting to different values."""


class IcebergJobError(RuntimeError):
    """The PySpark job ran but reported a failure (bad table state, Spark error); the table is unchanged."""

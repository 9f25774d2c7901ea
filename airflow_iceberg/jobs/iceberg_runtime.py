"""The Iceberg release the job's Spark runs, asked of the table's catalog itself.

A feature of a newer release (``rewrite_data_files(branch => ...)`` from 1.11) is refused on an
older runtime before anything changes, with an error that names both. The operators check the
connection's ``iceberg_version`` before Spark starts, but that is not the whole story: over Spark
Connect the server runs its own runtime, and a ``runtime_jar`` may be named anything. So the job
asks the runtime: ``<catalog>.system.iceberg_version()`` is Iceberg's own SQL function (since 1.2),
answered by the JVM that runs the job, on a driver and on a Connect server alike.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from airflow_iceberg.jobs.job_spec import InvalidSpecError, quote_name, split_identifier

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The first Iceberg release whose ``rewrite_data_files`` takes ``branch`` (apache/iceberg#15067).
FIRST_ICEBERG_WITH_BRANCH_COMPACTION = (1, 11)


def runtime_version(spark: SparkSession, table: str) -> str | None:
    """The Iceberg release of the catalog that holds ``table`` (``1.12.0``), or None before 1.2."""
    parts = split_identifier(table)
    catalog = parts[0] if len(parts) > 2 else spark.catalog.currentCatalog()
    try:
        row = spark.sql(f"SELECT {quote_name(catalog)}.system.iceberg_version() AS version").first()
    except Exception:  # no such function: a runtime before Iceberg 1.2
        return None
    return str(row.version) if row is not None else None


def require_runtime(spark: SparkSession, table: str, first: tuple[int, int], feature: str) -> str:
    """Refuse ``feature`` unless the runtime is Iceberg ``first`` or later; return the release."""
    version = runtime_version(spark, table)
    numbers = tuple(int(part) for part in re.findall(r"[0-9]+", version or "")[:2])
    if version is None or numbers < first:
        found = f"Iceberg {version}" if version else "an Iceberg runtime before 1.2"
        raise InvalidSpecError(
            f"{feature} needs Iceberg {'.'.join(map(str, first))} or later, and {table}'s catalog runs "
            f"{found}; load a newer iceberg-spark-runtime (the connection's Iceberg version, or the "
            "Spark Connect server's jars), or leave the option out. Nothing was changed"
        )
    return str(version)

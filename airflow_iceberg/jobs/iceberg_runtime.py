"""The Iceberg release the job's Spark runs, asked of the runtime itself.

A feature of a newer release (``rewrite_data_files(branch => ...)`` from 1.11) is refused on an
older runtime before anything changes, with an error that names both. The operators check the
connection's ``iceberg_version`` before Spark starts, but that is not the whole story: over Spark
Connect the server runs its own runtime, and a ``runtime_jar`` may be named anything. So the job
asks the runtime: ``<catalog>.system.iceberg_version()``, Iceberg's own SQL function (since 1.2),
answered by the JVM that runs the job, on a driver and on a Connect server alike; on the driver,
Iceberg's ``IcebergBuild`` through py4j when the function cannot be reached (Spark 3.5 resolves
``spark_catalog.system.*`` in its built-in catalog, so a session catalog's table never gets it).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from airflow_iceberg.jobs import connect
from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.identifiers import quote_name, split_identifier

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The first Iceberg release whose ``rewrite_data_files`` takes ``branch`` (apache/iceberg#15067).
FIRST_ICEBERG_WITH_BRANCH_COMPACTION = (1, 11)


def runtime_version(spark: SparkSession, table: str) -> str | None:
    """The Iceberg release of the runtime that holds ``table``'s catalog (``1.12.0``), None if untold."""
    parts = split_identifier(table)
    catalog = parts[0] if len(parts) > 2 else spark.catalog.currentCatalog()
    try:
        row = spark.sql(f"SELECT {quote_name(catalog)}.system.iceberg_version() AS version").first()
        return str(row.version) if row is not None else None
    except Exception:  # a runtime before Iceberg 1.2, or a session catalog on Spark 3.5
        pass
    if connect.is_connect(spark):
        return None
    return str(spark.sparkContext._jvm.org.apache.iceberg.IcebergBuild.version())


def major_minor(version: str) -> tuple[int, ...]:
    """The first two numbers of a version string: ``1.12.0`` -> (1, 12), ``4.1.4`` -> (4, 1)."""
    return tuple(int(part) for part in re.findall(r"[0-9]+", version)[:2])


def require_runtime(spark: SparkSession, table: str, first: tuple[int, int], feature: str) -> str | None:
    """Refuse ``feature`` on a runtime older than Iceberg ``first``; return the release, if told.

    A release the runtime does not tell (a session catalog's table over Spark Connect) is let
    through: the procedure itself then refuses an argument it does not know while Spark analyses
    the call, before it changes anything.
    """
    version = runtime_version(spark, table)
    if version is None:
        return None
    if major_minor(version) < first:
        raise InvalidSpecError(
            f"{feature} needs Iceberg {'.'.join(map(str, first))} or later, and {table}'s catalog runs "
            f"Iceberg {version}; load a newer iceberg-spark-runtime (the connection's Iceberg version, "
            "or the Spark Connect server's jars), or leave the option out. Nothing was changed"
        )
    return version

"""The ``iceberg_catalog`` connection type's hook: one connection, one Iceberg catalog.

The hook does no I/O to build Spark settings; it reads the connection and hands it to the pure
mapping in :mod:`airflow_iceberg.catalog.spark_settings`. Only ``test_connection`` (the UI's
Test button) talks to the catalog, with a quick check that needs no Spark.
"""

from __future__ import annotations

import os
import re
from functools import cached_property
from typing import Any

from airflow.providers.common.compat.sdk import BaseHook

from airflow_iceberg.catalog.config import CONN_TYPE, CatalogConfig, config_from_connection
from airflow_iceberg.catalog.connection_check import check_catalog
from airflow_iceberg.catalog.iceberg_runtimes import pinned_runtime_note
from airflow_iceberg.catalog.spark_settings import SparkSettings, spark_settings


class IcebergCatalogHook(BaseHook):
    """Read an ``iceberg_catalog`` connection and turn it into Spark settings.

    :param iceberg_conn_id: The Airflow connection that describes the catalog.
    """

    conn_name_attr = "iceberg_conn_id"
    default_conn_name = "iceberg_catalog_default"
    conn_type = CONN_TYPE
    hook_name = "Iceberg Catalog (Spark)"

    def __init__(self, iceberg_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.iceberg_conn_id = iceberg_conn_id

    @cached_property
    def catalog_config(self) -> CatalogConfig:
        """The validated catalog configuration; raises ``InvalidCatalogConfigError`` naming the field."""
        try:
            connection = self.get_connection(self.iceberg_conn_id)
        except Exception:
            connection = _jdbc_connection_from_env(self.iceberg_conn_id)
            if connection is None:
                raise
        return config_from_connection(connection)

    def get_conn(self) -> CatalogConfig:
        return self.catalog_config

    def spark_settings(self) -> SparkSettings:
        """Spark settings that load this catalog: extensions, ``spark.sql.catalog.<name>.*``, runtime."""
        return spark_settings(self.catalog_config)

    def test_connection(self) -> tuple[bool, str]:
        """Check the catalog for real without starting Spark; the message says what was checked."""
        try:
            config = self.catalog_config
        except Exception as error:
            return False, f"Invalid configuration: {error}"
        ok, message = check_catalog(config)
        pinned = (  # a runtime jar's own release is what loads, whatever Iceberg version says
            None if config.runtime_jar else pinned_runtime_note(config.spark_version, config.iceberg_version)
        )
        return ok, f"{message}; {pinned}" if pinned else message


#: ``<conn type>://jdbc:<driver>://`` as ``Connection.get_uri()`` writes a ``jdbc:<driver>://…`` Host.
_JDBC_HOST_URI_RE = re.compile(r"^(iceberg[-_]catalog://)jdbc:([a-z][a-z0-9]*://)")


def _jdbc_connection_from_env(conn_id: str) -> Any:
    """Read back an ``AIRFLOW_CONN_*`` URI that Airflow wrote for a ``jdbc:<driver>://…`` Host.

    The Test button (``POST /api/v2/connections/test``) hands the hook a connection written out
    as a URI. For a Host such as ``jdbc:postgresql://db:5432/cat`` that URI has two schemes and
    Airflow refuses to parse it, so the lookup fails with "isn't defined". Dropping ``jdbc:``
    makes it parseable; the config adds ``jdbc:`` back for a jdbc catalog. ``None`` when the
    variable is absent or not of that shape.
    """
    uri = os.environ.get(f"AIRFLOW_CONN_{conn_id.upper()}", "")
    repaired, count = _JDBC_HOST_URI_RE.subn(r"\1\2", uri)
    if not count:
        return None
    from airflow.models.connection import Connection

    return Connection(conn_id=conn_id, uri=repaired)

"""Fast, Spark-free checks behind the connection form's Test button.

Each check touches the real catalog (a directory, a metastore, a database, a REST service) and
returns ``(ok, message)`` where the message says exactly what was checked. Failures are caught
and summarised in one line: the UI shows the message, never a traceback.

Client libraries (pyiceberg, psycopg2) are imported inside the checks, so the operators and DAG
parsing never pay for them; they come with the ``catalog-check`` extra.
"""

from __future__ import annotations

import os
import socket
import sqlite3
from collections.abc import Callable
from urllib.parse import unquote, urlparse

from airflow_iceberg.catalog.config import CatalogConfig

TIMEOUT_SECONDS = 5.0


def check_catalog(config: CatalogConfig) -> tuple[bool, str]:
    """Run the check that fits the catalog's type."""
    checks: dict[str, Callable[[CatalogConfig], str]] = {
        "hadoop": _check_hadoop,
        "hive": _check_hive,
        "jdbc": _check_jdbc,
        "rest": _check_rest,
    }
    check = checks.get(config.kind, _check_reachable_uri)
    try:
        return True, check(config)
    except Exception as error:  # the UI wants a sentence, not a traceback
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return False, f"{config.kind} catalog {config.catalog_name!r}: {type(error).__name__}: {detail}"


def _local_path(location: str) -> str | None:
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return unquote(parsed.path)
    return None


def _check_hadoop(config: CatalogConfig) -> str:
    path = _local_path(str(config.warehouse))
    if path is None:
        scheme = urlparse(str(config.warehouse)).scheme
        return (
            f"Configuration is valid. The {scheme}:// warehouse {config.warehouse} was not contacted: "
            "that needs the Hadoop file system on the cluster"
        )
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing.rstrip("/")) or "/"
    if not os.path.isdir(existing):
        raise NotADirectoryError(f"warehouse {config.warehouse}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(f"warehouse {config.warehouse}: {existing} is not writable")
    state = "exists" if existing == path else f"can be created under {existing}"
    return f"Warehouse directory {path} {state} and is writable"


def _check_hive(config: CatalogConfig) -> str:
    from pyiceberg.catalog.hive import HiveCatalog

    if not config.uri:
        return "Configuration is valid. No uri is set: Spark will use hive.metastore.uris from hive-site.xml"
    catalog = HiveCatalog(config.catalog_name, uri=config.uri)
    namespaces = catalog.list_namespaces()
    return f"Hive Metastore at {config.uri} answered: {len(namespaces)} database(s)"


def _check_jdbc(config: CatalogConfig) -> str:
    uri = str(config.uri)
    if uri.startswith("jdbc:sqlite:"):
        path = uri[len("jdbc:sqlite:") :]
        if path.startswith("file:"):
            path = _local_path(path) or path
        if not os.path.exists(path) and not os.access(os.path.dirname(path) or ".", os.W_OK):
            raise FileNotFoundError(f"SQLite catalog database {path} does not exist and cannot be created")
        with sqlite3.connect(f"file:{path}?mode=rwc", uri=True, timeout=TIMEOUT_SECONDS) as connection:
            connection.execute("SELECT 1").fetchone()
        return f"SQLite catalog database {path} answered"
    if uri.startswith("jdbc:postgresql:"):
        import psycopg2

        target = urlparse(uri[len("jdbc:") :])
        connection = psycopg2.connect(
            host=target.hostname,
            port=target.port or 5432,
            dbname=target.path.lstrip("/"),
            user=config.login,
            password=config.password,
            connect_timeout=int(TIMEOUT_SECONDS),
        )
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
                cursor.fetchone()
        finally:
            connection.close()
        where = f"{target.hostname}:{target.port}{target.path}"
        return f"PostgreSQL catalog database {where} answered as {config.login}"
    return _check_reachable_uri(config)


def _check_rest(config: CatalogConfig) -> str:
    from pyiceberg.catalog.rest import RestCatalog

    from airflow_iceberg.catalog.spark_settings import catalog_properties

    properties = {k: v for k, v in catalog_properties(config).items() if k not in ("type",)}
    RestCatalog(config.catalog_name, **properties)  # GET /v1/config, after OAuth2 when credentials are set
    auth = (
        "with OAuth2 client credentials"
        if "credential" in properties
        else ("with a bearer token" if "token" in properties else "without authentication")
    )
    return f"REST catalog at {config.uri} answered GET /v1/config {auth}"


def _check_reachable_uri(config: CatalogConfig) -> str:
    if not config.uri:
        return f"Configuration is valid. A {config.kind} catalog has no uri to contact from here"
    target = urlparse(config.uri.removeprefix("jdbc:"))
    if not target.hostname:
        return f"Configuration is valid. {config.uri} names no host to contact"
    port = target.port or {"https": 443, "http": 80}.get(target.scheme, 0)
    with socket.create_connection((target.hostname, port), timeout=TIMEOUT_SECONDS):
        pass
    return f"Configuration is valid and {target.hostname}:{port} accepts connections"

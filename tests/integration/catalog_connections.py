"""``iceberg_catalog`` connection JSON for each real catalog back end, and pyiceberg readers for them.

Tests give these dicts to :class:`~tests.integration.airflow_runner.AirflowRunner` (which exports
them as ``AIRFLOW_CONN_*``) or to ``monkeypatch.setenv``, exactly as a deployment defines
connections. Connections point at the local runtime jar (``runtime_jar``, spark-submit ``--jars``)
unless they ask for the default path: the REST connection for Spark leaves ``runtime_jar`` out, so
its runtime and S3FileIO's AWS SDK travel as Maven coordinates through ``--packages`` and Ivy
(resolved from the Ivy cache setup warmed, ``spark.jars.ivy``). The readers are deliberately
*not* our code: pyiceberg's own HiveCatalog, SqlCatalog and RestCatalog, configured from the
server fixtures, are the independent judges of what a run wrote.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

POSTGRES_JDBC = "/usr/share/java/postgresql.jar"
SQLITE_JDBC = "/usr/share/java/sqlite-jdbc.jar"
JDBC_CATALOG_IMPL = "org.apache.iceberg.jdbc.JdbcCatalog"


def _connection(extra: dict[str, Any], *, packages: bool = False, **fields: Any) -> dict[str, Any]:
    if not packages:
        extra = {"runtime_jar": os.environ["ICEBERG_RUNTIME_JAR"], **extra}
    return {"conn_type": "iceberg_catalog", **fields, "extra": extra}


def hive_connection(metastore: Any, catalog_name: str = "hive", **extra: Any) -> dict[str, Any]:
    """A ``type=hive`` catalog on the thrift metastore; tables go to the metastore's warehouse."""
    return _connection(
        {"catalog_name": catalog_name, "catalog_type": "hive", "warehouse": metastore.warehouse, **extra},
        host=metastore.uri,
    )


def session_catalog_connection(metastore: Any) -> dict[str, Any]:
    """SparkSessionCatalog on ``spark_catalog`` over the metastore: Iceberg and plain tables side by side."""
    return hive_connection(metastore, catalog_name="spark_catalog", session_catalog=True)


def postgres_connection(
    server: Any, warehouse: Path, catalog_name: str = "pg", password: str | None = None
) -> dict[str, Any]:
    """A ``type=jdbc`` catalog on PostgreSQL: user and password come from Login and Password only.

    The driver jar travels through the connection's ``extra_jars``, as a deployment would do it.
    """
    return _connection(
        {
            "catalog_name": catalog_name,
            "catalog_type": "jdbc",
            "warehouse": warehouse.as_uri(),
            "extra_jars": POSTGRES_JDBC,
        },
        host=server.jdbc_uri,
        login=server.user,
        password=server.password if password is None else password,
    )


def sqlite_connection(database: Path, warehouse: Path, catalog_name: str = "lite") -> dict[str, Any]:
    """A ``type=jdbc`` catalog in a SQLite file (no credentials)."""
    return _connection(
        {
            "catalog_name": catalog_name,
            "catalog_type": "jdbc",
            "warehouse": warehouse.as_uri(),
            "extra_jars": SQLITE_JDBC,
        },
        host=f"jdbc:sqlite:{database}",
    )


def custom_jdbc_connection(server: Any, warehouse: Path, catalog_name: str = "custom_pg") -> dict[str, Any]:
    """Iceberg's JdbcCatalog named as a custom ``catalog_impl`` (no ``catalog_type``).

    A custom class has no standard credential properties, so the connection says where Login and
    Password go. ``jdbc.schema-version=V1`` is what ``catalog_type=jdbc`` sets by itself; a custom
    class gets only what the connection gives it.
    """
    return _connection(
        {
            "catalog_name": catalog_name,
            "catalog_impl": JDBC_CATALOG_IMPL,
            "warehouse": warehouse.as_uri(),
            "login_property": "jdbc.user",
            "password_property": "jdbc.password",
            "catalog_properties": {"jdbc.schema-version": "V1"},
            "extra_jars": POSTGRES_JDBC,
        },
        host=server.jdbc_uri,
        login=server.user,
        password=server.password,
    )


def hadoop_connection(
    warehouse: Path, catalog_name: str, hadoop_properties: dict[str, str] | None = None
) -> dict[str, Any]:
    """A ``type=hadoop`` catalog in a local directory, optionally with per-catalog Hadoop settings."""
    extra: dict[str, Any] = {
        "catalog_name": catalog_name,
        "catalog_type": "hadoop",
        "warehouse": warehouse.as_uri(),
    }
    if hadoop_properties:
        extra["hadoop_properties"] = hadoop_properties
    return _connection(extra)


def rest_connection(rest: Any, secret: str | None = None, token: str | None = None) -> dict[str, Any]:
    """A ``type=rest`` catalog on SeaweedFS: OAuth2 client credentials, or a bearer token alone.

    With ``token`` the connection has no Login and the Password is the token; otherwise Login and
    Password are the OAuth2 client id and secret (``credential``).
    """
    extra = {
        "catalog_name": "rest",
        "catalog_type": "rest",
        "warehouse": rest.warehouse,
        "catalog_properties": {"oauth2-server-uri": rest.oauth2_server_uri, "scope": "catalog"},
    }
    if token is not None:
        return _connection(extra, host=rest.uri, password=token)
    return _connection(
        extra,
        host=rest.uri,
        login=rest.access_key,
        password=rest.secret_key if secret is None else secret,
    )


S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"
#: Picks S3FileIO for s3:// and HadoopFileIO for file:// paths, by each path's scheme.
RESOLVING_FILE_IO = "org.apache.iceberg.io.ResolvingFileIO"


def s3_storage_properties(rest: Any) -> dict[str, str]:
    """S3FileIO's properties for the SeaweedFS S3 endpoint (it vends no storage settings itself)."""
    return {"s3.endpoint": rest.s3_endpoint, "s3.path-style-access": "true", "client.region": rest.region}


def s3_storage_secrets(rest: Any) -> dict[str, str]:
    """S3FileIO's keys for that endpoint: Secret properties, which Airflow masks."""
    return {"s3.access-key-id": rest.access_key, "s3.secret-access-key": rest.secret_key}


def rest_spark_connection(
    rest: Any,
    *,
    packages: bool = True,
    secret: str | None = None,
    catalog_name: str = "rest",
    io_impl: str = S3_FILE_IO,
) -> dict[str, Any]:
    """A ``type=rest`` catalog for Spark: OAuth2 client credentials, tables in S3 through S3FileIO.

    With ``packages`` (the default path a user gets) the connection names no jar: the runtime and
    ``iceberg-aws-bundle`` are Maven coordinates for ``--packages``. Otherwise both are local jars
    (``runtime_jar`` and ``extra_jars``), as on a cluster without Maven Central. ``io_impl``
    :data:`RESOLVING_FILE_IO` suits jobs that also touch local files through the table's FileIO
    (a streaming read's checkpoint).
    """
    extra: dict[str, Any] = {
        "catalog_name": catalog_name,
        "catalog_type": "rest",
        "warehouse": rest.warehouse,
        "io_impl": io_impl,
        "catalog_properties": {
            "oauth2-server-uri": rest.oauth2_server_uri,
            "scope": "catalog",
            **s3_storage_properties(rest),
        },
        "secret_properties": s3_storage_secrets(rest),
    }
    if packages:
        extra["extra_packages"] = os.environ["ICEBERG_AWS_BUNDLE_COORDINATE"]
    else:
        extra["extra_jars"] = os.environ["ICEBERG_AWS_BUNDLE_JAR"]
    return _connection(
        extra,
        packages=packages,
        host=rest.uri,
        login=rest.access_key,
        password=rest.secret_key if secret is None else secret,
    )


def s3a_connection(rest: Any, bucket: str, catalog_name: str = "lake") -> dict[str, Any]:
    """A ``type=hadoop`` catalog on ``s3a://`` through hadoop-aws, against the SeaweedFS S3 endpoint.

    The S3 keys are the connection's Login and Password (``hadoop.fs.s3a.access.key`` /
    ``secret.key``); endpoint, path-style access and region are per-catalog ``hadoop_properties``.
    """
    return _connection(
        {
            "catalog_name": catalog_name,
            "catalog_type": "hadoop",
            "warehouse": f"s3a://{bucket}/warehouse",
            "extra_jars": os.environ["HADOOP_AWS_JARS"],
            "hadoop_properties": {
                "fs.s3a.endpoint": rest.s3_endpoint,
                "fs.s3a.path.style.access": "true",
                "fs.s3a.endpoint.region": rest.region,
            },
        },
        login=rest.access_key,
        password=rest.secret_key,
    )


def nessie_connection(nessie: Any, warehouse: Path, ref: str | None = None) -> dict[str, Any]:
    """A ``type=nessie`` catalog (Iceberg's NessieCatalog, inside the runtime jar) on a local warehouse.

    ``ref`` goes to ``catalog_properties``: the branch the catalog reads and commits to.
    """
    extra: dict[str, Any] = {
        "catalog_name": "nessie",
        "catalog_type": "nessie",
        "warehouse": warehouse.as_uri(),
    }
    if ref:
        extra["catalog_properties"] = {"ref": ref}
    return _connection(extra, host=nessie.api_uri)


# --------------------------------------------------------------------------- independent readers


def rest_reader(rest: Any) -> Any:
    """pyiceberg's RestCatalog on the same REST catalog, with its own OAuth2 login and S3 access."""
    from pyiceberg.catalog.rest import RestCatalog

    return RestCatalog("rest_reader", **rest.catalog_properties())


def s3_filesystem(rest: Any, allow_bucket_creation: bool = False) -> Any:
    """pyarrow's S3 client on the SeaweedFS S3 endpoint (to list, create buckets, read raw files)."""
    from pyarrow import fs

    return fs.S3FileSystem(
        access_key=rest.access_key,
        secret_key=rest.secret_key,
        endpoint_override=rest.s3_endpoint,
        scheme="http",
        region=rest.region,
        allow_bucket_creation=allow_bucket_creation,
    )


def s3_objects(rest: Any, bucket: str) -> dict[str, int]:
    """Every object in a bucket with its size: a before/after picture of what a run wrote."""
    from pyarrow import fs

    infos = s3_filesystem(rest).get_file_info(fs.FileSelector(bucket, recursive=True))
    return {info.path: info.size for info in infos if info.type == fs.FileType.File}


def hive_reader(metastore: Any, catalog_name: str = "hive") -> Any:
    """pyiceberg's HiveCatalog on the same metastore."""
    from pyiceberg.catalog.hive import HiveCatalog

    return HiveCatalog(catalog_name, uri=metastore.uri, warehouse=metastore.warehouse)


def postgres_reader(server: Any, warehouse: Path, catalog_name: str = "pg") -> Any:
    """pyiceberg's SqlCatalog on the same PostgreSQL database and catalog name."""
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(catalog_name, uri=server.sqlalchemy_uri, warehouse=warehouse.as_uri())

"""Over Spark Connect, a task's Hadoop file system settings cannot be its own: they are refused.

Iceberg hands a catalog's ``hadoop.*`` properties to a Hadoop Configuration of that catalog, but
``FileSystem.get`` caches file systems for the whole JVM by scheme, authority (the bucket) and
user. On a Spark Connect server every session is the same JVM and user, so the first session to
touch ``s3a://bucket`` fixes the keys and endpoint every later session gets for it: a task with
wrong keys reads and writes with another task's. Turning the cache off
(``fs.<scheme>.impl.disable.cache``) would make a new, never-closed FileSystem (thread and
connection pools) for every file Iceberg opens, on a server that runs for months. So such
settings are refused in ``execute()``, before any session opens, naming each one the way the
connection form does; the ways out are the server's own ``spark.hadoop.fs.*`` and S3FileIO,
whose clients belong to one session's catalog (docs/spark-connect.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_iceberg.catalog.config import CatalogConfig

#: Hadoop settings a FileSystem reads once, when it is made; Hadoop then caches it JVM-wide.
FILE_SYSTEM_PREFIXES = ("fs.", "dfs.")
S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"


def shared_file_system_refusal(
    configs: Iterable[CatalogConfig], user_conf: Mapping[str, Any] | None
) -> str | None:
    """Why the task's Hadoop file system settings cannot be its own over Spark Connect, or None.

    :param configs: The task's catalog connections.
    :param user_conf: The operator's own ``conf``.
    """
    found = [where for config in configs for where in _file_system_settings(config)]
    found += [f"conf {key!r}" for key in map(str, user_conf or {}) if _is_file_system_conf(key)]
    if not found:
        return None
    return (
        f"per-task Hadoop file system settings cannot work over Spark Connect: {', '.join(found)}. "
        "Hadoop keeps one file system per scheme and bucket for the whole server, made with the "
        "settings of the first session that used it, so a task would read and write with whichever "
        "keys and endpoint came first. Set them on the server when it starts (--conf "
        "spark.hadoop.fs.s3a.access.key=...), or use Iceberg's S3FileIO (io_impl "
        f"{S3_FILE_IO} with s3.* catalog properties), whose clients belong to each task's session, "
        "or use a spark-submit connection (conn_type 'spark') for this task"
    )


def _file_system_settings(config: CatalogConfig) -> list[str]:
    """Where a catalog connection sets per-catalog Hadoop file system settings, in its own words.

    With ``connect_server_credentials`` the catalog's secrets are the server's (one value per
    catalog for every session), never sent per task, so they are not per-task settings.
    """
    from airflow_iceberg.catalog.spark_settings import is_secret_property

    def sent(key: str | None) -> bool:
        secret = key in config.secret_keys() or is_secret_property(str(key))
        return not (config.connect_server_credentials and secret)

    found = [
        f"hadoop_properties {key!r}"
        for key in config.hadoop_properties
        if _is_file_system_property(key)
    ]
    for field_name, properties in (
        ("catalog_properties", config.catalog_properties),
        ("secret_properties", config.secret_properties),
    ):
        found += [
            f"{field_name} {key!r}" for key in properties if _is_hadoop_file_system_key(key) and sent(key)
        ]
    login_key, password_key = config.credential_properties()
    for field_name, value, key in (
        ("login", config.login, login_key),
        ("password", config.password, password_key),
    ):
        if value and key and _is_hadoop_file_system_key(key) and sent(key):
            found.append(f"{field_name} (it sets {key})")
    return found


def _is_file_system_conf(key: str) -> bool:
    """``spark.hadoop.fs.*``, ``spark.sql.catalog.<name>.hadoop.fs.*``, or a bare ``fs.*`` (and ``dfs.*``).

    A bare key counts too: Spark copies every session setting into the Hadoop Configuration it
    makes for a catalog (``SessionState.newHadoopConf``), so ``fs.s3a.endpoint`` set on a session
    reaches the server-wide file system cache exactly like ``spark.hadoop.fs.s3a.endpoint``.
    """
    if _is_file_system_property(key):
        return True
    if key.startswith("spark.hadoop."):
        return _is_file_system_property(key.removeprefix("spark.hadoop."))
    parts = key.split(".", 4)  # spark, sql, catalog, <name>, <catalog property>
    return key.startswith("spark.sql.catalog.") and len(parts) == 5 and _is_hadoop_file_system_key(parts[4])


def _is_hadoop_file_system_key(catalog_property: str) -> bool:
    return catalog_property.startswith("hadoop.") and _is_file_system_property(
        catalog_property.removeprefix("hadoop.")
    )


def _is_file_system_property(hadoop_key: str) -> bool:
    return hadoop_key.startswith(FILE_SYSTEM_PREFIXES)

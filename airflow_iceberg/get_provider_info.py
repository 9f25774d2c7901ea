"""Provider registration, found by Airflow through the ``apache_airflow_provider`` entry point.

``conn-fields`` declares the connection form for the Airflow 3 UI (secrets use
``"format": "password"`` so the UI masks them); the keys are the connection's extra fields,
read back by :func:`airflow_iceberg.catalog.config.config_from_connection`.
"""

from __future__ import annotations

from typing import Any

from airflow_iceberg import __version__

_STRING = {"type": ["string", "null"]}


def _field(label: str, description: str, **schema: Any) -> dict[str, Any]:
    return {"label": label, "description": description, "schema": {**_STRING, **schema}}


CONN_FIELDS: dict[str, Any] = {
    "catalog_name": _field(
        "Catalog name",
        "Spark catalog name: tables are addressed as <catalog_name>.<namespace>.<table>. "
        "Use spark_catalog with Session catalog.",
        default="iceberg",
    ),
    "catalog_type": _field(
        "Catalog type",
        "hadoop, hive, rest, jdbc, glue or nessie. Leave empty when Catalog impl is set.",
        enum=["hadoop", "hive", "rest", "jdbc", "glue", "nessie", None],
        default="hadoop",
    ),
    "catalog_impl": _field(
        "Catalog impl", "A custom org.apache.iceberg.catalog.Catalog class (catalog-impl)."
    ),
    "warehouse": _field(
        "Warehouse", "Base location of the tables, e.g. file:///data/warehouse or s3://bucket/wh."
    ),
    "io_impl": _field("IO impl", "FileIO class (io-impl), e.g. org.apache.iceberg.aws.s3.S3FileIO."),
    "default_namespace": _field("Default namespace", "The catalog's default-namespace."),
    "cache_enabled": {
        "label": "Cache enabled",
        "description": "Catalog cache-enabled (Iceberg default true).",
        "schema": {"type": ["boolean", "null"]},
    },
    "cache_expiration_interval_ms": {
        "label": "Cache expiration (ms)",
        "description": "cache.expiration-interval-ms: -1 never expires, 0 disables caching "
        "(Iceberg default 30000).",
        "schema": {"type": ["integer", "null"], "minimum": -1},
    },
    "catalog_properties": _field(
        "Catalog properties (JSON)",
        'Any other catalog properties, e.g. {"oauth2-server-uri": "..."}. '
        "Keys naming a password, secret, token, credential or access key are treated as secrets.",
        format="json",
    ),
    "hadoop_properties": _field(
        "Hadoop properties (JSON)",
        'Per-catalog Hadoop settings, e.g. {"fs.s3a.endpoint": "http://minio:9000"}, '
        "set as spark.sql.catalog.<name>.hadoop.*.",
        format="json",
    ),
    "login_property": _field(
        "Login property",
        "Catalog property the Login fills, overriding the type's default "
        "(e.g. access.key.id for a DLF catalog-impl).",
    ),
    "password_property": _field(
        "Password property",
        "Catalog property the Password fills, overriding the type's default (e.g. access.key.secret).",
    ),
    "session_catalog": {
        "label": "Session catalog",
        "description": "Wrap Spark's built-in catalog with SparkSessionCatalog (catalog name spark_catalog).",
        "schema": {"type": ["boolean", "null"], "default": False},
    },
    "iceberg_version": _field(
        "Iceberg version", "Version of iceberg-spark-runtime to load.", default="1.10.2"
    ),
    "spark_version": _field("Spark version", "Spark major.minor of the cluster.", default="3.5"),
    "scala_version": _field("Scala version", "Scala binary version of the Spark build.", default="2.12"),
    "runtime_jar": _field(
        "Runtime jar",
        "Path or URL of an iceberg-spark-runtime jar; replaces the Maven "
        "coordinate (use when the cluster cannot reach Maven Central).",
    ),
    "extra_jars": _field("Extra jars", "Comma-separated jars, e.g. a JDBC driver."),
    "extra_packages": _field(
        "Extra packages",
        "Comma-separated Maven coordinates, e.g. org.apache.iceberg:iceberg-aws-bundle:1.10.1.",
    ),
}


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-iceberg",
        "name": "Apache Iceberg on Spark",
        "description": "Iceberg catalog connections and DataFrameWriterV2 / time-travel operators "
        "that run through spark-submit.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Apache Iceberg (Spark)",
                "external-doc-url": "https://iceberg.apache.org/",
                "tags": ["apache"],
            }
        ],
        "operators": [
            {
                "integration-name": "Apache Iceberg (Spark)",
                "python-modules": [
                    "airflow_iceberg.operators.write",
                    "airflow_iceberg.operators.read",
                    "airflow_iceberg.operators.maintenance",
                ],
            }
        ],
        "hooks": [
            {
                "integration-name": "Apache Iceberg (Spark)",
                "python-modules": ["airflow_iceberg.hooks.iceberg_catalog"],
            }
        ],
        "connection-types": [
            {
                "hook-class-name": "airflow_iceberg.hooks.iceberg_catalog.IcebergCatalogHook",
                "hook-name": "Iceberg Catalog (Spark)",
                "connection-type": "iceberg_catalog",
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "port"],
                    "relabeling": {
                        "host": "URI",
                        "login": "Login (user, client id or access key id)",
                        "password": "Password (secret, token or access key secret)",
                    },
                    "placeholders": {
                        "host": "thrift://metastore:9083, http://rest:8181 or jdbc:postgresql://db/cat"
                    },
                },
                "conn-fields": CONN_FIELDS,
            }
        ],
    }

"""Provider registration, found by Airflow through the ``apache_airflow_provider`` entry point.

``conn-fields`` declares the connection form for the Airflow 3 UI; the keys are the connection's
extra fields, read back by :func:`airflow_iceberg.catalog.config.config_from_connection`. How the
Airflow 3.3 UI turns each JSON schema into a widget, and why the schemas look the way they do:

- a ``type`` without ``"null"`` marks the field required (and the form refuses to save it empty);
- an ``enum`` becomes a clearable drop-down, so ``null`` is never listed as a choice;
- ``"type": "object"`` becomes a multi-line JSON editor and is stored as a JSON object, which is
  what lets Airflow mask secret-named keys inside it (it cannot look inside a string);
- a key whose name contains ``secret``, ``password``, ``token``… is masked by Airflow as a whole,
  so ``secret_properties`` is masked and the property-name fields avoid those words.
"""

from __future__ import annotations

from typing import Any

from airflow_iceberg import __version__

_OPTIONAL = {"type": ["string", "null"]}
_REQUIRED = {"type": "string"}


def _field(label: str, description: str, **schema: Any) -> dict[str, Any]:
    return {"label": label, "description": description, "schema": {**_OPTIONAL, **schema}}


def _required(label: str, description: str, **schema: Any) -> dict[str, Any]:
    return {"label": label, "description": description, "schema": {**_REQUIRED, **schema}}


def _json_object(label: str, description: str) -> dict[str, Any]:
    return {"label": label, "description": description, "schema": {"type": ["object", "null"]}}


CONN_FIELDS: dict[str, Any] = {
    "catalog_name": _required(
        "Catalog name",
        "Spark catalog name: tables are addressed as <catalog_name>.<namespace>.<table>. "
        "Use spark_catalog with Session catalog.",
        default="iceberg",
    ),
    "catalog_type": _required(
        "Catalog type",
        "hadoop, hive, rest, jdbc, glue or nessie; custom means the class in Catalog impl. "
        "URI: thrift://… for hive, http(s)://… for rest and nessie, postgresql://… or "
        "sqlite:/path for jdbc.",
        enum=["hadoop", "hive", "rest", "jdbc", "glue", "nessie", "custom"],
        default="hadoop",
    ),
    "catalog_impl": _field(
        "Catalog impl",
        "With Catalog type custom: an org.apache.iceberg.catalog.Catalog class (catalog-impl).",
    ),
    "warehouse": _field(
        "Warehouse",
        "Base location of the tables, e.g. file:///data/warehouse or s3://bucket/wh. "
        "Required for hadoop, jdbc and glue.",
    ),
    "io_impl": _field("IO impl", "FileIO class (io-impl), e.g. org.apache.iceberg.aws.s3.S3FileIO."),
    "default_namespace": _field("Default namespace", "The catalog's default-namespace."),
    "cache_enabled": _field(
        "Cache enabled",
        "cache-enabled. Empty: Iceberg's default, which is on.",
        enum=["true", "false"],
        values_display={"true": "on", "false": "off"},
    ),
    "cache_expiration_interval_ms": {
        "label": "Cache expiration (ms)",
        "description": "cache.expiration-interval-ms: -1 never expires, 0 disables caching. "
        "Empty: Iceberg's default, 30000.",
        "schema": {"type": ["integer", "null"], "minimum": -1},
    },
    "catalog_properties": _json_object(
        "Catalog properties (JSON)",
        'Other catalog properties, e.g. {"oauth2-server-uri": "https://idp/token", "scope": "catalog"}. '
        "Put secrets in Secret properties instead.",
    ),
    "secret_properties": _json_object(
        "Secret properties (JSON)",
        'Catalog properties that are secrets, e.g. {"credential": "id:secret"} or '
        '{"hadoop.fs.s3a.secret.key": "..."}. Airflow masks every value; they reach Spark '
        "only out of band, never on the command line.",
    ),
    "hadoop_properties": _json_object(
        "Hadoop properties (JSON)",
        'Per-catalog Hadoop settings, e.g. {"fs.s3a.endpoint": "http://minio:9000"}, '
        "set as spark.sql.catalog.<name>.hadoop.*. Put secrets in Secret properties.",
    ),
    "login_property": _field(
        "Login goes to",
        "Catalog property the Login fills, overriding the type's default "
        "(e.g. access.key.id for a DLF catalog-impl; needed for hive and custom).",
    ),
    "pass_property": _field(
        "Password goes to",
        "Catalog property the Password fills, overriding the type's default "
        "(e.g. access.key.secret; needed for hive and custom).",
    ),
    "session_catalog": {
        "label": "Session catalog",
        "description": "Wrap Spark's built-in catalog with SparkSessionCatalog (catalog name spark_catalog).",
        "schema": {"type": ["boolean", "null"], "default": False},
    },
    "iceberg_version": _required(
        "Iceberg version", "Version of iceberg-spark-runtime to load.", default="1.10.2"
    ),
    "spark_version": _required(
        "Spark version", "Spark major.minor of the cluster (3.5, 4.0, 4.1).", default="3.5"
    ),
    "scala_version": _field(
        "Scala version", "Scala binary version of the Spark build; blank: 2.12 for Spark 3, 2.13 for Spark 4."
    ),
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
                    "airflow_iceberg.operators.merge",
                    "airflow_iceberg.operators.branches",
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
        "asset-uris": [
            {
                "schemes": ["iceberg"],
                "handler": "airflow_iceberg.assets.sanitize_uri",
                "factory": "airflow_iceberg.assets.create_asset",
                "to_openlineage_converter": "airflow_iceberg.assets.convert_asset_to_openlineage",
            }
        ],
        "sensors": [
            {
                "integration-name": "Apache Iceberg (Spark)",
                "python-modules": ["airflow_iceberg.sensors.snapshot"],
            }
        ],
        "triggers": [
            {
                "integration-name": "Apache Iceberg (Spark)",
                "python-modules": ["airflow_iceberg.triggers.snapshot"],
            }
        ],
        "connection-types": [
            {
                "hook-class-name": "airflow_iceberg.hooks.iceberg_catalog.IcebergCatalogHook",
                "hook-name": "Iceberg Catalog (Spark)",
                "connection-type": "iceberg_catalog",
                "ui-field-behaviour": {
                    "hidden-fields": ["schema"],
                    "relabeling": {
                        "host": "URI",
                        "port": "Port (optional)",
                        "login": "Login (user, client id or access key id)",
                        "password": "Password (secret, token or access key secret)",
                    },
                    "placeholders": {
                        "host": "thrift://metastore:9083, http://rest:8181 or postgresql://db:5432/cat",
                        "port": "the URI's port; lets Test in the connection list work (see docs)",
                    },
                },
                "conn-fields": CONN_FIELDS,
            }
        ],
    }

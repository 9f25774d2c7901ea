"""Provider registration, found by Airflow through the ``apache_airflow_provider`` entry point.

``conn-fields`` declares the connection form for the Airflow 3 UI; the keys are the connection's
extra fields, read back by :func:`airflow_iceberg.catalog.config.config_from_connection`. How the
Airflow 3.3 UI turns each JSON schema into a widget, and why the schemas look the way they do:

- a ``type`` without ``"null"`` marks the field required (and the form refuses to save it empty);
- an ``enum`` becomes a clearable drop-down, so ``null`` is never listed as a choice;
- ``"type": "object"`` becomes a multi-line JSON editor and is stored as a JSON object, which is
  what lets Airflow mask secret-named keys inside it (it cannot look inside a string);
- a key whose name contains ``secret``, ``password``, ``token``… is masked by Airflow as a whole,
  so ``secret_properties`` is masked and the property-name fields avoid those words;
- ``section`` in a schema puts the field in a section of its own (an accordion item), in the
  order of ``CONN_FIELDS``; fields without one stay in Airflow's "Extra Fields".
"""

from __future__ import annotations

from typing import Any

from airflow_iceberg import __version__
from airflow_iceberg.catalog.iceberg_runtimes import defaults_text

_OPTIONAL = {"type": ["string", "null"]}
_REQUIRED = {"type": "string"}


def _field(label: str, description: str, **schema: Any) -> dict[str, Any]:
    return {"label": label, "description": description, "schema": {**_OPTIONAL, **schema}}


def _required(label: str, description: str, **schema: Any) -> dict[str, Any]:
    return {"label": label, "description": description, "schema": {**_REQUIRED, **schema}}


def _json_object(label: str, description: str, **schema: Any) -> dict[str, Any]:
    return {"label": label, "description": description, "schema": {"type": ["object", "null"], **schema}}


#: The sections of the form after Standard Fields, in the order a person fills them in: the
#: catalog (type, warehouse, name), then its credentials, its properties, and the Spark runtime.
#: The first is Airflow's own "Extra Fields" section; each other one is a section of its own.
CREDENTIALS = "Credentials"
PROPERTIES = "Catalog and Hadoop properties"
RUNTIME = "Spark and Iceberg runtime"
_PASTE = " Paste a whole JSON object: typed key by key, the editor re-formats it and the cursor jumps."

CONN_FIELDS: dict[str, Any] = {
    "catalog_type": _required(
        "Catalog type",
        "hadoop, hive, rest, jdbc, glue or nessie; custom means the class in Catalog impl. "
        "URI: thrift://… for hive, http(s)://… for rest and nessie, postgresql://… or "
        "sqlite:/path for jdbc.",
        enum=["hadoop", "hive", "rest", "jdbc", "glue", "nessie", "custom"],
        default="hadoop",
    ),
    "warehouse": _field(
        "Warehouse",
        "Base location of the tables, e.g. file:///data/warehouse or s3://bucket/wh. "
        "Required for hadoop, jdbc and glue.",
    ),
    "catalog_name": _required(
        "Catalog name",
        "Spark catalog name: tables are addressed as <catalog_name>.<namespace>.<table>. "
        "Use spark_catalog with Session catalog.",
        default="iceberg",
    ),
    "catalog_impl": _field(
        "Catalog impl",
        "With Catalog type custom: an org.apache.iceberg.catalog.Catalog class (catalog-impl).",
    ),
    "secret_properties": _json_object(
        "Secret properties (JSON)",
        'Catalog properties that are secrets, e.g. {"credential": "id:secret"} or '
        '{"hadoop.fs.s3a.secret.key": "..."}. Airflow masks every value; they reach Spark '
        "only out of band, never on the command line." + _PASTE,
        section=CREDENTIALS,
    ),
    "login_property": _field(
        "Login goes to",
        "Catalog property the Login fills, overriding the type's default "
        "(e.g. access.key.id for a DLF catalog-impl; needed for hive and custom).",
        section=CREDENTIALS,
    ),
    "pass_property": _field(
        "Password goes to",
        "Catalog property the Password fills, overriding the type's default "
        "(e.g. access.key.secret; needed for hive and custom).",
        section=CREDENTIALS,
    ),
    "connect_server_credentials": {
        "label": "Credentials on the Connect server",
        "description": "Over Spark Connect, the server defines this catalog's secrets "
        "(spark.sql.catalog.<name>.<key> in its spark-defaults.conf); tasks send only the other "
        "settings. Off: a task with secrets is refused over Spark Connect. spark-submit ignores it.",
        "schema": {"type": ["boolean", "null"], "default": False, "section": CREDENTIALS},
    },
    "kubernetes_credentials": _field(
        "Kubernetes Secret with the credentials (cluster mode)",
        "In Kubernetes cluster deploy mode: the Secret, in the driver's namespace, that holds this "
        "catalog's secrets, one key per catalog property (credential, jdbc.password ...) or Spark "
        "setting (spark.*); mounted into the driver pod. Leave Password and Secret properties empty then.",
        section=CREDENTIALS,
    ),
    "catalog_properties": _json_object(
        "Catalog properties (JSON)",
        'Other catalog properties, e.g. {"oauth2-server-uri": "https://idp/token", "scope": "catalog"}. '
        "Put secrets in Secret properties instead." + _PASTE,
        section=PROPERTIES,
    ),
    "hadoop_properties": _json_object(
        "Hadoop properties (JSON)",
        'Per-catalog Hadoop settings, e.g. {"fs.s3a.endpoint": "http://minio:9000"}, '
        "set as spark.sql.catalog.<name>.hadoop.*. Put secrets in Secret properties." + _PASTE,
        section=PROPERTIES,
    ),
    "io_impl": _field(
        "IO impl", "FileIO class (io-impl), e.g. org.apache.iceberg.aws.s3.S3FileIO.", section=PROPERTIES
    ),
    "default_namespace": _field("Default namespace", "The catalog's default-namespace.", section=PROPERTIES),
    "cache_enabled": _field(
        "Cache enabled",
        "cache-enabled. Empty: Iceberg's default, which is on.",
        enum=["true", "false"],
        values_display={"true": "on", "false": "off"},
        section=PROPERTIES,
    ),
    "cache_expiration_interval_ms": {
        "label": "Cache expiration (ms)",
        "description": "cache.expiration-interval-ms: -1 never expires, 0 disables caching. "
        "Empty: Iceberg's default, 30000.",
        "schema": {"type": ["integer", "null"], "minimum": -1, "section": PROPERTIES},
    },
    "session_catalog": {
        "label": "Session catalog",
        "description": "Wrap Spark's built-in catalog with SparkSessionCatalog (catalog name spark_catalog).",
        "schema": {"type": ["boolean", "null"], "default": False, "section": PROPERTIES},
    },
    "iceberg_version": _field(
        "Iceberg version",
        "Release of iceberg-spark-runtime to load, e.g. 1.10.2. Empty: the newest built for the "
        f"Spark version ({defaults_text()}).",
        section=RUNTIME,
    ),
    "spark_version": _required(
        "Spark version", "Spark major.minor of the cluster (3.5, 4.0, 4.1).", default="3.5", section=RUNTIME
    ),
    "scala_version": _field(
        "Scala version",
        "Scala binary version of the Spark build; blank: 2.12 for Spark 3, 2.13 for Spark 4.",
        section=RUNTIME,
    ),
    "runtime_jar": _field(
        "Runtime jar",
        "Path or URL of an iceberg-spark-runtime jar; replaces the Maven "
        "coordinate (use when the cluster cannot reach Maven Central).",
        section=RUNTIME,
    ),
    "extra_jars": _field("Extra jars", "Comma-separated jars, e.g. a JDBC driver.", section=RUNTIME),
    "extra_packages": _field(
        "Extra packages",
        "Comma-separated Maven coordinates, e.g. org.apache.iceberg:iceberg-aws-bundle:1.12.0.",
        section=RUNTIME,
    ),
}

#: How the form labels the connection's own fields (``ui-field-behaviour`` relabels Host).
STANDARD_LABELS = {"host": "URI", "port": "Port", "login": "Login", "password": "Password"}
#: Port's placeholder: Airflow <= 3.3.2's list-row Test sends port 0 for an empty Port, and its
#: API refuses a port that differs from the stored one (NULL); 0 or the URI's port matches.
PORT_PLACEHOLDER = "0, or the URI's port: Test in the list needs one"


def form_label(field_name: str) -> str:
    """The label the connection form shows for a field (a standard one or an extra), else its key."""
    if field_name in STANDARD_LABELS:
        return STANDARD_LABELS[field_name]
    return str(CONN_FIELDS.get(field_name, {}).get("label", field_name))


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
                    "airflow_iceberg.operators.audit",
                    "airflow_iceberg.operators.merge",
                    "airflow_iceberg.operators.branches",
                    "airflow_iceberg.operators.maintenance",
                    "airflow_iceberg.operators.health",
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
                    "relabeling": {"host": STANDARD_LABELS["host"]},
                    "placeholders": {
                        "host": "thrift://metastore:9083, http://rest:8181 or postgresql://db:5432/cat",
                        "port": PORT_PLACEHOLDER,
                        "login": "user, OAuth2 client id or access key id",
                        "password": "password, client secret, token or secret key",
                    },
                },
                "conn-fields": CONN_FIELDS,
            }
        ],
    }

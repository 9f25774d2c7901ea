"""The pure mapping from a :class:`CatalogConfig` to the Spark settings that load that catalog.

Output is split by how each setting may travel: ``conf`` is safe to put on spark-submit's
command line, ``secret_conf`` holds credentials and must reach the driver out of band (the
operators pass it in a file only the task's user can read, see ``operators/base.py``).

A value is secret by where it comes from as well as by its name: whatever the connection's
Password field fills is secret whatever property it fills (``pass_property`` may name
anything), and so is every property whose name looks like a credential.

``spark.redaction.regex`` is part of the output because it must cover every secret key: Spark
redacts a setting in its UI and event log only when the pattern matches its key (or value), and
a Password that fills a harmless-looking property (``jdbc.pw``) matches no generic pattern.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from airflow_iceberg.catalog.config import CatalogConfig, field_error
from airflow_iceberg.catalog.secret_detection import (
    SECRET_PROPERTY_RE,
    SECRET_WORDS_PATTERN,
    is_secret_property,
)
from airflow_iceberg.exceptions import CatalogSettingsConflictError

ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
#: What every ``iceberg-spark-runtime`` coordinate starts with, whatever its Spark line.
RUNTIME_PREFIX = "org.apache.iceberg:iceberg-spark-runtime-"
SPARK_CATALOG_CLASS = "org.apache.iceberg.spark.SparkCatalog"
SESSION_CATALOG_CLASS = "org.apache.iceberg.spark.SparkSessionCatalog"
EXTENSIONS_KEY = "spark.sql.extensions"
REDACTION_KEY = "spark.redaction.regex"
#: Spark's default redaction pattern misses Iceberg REST's ``credential``, encryption keys, SAS
#: entries...; this one is the very pattern that finds a secret property (``secret_detection``).
REDACTION_REGEX = SECRET_WORDS_PATTERN
#: What :data:`REDACTION_REGEX` matches, as a Python pattern (Spark's is a Java one).
_REDACTED_WORDS_RE = SECRET_PROPERTY_RE


@dataclass(frozen=True)
class SparkSettings:
    """Spark settings for one or more catalogs, split by how they may travel."""

    conf: dict[str, str] = field(default_factory=dict)
    secret_conf: dict[str, str] = field(default_factory=dict, repr=False)
    jars: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    catalog_names: tuple[str, ...] = ()

    def merged(self, other: SparkSettings) -> SparkSettings:
        """Combine the settings of two catalogs, refusing any setting they would fight over."""
        clashes = sorted(set(self.catalog_names) & set(other.catalog_names))
        if clashes:
            raise CatalogSettingsConflictError(
                f"two Iceberg catalog connections both define catalog {', '.join(clashes)!r}; "
                "give each connection its own catalog_name"
            )
        secret_conf = _merge_conf(self.secret_conf, other.secret_conf)
        conf = _merge_conf(self.conf, other.conf)
        if REDACTION_KEY in conf:  # one pattern for the secrets of both
            conf[REDACTION_KEY] = redaction_regex(secret_conf)
        return SparkSettings(
            conf=conf,
            secret_conf=secret_conf,
            jars=_unique(self.jars + other.jars),
            packages=_unique(self.packages + other.packages),
            catalog_names=self.catalog_names + other.catalog_names,
        )

    @property
    def all_conf(self) -> dict[str, str]:
        """Every setting, secrets included: for a SparkSession built in-process (tests, notebooks)."""
        return {**self.conf, **self.secret_conf}


def runtime_coordinate(config: CatalogConfig) -> str:
    """The Maven coordinate of the iceberg-spark-runtime matching the Spark and Scala versions."""
    spark_minor = ".".join(config.spark_version.split(".")[:2])
    return f"{RUNTIME_PREFIX}{spark_minor}_{config.scala_version}:{config.iceberg_version}"


def catalog_properties(config: CatalogConfig) -> dict[str, str]:
    """The catalog's properties, without the ``spark.sql.catalog.<name>.`` prefix."""
    properties: dict[str, str] = {}
    if config.catalog_impl:
        properties["catalog-impl"] = config.catalog_impl
    else:
        properties["type"] = str(config.catalog_type)
    for key, value in (
        ("warehouse", config.warehouse),
        ("uri", config.uri),
        ("io-impl", config.io_impl),
        ("default-namespace", config.default_namespace),
        ("cache-enabled", _bool_text(config.cache_enabled)),
        ("cache.expiration-interval-ms", config.cache_expiration_interval_ms),
    ):
        if value is not None:
            properties[key] = str(value)
    if config.catalog_type == "jdbc":
        # Without it Iceberg creates the legacy v0 schema, which pyiceberg and views cannot use.
        properties["jdbc.schema-version"] = "V1"
    properties.update(_credentials(config))
    properties.update({f"jdbc.{name}": value for name, value in config.uri_secrets.items()})
    for source, extra in (
        ("catalog_properties", config.catalog_properties),
        ("secret_properties", config.secret_properties),
        ("hadoop_properties", _hadoop_prefixed(config.hadoop_properties)),
    ):
        for key, value in extra.items():
            if key in properties and properties[key] != value and key != "jdbc.schema-version":
                raise field_error(
                    source,
                    f"{key!r} is already set by a dedicated connection field; set it in one place only",
                )
            properties[key] = value
    return properties


def _credentials(config: CatalogConfig) -> dict[str, str]:
    login_key, password_key = config.credential_properties()
    if login_key and login_key == password_key:
        return {login_key: f"{config.login}:{config.password}"} if config.login else {}
    credentials = {}
    if config.login and login_key:
        credentials[login_key] = config.login
    if config.password and password_key:
        credentials[password_key] = config.password
    return credentials


def _hadoop_prefixed(properties: dict[str, str]) -> dict[str, str]:
    """Hadoop keys as catalog properties: Iceberg strips ``hadoop.`` again, so every key gets it,
    Hadoop's own ``hadoop.*`` keys (``hadoop.rpc.protection``) included."""
    return {f"hadoop.{key}": value for key, value in properties.items()}


def _bool_text(value: bool | None) -> str | None:
    return None if value is None else str(value).lower()


def redaction_regex(secret_conf: Iterable[str], *patterns: str | None) -> str:
    """A ``spark.redaction.regex`` that matches every key in ``secret_conf``, and what ``patterns`` match.

    :data:`REDACTION_REGEX` covers keys that name a credential; each other secret key (a Password
    filling ``jdbc.pw``) is added literally, every character that is not a letter or digit in
    brackets (a Java and Python regex alike). Other patterns (the user's own) are kept whole, each
    in a group, so their flags and alternatives stay theirs.
    """
    literal = [
        "".join(char if char.isalnum() else f"[{char}]" for char in key)
        for key in sorted(set(secret_conf))
        if not _REDACTED_WORDS_RE.search(key)
    ]
    ours = "|".join([REDACTION_REGEX, *literal])
    theirs = [f"(?:{pattern})" for pattern in dict.fromkeys(patterns) if pattern and pattern != ours]
    return "|".join([*theirs, f"(?:{ours})"]) if theirs else ours


def spark_settings(config: CatalogConfig) -> SparkSettings:
    """Map one catalog's configuration to the Spark settings that load it."""
    name = config.catalog_name
    prefix = f"spark.sql.catalog.{name}"
    conf = {
        EXTENSIONS_KEY: ICEBERG_EXTENSIONS,
        prefix: SESSION_CATALOG_CLASS if config.session_catalog else SPARK_CATALOG_CLASS,
        REDACTION_KEY: REDACTION_REGEX,  # extended below, once the secret keys are known
    }
    secret_conf: dict[str, str] = {}
    secret_keys = config.secret_keys()
    for key, value in catalog_properties(config).items():
        target = secret_conf if key in secret_keys or is_secret_property(key) else conf
        target[f"{prefix}.{key}"] = value
    conf[REDACTION_KEY] = redaction_regex(secret_conf)
    if config.session_catalog and config.kind == "hive":
        # The wrapped built-in catalog must see the same metastore for the non-Iceberg tables.
        conf["spark.sql.catalogImplementation"] = "hive"
        if config.uri:
            conf["spark.hadoop.hive.metastore.uris"] = config.uri
        if config.warehouse:
            conf["spark.sql.warehouse.dir"] = config.warehouse
    jars = (config.runtime_jar,) if config.runtime_jar else ()
    packages = () if config.runtime_jar else (runtime_coordinate(config),)
    return SparkSettings(
        conf=conf,
        secret_conf=secret_conf,
        jars=_unique(jars + config.extra_jars),
        packages=_unique(packages + config.extra_packages),
        catalog_names=(name,),
    )


def runtime_conflict(configs: Iterable[CatalogConfig]) -> str | None:
    """Why these catalogs cannot share one spark-submit: they name different runtime coordinates.

    A connection saved by the old form keeps ``1.10.2`` while one made since follows its Spark
    line (``1.12.0``). With both on ``--packages`` Ivy keeps one, and a catalog silently runs the
    other's Iceberg. Over Spark Connect neither is loaded (the server's runtime runs), so the
    caller asks only for spark-submit.
    """
    catalogs: dict[str, list[str]] = {}
    for config in configs:
        if not config.runtime_jar:  # a jar's contents are not known from its path
            catalogs.setdefault(runtime_coordinate(config), []).append(repr(config.catalog_name))
    if len(catalogs) < 2:
        return None
    listed = "; ".join(f"{', '.join(names)}: {coordinate}" for coordinate, names in catalogs.items())
    return (
        f"the catalogs load different Iceberg runtimes ({listed}); one spark-submit loads one runtime "
        "(Ivy would keep one, and a catalog would run the other's Iceberg): give the connections the "
        "same Iceberg version and Spark version"
    )


def combined_settings(configs: Iterable[CatalogConfig]) -> SparkSettings:
    """Settings for several catalogs in one job (for example read from Hive, write to JDBC)."""
    combined = SparkSettings()
    for config in configs:
        combined = combined.merged(spark_settings(config))
    return combined


def _merge_conf(left: dict[str, str], right: dict[str, str]) -> dict[str, str]:
    merged = dict(left)
    for key, value in right.items():
        if key == EXTENSIONS_KEY:
            merged[key] = merge_csv(merged.get(key), value)
        elif key == REDACTION_KEY:
            merged.setdefault(key, value)  # recomputed from the merged secrets by the caller
        elif key in merged and merged[key] != value:
            raise CatalogSettingsConflictError(
                f"two Iceberg catalog connections set {key!r} to different values; they cannot share one job"
            )
        else:
            merged[key] = value
    return merged


def merge_csv(*values: str | None) -> str:
    """Join comma-separated lists, keeping the first occurrence of each item (extensions, jars)."""
    items: list[str] = []
    for value in values:
        items.extend(part.strip() for part in (value or "").split(",") if part.strip())
    return ",".join(_unique(tuple(items)))


def _unique(items: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))

"""One Iceberg catalog's configuration, read from an Airflow connection and validated.

:class:`CatalogConfig` is a plain dataclass so that the mapping to Spark settings
(:mod:`airflow_iceberg.catalog.spark_settings`) is a pure function that tests can call without
Airflow, and so that every validation error can name the connection field that is wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_iceberg.catalog.iceberg_runtimes import (
    DEFAULT_ICEBERG_VERSIONS,
    NEWEST_KNOWN_RELEASE,
    default_iceberg_version,
    jar_iceberg_version,
    jar_line_problem,
    pairing_problem,
    release,
)
from airflow_iceberg.catalog.secret_detection import (
    display_uri,
    has_user_info,
    is_secret_property,
    jdbc_password_problem,
    looks_like_uri,
    shown_in_clear_message,
    split_jdbc_secrets,
    uri_secret_problem,
)
from airflow_iceberg.exceptions import InvalidCatalogConfigError
from airflow_iceberg.jobs.spec.identifiers import PROPERTY_KEY_RE, SQL_NAME_RE

#: Catalog types Iceberg's ``type`` property understands.
CATALOG_TYPES = ("hadoop", "hive", "rest", "jdbc", "glue", "nessie")
SESSION_CATALOG_NAME = "spark_catalog"
DEFAULT_CATALOG_NAME = "iceberg"
DEFAULT_SPARK_VERSION = "3.5"
#: The default line's runtime; a connection without ``iceberg_version`` gets its own line's
#: (:data:`~airflow_iceberg.catalog.iceberg_runtimes.DEFAULT_ICEBERG_VERSIONS`).
DEFAULT_ICEBERG_VERSION = DEFAULT_ICEBERG_VERSIONS[DEFAULT_SPARK_VERSION]
DEFAULT_SCALA_VERSION = "2.12"
#: Spark 4 is built for Scala 2.13 only.
SPARK4_SCALA_VERSION = "2.13"
CONN_TYPE = "iceberg_catalog"

#: A Kubernetes object name (DNS-1123 subdomain), as a Secret's name must be.
KUBERNETES_NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+)*([.-][A-Za-z0-9]+)*\Z")
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}

#: Which catalog property the connection's login and password feed, per catalog type.
#: ``None`` means the type has no standard property; set ``login_property`` / ``password_property``.
CREDENTIAL_PROPERTIES: dict[str, tuple[str | None, str | None]] = {
    "jdbc": ("jdbc.user", "jdbc.password"),
    "hadoop": ("hadoop.fs.s3a.access.key", "hadoop.fs.s3a.secret.key"),
    "glue": ("s3.access-key-id", "s3.secret-access-key"),
    "nessie": (None, "authentication.token"),
    "hive": (None, None),
    "rest": (None, None),  # special-cased: login:password -> credential, password alone -> token
    "custom": (None, None),
}


@dataclass(frozen=True)
class CatalogConfig:
    """Everything one Airflow connection says about one Iceberg catalog.

    Field names match the connection's extra keys (see ``get_provider_info``'s ``conn-fields``),
    except ``uri``, ``login`` and ``password``, which come from the connection's own fields, and
    ``password_property``, whose extra key is ``pass_property`` (see :data:`EXTRA_ALIASES`), and
    ``uri_secrets``: the secret driver properties found in a JDBC URI (``?password=…``), which
    :func:`config_from_fields` moves out of ``uri`` (see :func:`split_jdbc_secrets`).
    """

    catalog_name: str = DEFAULT_CATALOG_NAME
    catalog_type: str | None = "hadoop"
    catalog_impl: str | None = None
    warehouse: str | None = None
    uri: str | None = None
    login: str | None = None
    password: str | None = field(default=None, repr=False)
    login_property: str | None = None
    password_property: str | None = None
    io_impl: str | None = None
    default_namespace: str | None = None
    cache_enabled: bool | None = None
    cache_expiration_interval_ms: int | None = None
    catalog_properties: dict[str, str] = field(default_factory=dict, repr=False)
    secret_properties: dict[str, str] = field(default_factory=dict, repr=False)
    hadoop_properties: dict[str, str] = field(default_factory=dict, repr=False)
    uri_secrets: dict[str, str] = field(default_factory=dict, repr=False)
    session_catalog: bool = False
    #: Over Spark Connect the server defines the catalog's secrets (see operators/connect_secrets.py).
    connect_server_credentials: bool = False
    #: In Kubernetes cluster deploy mode, the Kubernetes secret holding this catalog's secrets,
    #: mounted into the driver pod (see airflow_iceberg/jobs/secret_mounts.py).
    kubernetes_credentials: str | None = None
    iceberg_version: str = DEFAULT_ICEBERG_VERSION
    spark_version: str = DEFAULT_SPARK_VERSION
    scala_version: str = DEFAULT_SCALA_VERSION
    runtime_jar: str | None = None
    extra_jars: tuple[str, ...] = ()
    extra_packages: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        """The catalog type, or ``custom`` for a ``catalog-impl`` class."""
        return "custom" if self.catalog_impl else str(self.catalog_type)

    @property
    def runtime_iceberg_version(self) -> str | None:
        """The Iceberg release the job loads, when the connection tells: ``iceberg_version``, or with
        ``runtime_jar`` the release in the jar's standard file name (None for a jar named otherwise)."""
        if self.runtime_jar:
            return jar_iceberg_version(self.runtime_jar)
        return self.iceberg_version

    @property
    def uri_password(self) -> str | None:
        """The ``password=`` the catalog URI carried, moved out of ``uri`` (for non-Spark clients)."""
        return next((value for name, value in self.uri_secrets.items() if name.lower() == "password"), None)

    def validate(self) -> CatalogConfig:
        """Raise :class:`InvalidCatalogConfigError` naming the first wrong field; return self."""
        _check(
            SQL_NAME_RE.match(self.catalog_name or ""),
            "catalog_name",
            f"{self.catalog_name!r} must be letters, digits and underscores, "
            "starting with a letter or underscore",
        )
        if self.session_catalog:
            _check(
                self.catalog_name == SESSION_CATALOG_NAME,
                "catalog_name",
                f"session_catalog mode replaces Spark's built-in catalog, so the name must be "
                f"{SESSION_CATALOG_NAME!r}, not {self.catalog_name!r}",
            )
        else:
            _check(
                self.catalog_name != SESSION_CATALOG_NAME,
                "catalog_name",
                f"{SESSION_CATALOG_NAME!r} is Spark's built-in catalog; set session_catalog=true to wrap it",
            )
        _check(
            not (self.catalog_type and self.catalog_impl),
            "catalog_type",
            f"is {self.catalog_type!r} but catalog_impl is also set ({self.catalog_impl!r}); "
            "set Catalog type to custom to use the Catalog impl class",
        )
        _check(
            self.catalog_type or self.catalog_impl,
            "catalog_type",
            f"is required: one of {', '.join(CATALOG_TYPES)}, or custom with catalog_impl set to a class",
        )
        if self.catalog_type:
            _check(
                self.catalog_type in CATALOG_TYPES,
                "catalog_type",
                f"{self.catalog_type!r} is not one of {', '.join(CATALOG_TYPES)}, "
                "or custom (with Catalog impl)",
            )
        self._validate_uri_secrets()  # first: later messages may quote the URI
        self._validate_locations()
        self._validate_credentials()
        self._validate_kubernetes_credentials()
        for name, properties in (
            ("catalog_properties", self.catalog_properties),
            ("secret_properties", self.secret_properties),
            ("hadoop_properties", self.hadoop_properties),
        ):
            for key in properties:
                _check(PROPERTY_KEY_RE.match(key), name, f"key {key!r} is not a valid property name")
                if name != "secret_properties":
                    _check(not is_secret_property(key), name, shown_in_clear_message(name, key))
        for key in self.hadoop_properties:
            _check(
                not key.startswith(("hadoop.fs.", "hadoop.dfs.")),
                "hadoop_properties",
                f"key {key!r}: give Hadoop's own key, without the catalog's hadoop. prefix "
                f"({key.removeprefix('hadoop.')!r}); every key here is set as it is given",
            )
        for key in self.secret_properties:
            _check(
                key not in self.catalog_properties,
                "secret_properties",
                f"{key!r} is also in catalog_properties; set it in one place only",
            )
        for name in ("iceberg_version", "spark_version", "scala_version"):
            version = getattr(self, name)
            _check(  # JSON's 1.10 is the number 1.1: which release was meant is lost
                not isinstance(version, (int, float)),
                name,
                f"{version!r} is a number; give the version as a string, such as \"1.12.0\"",
            )
            _check(_VERSION_RE.match(version or ""), name, f"{version!r} is not a version such as 1.12.0")
        _check(  # 1.12 would pass the pairing table, and no iceberg-spark-runtime has that version
            self.runtime_jar or len(release(self.iceberg_version)) >= 3,
            "iceberg_version",
            f"{self.iceberg_version!r} is not an Iceberg release: releases have three numbers, such as "
            f"{DEFAULT_ICEBERG_VERSION}",
        )
        _check_spark_line(self.spark_version)
        self._validate_runtime_versions()
        if self.cache_expiration_interval_ms is not None:
            _check(
                self.cache_expiration_interval_ms >= -1,
                "cache_expiration_interval_ms",
                "must be -1 (never expire), 0 (no cache) or a positive number of milliseconds",
            )
        return self

    def _validate_runtime_versions(self) -> None:
        """Refuse Spark/Scala/Iceberg combinations for which no iceberg-spark-runtime exists."""
        self._validate_bundle_releases()
        if self.runtime_jar:  # a runtime jar replaces the coordinate
            problem = jar_line_problem(self.spark_version, self.runtime_jar)
            _check(problem is None, "runtime_jar", str(problem))
            return
        if release(self.spark_version)[:1] >= (4,):
            _check(
                self.scala_version == SPARK4_SCALA_VERSION,
                "scala_version",
                f"Spark {self.spark_version} is built for Scala {SPARK4_SCALA_VERSION} only, "
                f"not {self.scala_version}",
            )
        problem = pairing_problem(self.spark_version, self.iceberg_version)
        _check(problem is None, "iceberg_version", str(problem))

    def _validate_bundle_releases(self) -> None:
        """Refuse an Iceberg bundle (``iceberg-aws-bundle`` ...) of another release than the runtime.

        A bundle holds the cloud SDK its release's FileIO was built on. A connection that named no
        Iceberg version moved to its Spark line's newest runtime (1.12.0 for 3.5, not 1.10.2), and
        its bundle did not move with it. Patch numbers may differ: 1.10.2 has no bundle of its own.
        """
        runtime = self.runtime_iceberg_version
        if runtime is None:  # a runtime jar named otherwise: its release is not known here
            return
        for package in self.extra_packages:
            group, _, rest = package.partition(":")
            artifact, _, version = rest.partition(":")
            if group != "org.apache.iceberg" or not artifact.endswith("-bundle") or not version:
                continue
            ours = ".".join(map(str, release(version)[:2]))
            _check(
                release(version)[:2] == release(runtime)[:2],
                "extra_packages",
                f"{package} is of Iceberg {ours}, and the runtime is Iceberg {runtime}; give the bundle "
                f"of the runtime's release (org.apache.iceberg:{artifact}:"
                f"{'.'.join(map(str, release(runtime)[:2]))}.x)",
            )

    def _validate_locations(self) -> None:
        kind = self.kind
        if kind in ("hadoop", "glue", "jdbc"):
            _check(self.warehouse, "warehouse", f"is required for a {kind} catalog")
        if kind in ("rest", "jdbc", "nessie"):
            _check(self.uri, "host", f"the catalog URI is required for a {kind} catalog (put it in URI)")
        if kind == "jdbc":
            _check(
                str(self.uri).startswith("jdbc:"),
                "host",
                f"a jdbc catalog URI looks like postgresql://db:5432/name or sqlite:/path "
                f"(jdbc: may be left out), got {self.uri!r}",
            )
        if kind == "hive" and self.uri:
            _check(
                str(self.uri).startswith("thrift://"),
                "host",
                f"a hive catalog URI starts with 'thrift://', got {self.uri!r}",
            )
        if kind in ("rest", "nessie"):
            _check(
                str(self.uri).startswith(("http://", "https://")),
                "host",
                f"a {kind} catalog URI starts with http:// or https://, got {self.uri!r}",
            )

    def _validate_uri_secrets(self) -> None:
        """A catalog URI that still holds a secret is refused; the ones moved out must not clash."""
        for name, location in (("host", self.uri), ("warehouse", self.warehouse)):
            problem = uri_secret_problem(location) if location else None
            _check(problem is None, name, str(problem))
        if self.uri and self.uri.startswith("jdbc:"):
            problem = jdbc_password_problem(self.uri)  # what split_jdbc_secrets could not take out
            _check(problem is None, "host", str(problem))
        for name, properties in (
            ("catalog_properties", self.catalog_properties),
            ("hadoop_properties", self.hadoop_properties),
        ):
            for key, value in properties.items():
                problem = uri_secret_problem(value) if looks_like_uri(value) else None
                _check(problem is None, name, f"key {key!r}: {problem}")
        for name, jars in (
            ("runtime_jar", (self.runtime_jar,) if self.runtime_jar else ()),
            ("extra_jars", self.extra_jars),
            ("extra_packages", self.extra_packages),
        ):
            for jar in jars:
                _check(
                    not has_user_info(jar),
                    name,
                    "a URL with user info (https://user:token@...) would be on spark-submit's command "
                    "line and in Spark's UI, and Airflow shows this field in clear; give a local path, "
                    "or a URL without credentials (a repository that needs them is configured in the "
                    "cluster's Ivy or Maven settings: docs/cluster.md)",
                )
        if not self.uri_secrets:
            return
        _check(
            self.kind in ("jdbc", "custom"),
            "host",
            "only a JDBC catalog URI may carry driver properties such as password=",
        )
        _check(
            not (self.password and "password" in {name.lower() for name in self.uri_secrets}),
            "password",
            "the catalog URI carries a password too; keep it in the Password field only "
            "and remove it from the URI",
        )
        password_key = self.credential_properties()[1] if self.password else None
        for name in self.uri_secrets:
            key = f"jdbc.{name}"
            for source, keys in (
                ("password", {password_key}),
                ("secret_properties", self.secret_properties),
                ("catalog_properties", self.catalog_properties),
            ):
                _check(
                    key not in keys,
                    source,
                    f"{key!r} is also set by the catalog URI's {name}= parameter; set it in one place only",
                )

    def _validate_kubernetes_credentials(self) -> None:
        if self.kubernetes_credentials is None:
            return
        _check(
            len(self.kubernetes_credentials) <= 253 and KUBERNETES_NAME_RE.match(self.kubernetes_credentials),
            "kubernetes_credentials",
            f"{self.kubernetes_credentials!r} is not a Kubernetes secret name: lower-case letters, digits, "
            "'-' and '.', starting and ending with a letter or digit",
        )
        _check(
            not self.secret_keys(),
            "kubernetes_credentials",
            "the connection holds secrets too (Password, Secret properties, a password in the URI); "
            "keep them in the Kubernetes secret only",
        )

    def _validate_credentials(self) -> None:
        login_key, password_key = self.credential_properties()
        if self.kind == "rest" and self.login and not self.password:
            _check(
                False,
                "password",
                "a REST catalog login is an OAuth2 client id and needs its secret as password",
            )
        if self.login:
            _check(
                login_key,
                "login",
                f"a {self.kind} catalog has no standard property for a login; "
                "set 'Login goes to' (login_property) to the property it should fill",
            )
        if self.password:
            _check(
                password_key,
                "password",
                f"a {self.kind} catalog has no standard property for a password; "
                "set 'Password goes to' (pass_property) to the property it should fill",
            )

    def secret_keys(self) -> frozenset[str]:
        """Catalog properties that are secrets whatever their name: Secret properties, the
        property the Password fills, and the driver properties taken out of a JDBC URI."""
        password_key = self.credential_properties()[1]
        filled = {password_key} if password_key and self.password else set()
        from_uri = {f"jdbc.{name}" for name in self.uri_secrets}
        return frozenset(self.secret_properties) | filled | from_uri

    def credential_properties(self) -> tuple[str | None, str | None]:
        """The catalog properties that the connection's login and password go to.

        REST is the one type where both feed a single property: OAuth2 client credentials are
        ``credential=<client id>:<client secret>``; a password alone is a bearer ``token``.
        """
        login_key, password_key = CREDENTIAL_PROPERTIES[self.kind]
        if self.kind == "rest":
            login_key, password_key = ("credential", "credential") if self.login else (None, "token")
        return (self.login_property or login_key, self.password_property or password_key)


def field_error(field_name: str, message: str) -> InvalidCatalogConfigError:
    """The error for a wrong connection field, named as the form shows it and as JSON spells it:
    ``Iceberg catalog connection field 'URI' (host): ...``."""
    from airflow_iceberg.get_provider_info import form_label  # the form's words live with the form

    key = {v: k for k, v in EXTRA_ALIASES.items()}.get(field_name, field_name)
    label = form_label(key)
    named = f"{label!r} ({key})" if label != key else repr(key)
    return InvalidCatalogConfigError(f"Iceberg catalog connection field {named}: {message}")


def _check(condition: object, field_name: str, message: str) -> None:
    if not condition:
        raise field_error(field_name, message)


# --------------------------------------------------------------------------- reading a connection


def config_from_connection(conn: Any) -> CatalogConfig:
    """Build a validated :class:`CatalogConfig` from an Airflow ``Connection``.

    Extras may be stored plainly (``catalog_type``) or with the ``extra__iceberg_catalog__``
    prefix older Airflow UIs use; JSON-typed extras may be objects or JSON strings.
    """
    try:
        extra = conn.extra_dejson
    except Exception as error:  # Airflow logs and swallows bad JSON in some versions; be explicit
        raise InvalidCatalogConfigError(f"connection extra is not valid JSON: {error}") from error
    if conn.extra and not extra:
        try:
            json.loads(conn.extra)
        except ValueError as error:
            raise InvalidCatalogConfigError(f"connection extra is not valid JSON: {error}") from error
    if not isinstance(extra, Mapping):
        raise InvalidCatalogConfigError("connection extra must be a JSON object")
    return config_from_fields(
        extra={_strip_prefix(k): v for k, v in extra.items()},
        host=conn.host,
        port=conn.port,
        login=conn.login,
        password=conn.password,
    )


def _strip_prefix(key: str) -> str:
    prefix = f"extra__{CONN_TYPE}__"
    return key[len(prefix) :] if key.startswith(prefix) else key


#: Extra keys read under another name. ``pass_property`` replaced ``password_property`` because
#: Airflow masks any field whose name contains "password", which hid the property name typed in.
EXTRA_ALIASES = {"pass_property": "password_property"}
#: What ``catalog_type`` says when ``catalog_impl`` names the class.
CUSTOM_TYPE = "custom"
#: URI schemes of JDBC drivers that may be written without ``jdbc:``. Airflow writes a connection
#: out as a URI (Test button, ``connections export``) and cannot read ``jdbc:postgresql://…`` back.
_JDBC_SUBPROTOCOL_RE = re.compile(r"^[a-z][a-z0-9]*:(?![0-9]+(/|$))")


def config_from_fields(
    extra: Mapping[str, Any],
    host: str | None = None,
    port: int | None = None,
    login: str | None = None,
    password: str | None = None,
) -> CatalogConfig:
    """Build and validate a :class:`CatalogConfig` from connection fields and extras.

    Unset fields — absent, ``null`` (the Airflow UI stores every empty form field as ``null``) or
    ``""`` — take their defaults.
    """
    extra = {EXTRA_ALIASES.get(key, key): value for key, value in extra.items()}
    known = set(CatalogConfig.__dataclass_fields__) - {"uri", "login", "password", "uri_secrets"}
    unknown = sorted(set(extra) - known - {"uri"})
    if unknown:
        raise InvalidCatalogConfigError(
            f"unknown Iceberg catalog connection extra field(s): {', '.join(unknown)}; "
            "put other catalog properties under 'catalog_properties'"
        )
    values: dict[str, Any] = {
        name: _CONVERTERS.get(name, _as_is)(value, name)
        for name, value in extra.items()
        if name in known and value not in (None, "")
    }
    if values.get("catalog_type") == CUSTOM_TYPE and not values.get("catalog_impl"):
        raise field_error(
            "catalog_impl",
            "is required with Catalog type custom: an org.apache.iceberg.catalog.Catalog class",
        )
    if values.get("catalog_type") == CUSTOM_TYPE or (
        values.get("catalog_impl") and "catalog_type" not in values
    ):
        values["catalog_type"] = None
    if values.get("session_catalog") and "catalog_name" not in values:
        values["catalog_name"] = SESSION_CATALOG_NAME
    if "scala_version" not in values and release(values.get("spark_version", ""))[:1] >= (4,):
        values["scala_version"] = SPARK4_SCALA_VERSION  # unset, it follows Spark: 2.13 for Spark 4
    _check_spark_line(values.get("spark_version", DEFAULT_SPARK_VERSION))
    if "iceberg_version" not in values:  # unset, it follows Spark: the newest runtime of its line
        values["iceberg_version"] = _default_iceberg_version(values)
    uri = _uri(extra.get("uri") or host, port or None)
    if values.get("catalog_type") == "jdbc" and uri and _JDBC_SUBPROTOCOL_RE.match(uri):
        uri = uri if uri.startswith("jdbc:") else f"jdbc:{uri}"
    uri_secrets: dict[str, str] = {}
    if uri and uri.startswith("jdbc:"):  # JdbcCatalog gives jdbc.<name> properties to the driver
        uri, uri_secrets = split_jdbc_secrets(uri)
    return CatalogConfig(
        uri=uri, login=login or None, password=password or None, uri_secrets=uri_secrets, **values
    ).validate()


def _check_spark_line(spark_version: Any) -> None:
    """Refuse ``4``: the runtime's artifact names a Spark line, major.minor (``4.0``)."""
    if isinstance(spark_version, str) and _VERSION_RE.match(spark_version):
        _check(
            len(release(spark_version)) >= 2,
            "spark_version",
            f"{spark_version!r} names no Spark line: give its major.minor, such as "
            f"{spark_version}.0 (the runtime is built per line: iceberg-spark-runtime-<line>_<scala>)",
        )


def _default_iceberg_version(values: Mapping[str, Any]) -> str:
    """The newest Iceberg release with a runtime for the connection's Spark line.

    A line no known release builds has none: with a runtime jar that does not matter (its own name
    says its release); otherwise the connection must name the release, or Spark version is wrong.
    """
    spark = str(values.get("spark_version", DEFAULT_SPARK_VERSION))
    default = default_iceberg_version(spark)
    if default is None and not values.get("runtime_jar") and _VERSION_RE.match(spark):
        newest = ".".join(map(str, NEWEST_KNOWN_RELEASE))
        raise field_error(
            "spark_version",
            f"no Iceberg release up to {newest} has a runtime for Spark {spark}, "
            "so Iceberg version has no default: set Iceberg version to a later release built for it "
            "(which is not checked), or Runtime jar, or Spark version to your cluster's line",
        )
    return default or DEFAULT_ICEBERG_VERSION


def _as_is(value: Any, name: str) -> Any:
    return value


def _uri(host: str | None, port: int | None) -> str | None:
    """The catalog URI: Host, with Port added to every host that names none.

    Host may list several URIs (Hive metastores: ``thrift://a,thrift://b``) or several hosts in
    one (``jdbc:postgresql://a,b/db``): each gets the Port. A Port that contradicts a port in
    Host is an error rather than a silent choice.
    """
    if not host:
        return None
    if not port:
        return host
    members = [member.strip() for member in _URI_LIST_SEPARATOR.split(host.strip())]
    return ",".join(_with_port(member, port) for member in members if member)


#: A comma that starts another URI of a list (``thrift://a,thrift://b``), not another host of one.
_URI_LIST_SEPARATOR = re.compile(r"\s*,\s*(?=[A-Za-z][A-Za-z0-9+.-]*://)")


def _with_port(uri: str, port: int) -> str:
    scheme, sep, rest = uri.partition("://")
    authority, path = re.match(r"([^/?;]*)(.*)", rest if sep else uri, re.DOTALL).groups()  # type: ignore[union-attr]
    if not sep and ":" in authority and not authority.split(":")[-1].isdigit():
        raise field_error(
            "port", f"{port} cannot be added to {display_uri(uri)!r}, which has no host:port part"
        )
    hosts = []
    for member in authority.split(","):
        named = re.search(r":([0-9]+)$", member)
        _check(
            not named or int(named.group(1)) == port,
            "port",
            f"{port} differs from the port in the URI {display_uri(uri)!r}; "
            f"set Port to {named.group(1) if named else port}, or to 0, which adds no port",
        )
        hosts.append(member if named or not member.strip() else f"{member}:{port}")
    authority = ",".join(hosts)
    return f"{scheme}{sep}{authority}{path}" if sep else f"{authority}{path}"


def _to_bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise field_error(name, f"{value!r} is not true or false")


def _to_int(value: Any, name: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError) as error:
        raise field_error(name, f"{value!r} is not a whole number") from error


def _to_str_dict(value: Any, name: str) -> dict[str, str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as error:
            raise InvalidCatalogConfigError(
                f"Iceberg catalog connection field {name!r} is not valid JSON: {error}"
            ) from error
    if not isinstance(value, Mapping):
        raise InvalidCatalogConfigError(
            f"Iceberg catalog connection field {name!r} must be a JSON object of property names to values"
        )
    return {str(k): (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in value.items()}


def _to_tuple(value: Any, name: str) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(str(item).strip() for item in items if str(item).strip())


#: How each extra field's JSON value becomes a CatalogConfig attribute (UI forms send strings).
_CONVERTERS = {
    "session_catalog": _to_bool,
    "connect_server_credentials": _to_bool,
    "cache_enabled": _to_bool,
    "cache_expiration_interval_ms": _to_int,
    "catalog_properties": _to_str_dict,
    "secret_properties": _to_str_dict,
    "hadoop_properties": _to_str_dict,
    "extra_jars": _to_tuple,
    "extra_packages": _to_tuple,
}

"""The ``iceberg`` asset URI scheme: which catalog, which table, never a secret.

An Iceberg table is named by its catalog's *identity* (what makes two connections point at the
same catalog) and its namespace and table, never by the Spark catalog alias or a credential::

    iceberg://<catalog type>/<namespace>/.../<table>?<identity>

=========  ==========================================================================
type       identity (query parameters)
=========  ==========================================================================
hadoop     ``warehouse`` (the table lives under it)
hive       ``uri`` (the metastore), or ``warehouse`` when the URI comes from hive-site.xml
rest       ``uri`` and, when set, ``warehouse`` (one REST server can serve many)
jdbc       ``uri`` (the database, without its parameters) and ``catalog``: JdbcCatalog
           keys its rows by the catalog name, so two names on one database are two catalogs
glue       ``id`` (catalog id / account), ``region`` and ``endpoint`` when set, else ``warehouse``
nessie     ``uri`` and ``ref`` (the branch: another ref is another version of every table)
custom     ``impl`` (the catalog-impl class), ``uri`` and ``warehouse`` when set
=========  ==========================================================================

URIs inside the identity are reduced to scheme, host, port and path: user info, query strings
and fragments are dropped, so credentials a user put into a URI never reach an asset. Query
parameters are sorted and percent-encoded, which is the form Airflow normalises every asset
URI to, so :func:`table_asset_uri` and ``Asset("iceberg://...")`` written by hand agree.

This module is pure and light (no Airflow, pyiceberg or pyspark import at module level): Airflow
calls :func:`sanitize_uri` whenever a DAG file creates an ``iceberg://`` asset.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_iceberg.jobs.job_spec import split_identifier

if TYPE_CHECKING:
    from urllib.parse import SplitResult

    from airflow_iceberg.catalog.config import CatalogConfig

SCHEME = "iceberg"
KINDS = ("hadoop", "hive", "rest", "jdbc", "glue", "nessie", "custom")
#: Identity parameters each catalog type must have (one of each tuple).
_REQUIRED: dict[str, tuple[tuple[str, ...], ...]] = {
    "hadoop": (("warehouse",),),
    "hive": (("uri", "warehouse", "metastore"),),
    "rest": (("uri",),),
    "jdbc": (("uri",), ("catalog",)),
    "glue": (("id", "region", "warehouse"),),
    "nessie": (("uri",),),
    "custom": (("impl",),),
}
_ALLOWED = {"warehouse", "uri", "catalog", "id", "region", "endpoint", "ref", "impl", "metastore"}
_SECRET_WORDS = re.compile(r"pass|secret|token|credential|key|auth|sig|user", re.IGNORECASE)
#: Template for a consumer DAG scheduled on one table's asset: the snapshot id of the newest event
#: that triggered the run (the commit a producer made). Use it as ``snapshot_id`` of
#: :class:`~airflow_iceberg.operators.IcebergTimeTravelReadOperator` to read exactly that commit.
TRIGGERING_SNAPSHOT_ID = "{{ (triggering_asset_events.values() | first | last).extra['snapshot_id'] }}"
_GLUE_ID_KEYS = ("glue.id", "client.glue.id")
_GLUE_REGION_KEYS = ("glue.region", "client.region", "region")
_GLUE_ENDPOINT_KEYS = ("glue.endpoint",)


# --------------------------------------------------------------------------- building URIs


def split_table(identifier: str, catalog_names: Sequence[str] = ()) -> tuple[str | None, list[str]]:
    """Split ``[catalog.]namespace...table`` into the catalog alias (if it names one) and the rest.

    Parts are read like the job reads them (bare or in backticks, see
    :func:`airflow_iceberg.jobs.job_spec.split_identifier`) and come back unquoted.
    """
    parts = list(split_identifier(identifier))
    if len(parts) > 1 and parts[0] in catalog_names:
        return parts[0], parts[1:]
    return None, parts


def catalog_identity(config: CatalogConfig) -> tuple[str, dict[str, str]]:
    """The catalog type and the query parameters that identify the catalog, free of secrets."""
    kind = config.kind
    props = config.catalog_properties
    warehouse = normalize_location(config.warehouse) if config.warehouse else None
    uri = normalize_uri(config.uri) if config.uri else None
    identity: dict[str, str | None]
    if kind == "hadoop":
        identity = {"warehouse": warehouse}
    elif kind == "hive":
        identity = (
            {"uri": uri} if uri else {"warehouse": warehouse} if warehouse else {"metastore": "hive-site"}
        )
    elif kind == "rest":
        identity = {"uri": uri, "warehouse": config.warehouse}  # a REST warehouse is a name, not a path
    elif kind == "jdbc":
        identity = {"uri": uri, "catalog": config.catalog_name}
    elif kind == "glue":
        identity = {
            "id": _first(props, _GLUE_ID_KEYS),
            "region": _first(props, _GLUE_REGION_KEYS),
            "endpoint": normalize_uri(endpoint) if (endpoint := _first(props, _GLUE_ENDPOINT_KEYS)) else None,
        }
        if not any(identity.values()):
            identity = {"warehouse": warehouse}
    elif kind == "nessie":
        identity = {"uri": uri, "ref": props.get("ref") or "main"}
    else:
        identity = {"impl": config.catalog_impl, "uri": uri, "warehouse": warehouse}
    return kind, {key: value for key, value in identity.items() if value}


def table_asset_uri(config: CatalogConfig, table: str) -> str:
    """The asset URI of ``table`` (``[catalog.]namespace.table``) in the catalog ``config`` describes."""
    _, parts = split_table(table, (config.catalog_name,))
    if len(parts) < 2:
        raise ValueError(f"Iceberg table {table!r} needs a namespace: namespace.table")
    kind, identity = catalog_identity(config)
    if kind == "hive":  # the metastore stores names in lower case
        parts = [part.lower() for part in parts]
    return build_uri(kind, parts, identity)


def build_uri(kind: str, parts: Sequence[str], identity: Mapping[str, str]) -> str:
    """``iceberg://kind/ns/.../table?identity``, in the form Airflow normalises asset URIs to."""
    path = "/" + "/".join(urllib.parse.quote(part, safe="") for part in parts)
    query = urllib.parse.urlencode(sorted(identity.items()))
    return urllib.parse.urlunsplit((SCHEME, kind, path, query, ""))


def normalize_uri(uri: str) -> str:
    """A service URI reduced to what identifies the service: no user info, parameters or fragment.

    ``jdbc:`` URIs keep their ``jdbc:<driver>:`` prefix; ``;key=value`` properties (SQL Server
    style) are kept except those that carry credentials.
    """
    text = uri.strip()
    if text.lower().startswith("jdbc:"):
        driver, _, rest = text[5:].partition(":")
        main, *properties = rest.split(";")
        kept = [p for p in properties if p and not _looks_secret(p.split("=", 1)[0])]
        return ";".join([f"jdbc:{driver.lower()}:{normalize_uri(main)}", *kept])
    parts = urllib.parse.urlsplit(text)
    if not parts.scheme and not parts.netloc:
        return parts.path.rstrip("/")
    host = (parts.hostname or "").lower()
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit((parts.scheme.lower(), netloc, parts.path.rstrip("/"), "", ""))


def normalize_location(location: str) -> str:
    """A warehouse or table location as a URI: ``/wh`` and ``file:/wh`` become ``file:///wh``."""
    text = location.strip()
    if text.startswith("/"):
        text = "file://" + text
    elif text.startswith("file:") and not text.startswith("file://"):
        text = "file:///" + text[5:].lstrip("/")
    return normalize_uri(text)


# --------------------------------------------------------------------------- Airflow hooks


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """Airflow's normaliser for ``iceberg://`` URIs: validate the form, canonicalise the identity.

    Raises ``ValueError`` (Airflow reports it as an invalid asset) for an unknown catalog type, a
    path without namespace and table, a missing identity parameter, or a parameter that could
    carry a secret.
    """
    kind = uri.netloc.lower()
    if kind not in KINDS:
        raise ValueError(f"iceberg asset URI: catalog type {uri.netloc!r} is not one of {', '.join(KINDS)}")
    parts = [urllib.parse.unquote(part) for part in uri.path.split("/") if part]
    if len(parts) < 2:
        raise ValueError(f"iceberg asset URI {urllib.parse.urlunsplit(uri)!r} needs /<namespace>/<table>")
    params = dict(urllib.parse.parse_qsl(uri.query, keep_blank_values=False))
    unknown = sorted(set(params) - _ALLOWED)
    if unknown:
        raise ValueError(
            f"iceberg asset URI: unknown parameter(s) {', '.join(unknown)}; "
            f"a catalog is identified by {', '.join(sorted(_ALLOWED))}"
        )
    for alternatives in _REQUIRED[kind]:
        if not any(params.get(name) for name in alternatives):
            raise ValueError(f"iceberg asset URI of a {kind} catalog needs {' or '.join(alternatives)}")
    if "uri" in params:
        params["uri"] = normalize_uri(params["uri"])
    if "endpoint" in params:
        params["endpoint"] = normalize_uri(params["endpoint"])
    if "warehouse" in params and kind != "rest":
        params["warehouse"] = normalize_location(params["warehouse"])
    canonical = urllib.parse.urlsplit(build_uri(kind, parts, params))
    return uri._replace(netloc=canonical.netloc, path=canonical.path, query=canonical.query, fragment="")


def canonical_uri(uri: str) -> str:
    """The canonical form of a hand-written ``iceberg://`` URI (what Airflow stores as its ``uri``)."""
    parsed = urllib.parse.urlsplit(uri.strip())
    if parsed.scheme.lower() != SCHEME:
        raise ValueError(f"not an iceberg asset URI: {uri!r}")
    query = urllib.parse.urlencode(sorted(urllib.parse.parse_qsl(parsed.query)))
    parsed = parsed._replace(scheme=SCHEME, path=parsed.path.rstrip("/"), query=query, fragment="")
    return urllib.parse.urlunsplit(sanitize_uri(parsed))


def iceberg_asset(uri: str, **kwargs: Any) -> Any:
    """The :class:`~airflow.sdk.Asset` of an ``iceberg://`` URI, for ``schedule=[...]`` or inlets.

    Airflow identifies an asset by name *and* URI, and an ``Asset(uri)`` without a name is named
    by the URI exactly as written. The operators name a table's asset by its canonical URI, so
    this helper does the same: any spelling of the URI gives the asset the operators emit.
    """
    from airflow.sdk import Asset

    canonical = canonical_uri(uri)
    return Asset(name=kwargs.pop("name", canonical), uri=canonical, **kwargs)


def create_asset(
    *, table: str, catalog_config: CatalogConfig, extra: dict[str, Any] | None = None, **kwargs: Any
) -> Any:
    """The provider's asset factory: the :class:`~airflow.sdk.Asset` of a table in a catalog."""
    from airflow.sdk import Asset

    uri = table_asset_uri(catalog_config, table)
    return Asset(name=kwargs.pop("name", uri), uri=uri, extra=extra or {}, **kwargs)


def convert_asset_to_openlineage(asset: Any, lineage_context: Any) -> Any:
    """Airflow's OpenLineage converter for ``iceberg://`` assets (e.g. hand-declared inlets).

    A Hadoop table's location follows from its URI, so it gets the same name the operators and
    openlineage-spark give it. For other catalogs the location is only known to the catalog, so
    the dataset is named by the catalog identity: the symlink name of :func:`catalog_symlink`.
    """
    from airflow.providers.common.compat.openlineage.facet import Dataset

    namespace, name = asset_dataset_name(asset.uri)
    return Dataset(namespace=namespace, name=name)


# --------------------------------------------------------------------------- OpenLineage naming


def parse_uri(uri: str) -> tuple[str, list[str], dict[str, str]]:
    """The catalog type, namespace-and-table parts and identity of an ``iceberg://`` URI."""
    parsed = urllib.parse.urlsplit(uri)
    parts = [urllib.parse.unquote(part) for part in parsed.path.split("/") if part]
    return parsed.netloc.lower(), parts, dict(urllib.parse.parse_qsl(parsed.query))


def asset_dataset_name(uri: str) -> tuple[str, str]:
    """OpenLineage (namespace, name) for an asset URI: by location for Hadoop, else by catalog."""
    kind, parts, identity = parse_uri(uri)
    if kind == "hadoop":  # the parts are joined after parsing: a name may hold '?', '#' or '%'
        namespace, base = location_dataset_name(identity["warehouse"])
        name = "/".join([base.rstrip("/"), *parts])
        return namespace, name if namespace == "file" else name.lstrip("/")
    return catalog_symlink(kind, parts, identity)


def location_dataset_name(location: str) -> tuple[str, str]:
    """OpenLineage's file-system naming of a table location, as openlineage-spark applies it.

    ``file:///wh/db/t`` → (``file``, ``/wh/db/t``); ``s3a://bucket/wh/t`` → (``s3://bucket``,
    ``wh/t``); ``hdfs://nn:8020/wh/t`` → (``hdfs://nn:8020``, ``wh/t``).
    """
    parsed = urllib.parse.urlsplit(normalize_location(location))
    scheme = {"s3a": "s3", "s3n": "s3"}.get(parsed.scheme, parsed.scheme)
    if scheme == "file" or not parsed.netloc:
        return "file", parsed.path or "/"
    return f"{scheme}://{parsed.netloc}", parsed.path.lstrip("/")


def catalog_symlink(kind: str, parts: Sequence[str], identity: Mapping[str, str]) -> tuple[str, str]:
    """OpenLineage (namespace, name) of a table by its catalog: the ``symlinks`` facet's TABLE entry.

    Hive uses OpenLineage's ``hive://host:port`` namespace and Glue its ARN namespace, as
    openlineage-spark does; other catalogs are named by the catalog URI (plus warehouse, ref or
    JDBC catalog name when those tell catalogs apart), all without secrets.
    """
    name = ".".join(parts)
    if kind == "hive" and identity.get("uri"):
        parsed = urllib.parse.urlsplit(identity["uri"])
        return f"hive://{parsed.netloc}", name
    if kind == "glue" and identity.get("region") and identity.get("id"):
        return f"arn:aws:glue:{identity['region']}:{identity['id']}", f"table/{'/'.join(parts)}"
    base = identity.get("uri") or identity.get("warehouse") or identity.get("impl") or kind
    extras = {
        key: value
        for key, value in identity.items()
        if key in ("warehouse", "catalog", "ref", "region", "id")
    }
    if base == identity.get("warehouse"):
        extras.pop("warehouse", None)
    suffix = "?" + urllib.parse.urlencode(sorted(extras.items())) if extras else ""
    return f"{base}{suffix}", name


def _first(props: Mapping[str, str], keys: Sequence[str]) -> str | None:
    return next((props[key] for key in keys if props.get(key)), None)


def _looks_secret(key: str) -> bool:
    return bool(_SECRET_WORDS.search(key))

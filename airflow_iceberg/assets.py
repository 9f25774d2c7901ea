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
jdbc       ``uri`` (the database, and the parameters that choose its schema) and ``catalog``:
           JdbcCatalog keys its rows by the catalog name, so two names on one database are two
glue       ``id`` (catalog id / account) and ``region``, ``endpoint`` when set; ``warehouse``
           too unless both id and region are set (then the account or the region is the
           environment's, and the warehouse keeps two such catalogs apart)
nessie     ``uri`` and ``ref`` (the branch: another ref is another version of every table)
custom     ``impl`` (the catalog-impl class), ``uri`` and ``warehouse`` when set
=========  ==========================================================================

URIs and locations inside the identity go through :mod:`airflow_iceberg.naming`, the normaliser
the OpenLineage names share: scheme, host, port (the default one made explicit) and path, no
user info, query string or fragment, so credentials a user put into a URI never reach an asset,
and a list of Hive metastores is one catalog whatever its order. Hive and Glue store names in
lower case, so their namespace and table are lower-cased. Query parameters are sorted and
percent-encoded (a space is ``%20``, a ``+`` is ``%2B``), a form Airflow's own normalisation keeps,
so :func:`table_asset_uri` and ``Asset("iceberg://...")`` written by hand agree. A hand-written
``+`` is a space to ``Asset()`` (Airflow decodes the query as a form) and a ``+`` to
:func:`iceberg_asset`, which reads it as written.

This module is pure and light (no Airflow, pyiceberg or pyspark import at module level): Airflow
calls :func:`sanitize_uri` whenever a DAG file creates an ``iceberg://`` asset.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_iceberg.catalog.config import field_error
from airflow_iceberg.jobs.spec.identifiers import split_identifier
from airflow_iceberg.naming import (
    catalog_location_dataset,
    hive_namespace,
    jdbc_dataset_namespace,
    location_dataset,
    normalize_location,
    normalize_uri,
    table_location_dataset,
)

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
#: Catalogs that store namespace and table names in lower case (Hive's metastore, AWS Glue).
CASE_FOLDING_KINDS = ("hive", "glue")
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
    :func:`airflow_iceberg.jobs.spec.identifiers.split_identifier`) and come back unquoted.
    """
    parts = list(split_identifier(identifier))
    if len(parts) > 1 and parts[0] in catalog_names:
        return parts[0], parts[1:]
    return None, parts


def catalog_identity(config: CatalogConfig) -> tuple[str, dict[str, str]]:
    """The catalog type and the query parameters that identify the catalog, free of secrets.

    Raises :class:`~airflow_iceberg.exceptions.InvalidCatalogConfigError` naming the connection
    field whose URI or location cannot be normalised (a port that is not a number).
    """
    kind = config.kind
    props = config.catalog_properties
    warehouse = _normalized(normalize_location, config.warehouse, "warehouse")
    uri = _normalized(normalize_uri, config.uri, "host")
    identity: dict[str, str | None]
    if kind == "hadoop":
        identity = {"warehouse": warehouse}
    elif kind == "hive":
        identity = (
            {"uri": uri} if uri else {"warehouse": warehouse} if warehouse else {"metastore": "hive-site"}
        )
    elif kind == "rest":  # a REST warehouse is a name the server knows, not a path
        identity = {"uri": uri, "warehouse": config.warehouse.strip() if config.warehouse else None}
    elif kind == "jdbc":
        identity = {"uri": uri, "catalog": config.catalog_name}
    elif kind == "glue":  # without an id or a region, the credentials' account or the environment's region
        identity = {
            "id": _first(props, _GLUE_ID_KEYS),
            "region": _first(props, _GLUE_REGION_KEYS),
            "endpoint": _normalized(normalize_uri, _first(props, _GLUE_ENDPOINT_KEYS), "catalog_properties"),
        }
        identity = glue_identity(identity, warehouse)
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
    return build_uri(kind, parts, identity)


def table_parts(kind: str, parts: Sequence[str]) -> list[str]:
    """The namespace and table parts as the catalog stores them: lower case in Hive and Glue."""
    return [part.lower() for part in parts] if kind in CASE_FOLDING_KINDS else list(parts)


def glue_identity(identity: Mapping[str, str | None], warehouse: str | None) -> dict[str, str | None]:
    """A Glue catalog's identity: id and region when both are known, else the warehouse as well.

    A Glue catalog is one account's in one region. Without ``glue.id`` it is the account of the
    credentials, without a region the one the environment names; neither is in the connection,
    so the warehouse is kept too, and two such catalogs with different warehouses stay apart.
    """
    identity = dict(identity)
    if identity.get("id") and identity.get("region"):
        identity.pop("warehouse", None)
    else:
        identity["warehouse"] = warehouse
    return identity


def build_uri(kind: str, parts: Sequence[str], identity: Mapping[str, str]) -> str:
    """``iceberg://kind/ns/.../table?identity``, in a form Airflow's normalisation leaves as it is.

    Values are percent-encoded throughout (``%20``, never ``+``, for a space), so a ``+`` in the
    URI is never a space, whichever way it is read.
    """
    path = "/" + "/".join(urllib.parse.quote(part, safe="") for part in table_parts(kind, parts))
    query = urllib.parse.urlencode(sorted(identity.items()), quote_via=urllib.parse.quote)
    return urllib.parse.urlunsplit((SCHEME, kind, path, query, ""))


def _normalized(normalize: Any, value: str | None, field: str) -> str | None:
    if not value:
        return None
    try:
        return normalize(value)
    except ValueError as error:
        raise field_error(field, f"cannot name the catalog for its assets and lineage: {error}") from error


# --------------------------------------------------------------------------- Airflow hooks


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """Airflow's normaliser for ``iceberg://`` URIs: validate the form, canonicalise the identity.

    The identity's URIs and locations go through the same normaliser as the operators' (so a
    default port, a trailing slash or a list of metastores in another order changes nothing),
    and a Hive or Glue table's name is lower-cased as those catalogs store it. Raises
    ``ValueError`` (Airflow reports it as an invalid asset) for an unknown catalog type, a path
    without namespace and table, a missing identity parameter, or a parameter that could carry
    a secret.
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
    if kind == "glue":
        params = _glue_params(params)
    if "uri" in params:
        params["uri"] = normalize_uri(params["uri"])
    if "endpoint" in params:
        params["endpoint"] = normalize_uri(params["endpoint"])
    if "warehouse" in params:  # a REST warehouse is a name, any other a location
        warehouse = params["warehouse"]
        params["warehouse"] = warehouse.strip() if kind == "rest" else normalize_location(warehouse)
    canonical = urllib.parse.urlsplit(build_uri(kind, parts, params))
    return uri._replace(netloc=canonical.netloc, path=canonical.path, query=canonical.query, fragment="")


def _glue_params(params: dict[str, str]) -> dict[str, str]:
    """A hand-written Glue identity as the operators name it (:func:`glue_identity`)."""
    if not (params.get("id") and params.get("region")) and not params.get("warehouse"):
        raise ValueError(
            "iceberg asset URI of a glue catalog needs id and region, or warehouse "
            "(without both, the operators name the catalog by its warehouse too)"
        )
    return {key: value for key, value in glue_identity(params, params.get("warehouse")).items() if value}


def canonical_uri(uri: str) -> str:
    """The canonical form of a hand-written ``iceberg://`` URI (what Airflow stores as its ``uri``).

    Query values are percent-decoded and a ``+`` stays a ``+`` (``warehouse=team+prod`` is the
    warehouse ``team+prod``), as a URI written by hand means it; write a space as ``%20``.
    """
    parsed = urllib.parse.urlsplit(uri.strip())
    if parsed.scheme.lower() != SCHEME:
        raise ValueError(f"not an iceberg asset URI: {uri!r}")
    query = urllib.parse.urlencode(sorted(_query_as_written(parsed.query)))
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
    if kind == "hadoop":
        return table_location_dataset(identity["warehouse"], parts)
    return catalog_symlink(kind, parts, identity)


def catalog_symlink(kind: str, parts: Sequence[str], identity: Mapping[str, str]) -> tuple[str, str]:
    """OpenLineage (namespace, name) of a table by its catalog: the ``symlinks`` facet's TABLE entry.

    As openlineage-spark 1.53 names them (its ``IcebergHandler``): Hive under ``hive://host:port``,
    Glue under its ARN (``arn:aws:glue:<region>:<id>``, name ``table/<ns>/<table>``), a Hadoop
    catalog under its warehouse (``file:/wh``, ``s3://bucket/wh``), REST and Nessie under the
    catalog URI alone, name ``<ns>.<table>``. A JDBC catalog, which openlineage-spark cannot name
    (it falls through to its Hive handler and fails), is named after the naming spec's name of
    its database: ``postgres://host:5432`` and ``<database>[.<schema>].<catalog name>.<ns>.<table>``
    (:func:`~airflow_iceberg.naming.jdbc_dataset_namespace`). Anything else is named by what
    identifies it (URI, warehouse or ``catalog-impl``), with ``?catalog=``, ``region``, ``id``
    where those tell catalogs apart. Never a secret.
    """
    parts = table_parts(kind, parts)
    name = ".".join(parts)
    if kind == "hive" and identity.get("uri"):
        return hive_namespace(identity["uri"]), name
    if kind == "hadoop" and identity.get("warehouse"):
        return catalog_location_dataset(identity["warehouse"], name)
    if kind == "glue" and identity.get("region") and identity.get("id"):
        return f"arn:aws:glue:{identity['region']}:{identity['id']}", f"table/{'/'.join(parts)}"
    if kind in ("rest", "nessie") and identity.get("uri"):
        return identity["uri"], name
    database = jdbc_dataset_namespace(identity["uri"]) if kind == "jdbc" and identity.get("uri") else None
    if database is not None:
        namespace, database_prefix = database
        prefix = [part for part in (database_prefix, identity.get("catalog")) if part]
        return namespace, ".".join([*prefix, name])
    base = identity.get("uri") or identity.get("warehouse") or identity.get("impl") or kind
    extras = {
        key: value for key, value in identity.items() if key in ("warehouse", "catalog", "region", "id")
    }
    if base == identity.get("warehouse"):
        extras.pop("warehouse", None)
    suffix = "?" + urllib.parse.urlencode(sorted(extras.items())) if extras else ""
    return f"{base}{suffix}", name


def table_dataset_names(
    location: str, asset_uri: str | None, branch: str | None = None
) -> tuple[tuple[str, str], tuple[str, str] | None]:
    """OpenLineage (namespace, name) of a table by its location, and its symlink by its catalog.

    The symlink is :func:`catalog_symlink` of the table's asset URI (None without one); a commit
    to a ``branch`` other than ``main`` is ``<table>.branch_<branch>`` there, as Spark names a
    branch write (``INSERT INTO db.t.branch_audit``) and openlineage-spark copies that name. The
    dataset itself keeps the table's location as its name, as openlineage-spark's does.
    """
    symlink = None
    if asset_uri:
        namespace, name = catalog_symlink(*parse_uri(asset_uri))
        symlink = (namespace, f"{name}.branch_{branch}" if branch and branch != "main" else name)
    return location_dataset(location), symlink


def _query_as_written(query: str) -> list[tuple[str, str]]:
    """``k=v&...`` percent-decoded, ``+`` kept: RFC 3986 reads a query so, where a form reads a space."""
    pairs = (pair.partition("=") for pair in query.split("&") if pair)
    return [(urllib.parse.unquote(key), urllib.parse.unquote(value)) for key, _, value in pairs if value]


def _first(props: Mapping[str, str], keys: Sequence[str]) -> str | None:
    return next((props[key] for key in keys if props.get(key)), None)

"""Read a table's metadata with pyiceberg, from the same ``iceberg_catalog`` connection Spark uses.

The snapshot sensor and trigger must not start Spark: they poll a table's metadata, which
pyiceberg reads directly. The connection's catalog properties are Iceberg's own, which pyiceberg
mostly shares; the differences are handled here:

- ``rest``, ``hive`` and ``glue``: the same properties, loaded with ``pyiceberg.catalog.load_catalog``;
- ``hive``: pyiceberg's HiveCatalog builds a client for the first metastore of a list without
  opening it, so it never fails over; each metastore is tried in turn here, as Hive's own client
  does;
- ``jdbc``: pyiceberg's SQL catalog takes a SQLAlchemy URL (``jdbc:postgresql://h/db`` becomes
  ``postgresql+psycopg2://user:password@h/db``; ``jdbc:sqlite:/path`` becomes ``sqlite:////path``),
  under the same catalog name, which the JDBC catalog stores with every table. The pgjdbc
  properties libpq shares go with it (``sslmode`` ...), and ``currentSchema`` becomes
  ``options=-c search_path=...``, so the catalog's tables are read in the schema Spark uses;
- ``hadoop``: pyiceberg has no Hadoop catalog, so the newest metadata file is found the way
  Iceberg's HadoopCatalog finds it, through ``metadata/version-hint.text`` (falling back to the
  highest ``vN.metadata.json``, listed through the same FileIO, so with the connection's
  endpoint and keys).

Nessie and custom ``catalog-impl`` catalogs have no pyiceberg equivalent and are refused.
pyiceberg is imported inside the functions: DAG parsing never loads it.
"""

from __future__ import annotations

import dataclasses
import re
import urllib.parse
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_iceberg.catalog.config import CatalogConfig, field_error
from airflow_iceberg.catalog.spark_settings import catalog_properties
from airflow_iceberg.catalog.transient_errors import is_transient_error
from airflow_iceberg.jdbc_urls import libpq_parameters, parse_jdbc_url
from airflow_iceberg.jobs.spec.identifiers import split_identifier

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

PYICEBERG_KINDS = ("rest", "hive", "glue", "jdbc", "hadoop")
_METADATA_RE = re.compile(r"v(\d+)(?:\.gz)?\.metadata\.json$")


def pyiceberg_properties(config: CatalogConfig) -> dict[str, str]:
    """The pyiceberg catalog properties for a connection (secrets included: keep them in memory)."""
    if config.kind not in PYICEBERG_KINDS:
        raise field_error(
            "catalog_type",
            f"a {config.kind} catalog cannot be read with pyiceberg; "
            f"the snapshot sensor supports {', '.join(PYICEBERG_KINDS)}",
        )
    everything = catalog_properties(config)
    properties = {k: v for k, v in everything.items() if not k.startswith("jdbc.")}
    if config.kind == "hive" and properties.get("uri"):  # pyiceberg splits a list on "," without trimming
        properties["uri"] = ",".join(uri.strip() for uri in properties["uri"].split(",") if uri.strip())
    if config.kind == "jdbc":
        properties["type"] = "sql"
        password = config.password or config.uri_password
        driver = driver_properties(everything)
        properties["uri"] = sqlalchemy_url(str(config.uri), config.login, password, driver)
    return properties


#: Iceberg JdbcCatalog's own ``jdbc.`` settings, which its driver ignores.
ICEBERG_JDBC_KEYS = ("schema-version", "init-catalog-tables", "strict-mode")
#: What a pgjdbc property that chooses who connects, or how the connection is secured, starts with.
_IDENTITY_PREFIXES = ("ssl", "gss", "jaas", "kerberos", "sspi", "auth", "password", "user", "service")
#: Those that :func:`~airflow_iceberg.jdbc_urls.libpq_parameters` or the URL's user and password take.
_TRANSLATED = {"ssl", "sslmode", "sslcert", "sslkey", "sslrootcert", "gssencmode", "user", "password"}


def driver_properties(properties: dict[str, str]) -> dict[str, str]:
    """The ``jdbc.<name>`` catalog properties Iceberg's JdbcCatalog gives its JDBC driver, by ``<name>``."""
    return {
        key[len("jdbc.") :]: value
        for key, value in properties.items()
        if key.startswith("jdbc.") and key[len("jdbc.") :] not in ICEBERG_JDBC_KEYS
    }


def untranslated_identity_properties(config: CatalogConfig) -> list[str]:
    """The driver properties (URL or ``jdbc.*``) choosing identity or TLS that libpq would not get.

    Iceberg's JdbcCatalog gives every one of them to pgjdbc; a client that dropped one would connect
    as someone else (libpq's defaults: the OS user, ``sslmode=prefer``) or with weaker TLS.
    """
    if not str(config.uri or "").startswith("jdbc:postgresql:"):
        return []
    names = [name for name, _ in parse_jdbc_url(str(config.uri)).properties]
    names += list(driver_properties(catalog_properties(config)))
    lowered = {name: name.lower() for name in names}
    return sorted(
        name for name, low in lowered.items() if low.startswith(_IDENTITY_PREFIXES) and low not in _TRANSLATED
    )


def sqlalchemy_url(
    jdbc_url: str,
    login: str | None = None,
    password: str | None = None,
    driver: Mapping[str, str] | None = None,
) -> str:
    """The SQLAlchemy URL of a ``jdbc:sqlite:`` or ``jdbc:postgresql:`` catalog database.

    PostgreSQL: the host (several: libpq's ``host=a,b&port=5432,5433``, which SQLAlchemy's psycopg2
    dialect passes on as they are), the database, and the libpq parameters of
    :func:`~airflow_iceberg.jdbc_urls.libpq_parameters` (the schema as ``options``, ``sslmode`` ...).
    ``driver`` holds the properties JdbcCatalog gives the driver beside the URL (``jdbc.user``,
    ``jdbc.sslmode`` ...); the URL's own win, as pgjdbc lets them.
    """
    if jdbc_url.startswith("jdbc:sqlite:"):
        path = jdbc_url[len("jdbc:sqlite:") :].split("?", 1)[0]
        if path.startswith("file:"):
            path = urllib.parse.urlsplit(path).path
        return f"sqlite:///{path}"
    if jdbc_url.startswith("jdbc:postgresql:"):
        jdbc = parse_jdbc_url(jdbc_url)
        if driver:
            jdbc = dataclasses.replace(jdbc, properties=(*driver.items(), *jdbc.properties))
        parameters = libpq_parameters(jdbc)
        user = jdbc.property("user") or login  # pgjdbc: the URL's user wins over the Login (jdbc.user)
        secret = password or jdbc.property("password")
        auth = ""
        if user:
            auth = urllib.parse.quote(user, safe="")
            if secret:
                auth += ":" + urllib.parse.quote(secret, safe="")
            auth += "@"
        netloc = ""
        if "," not in parameters["host"]:  # several hosts stay libpq lists: host=a,b&port=5432,5433
            host, port = parameters.pop("host"), parameters.pop("port")
            netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        database = urllib.parse.quote(parameters.pop("dbname", ""), safe="")
        query = sorted(parameters.items())
        encoded = urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
        return f"postgresql+psycopg2://{auth}{netloc}/{database}" + (f"?{encoded}" if encoded else "")
    raise field_error("host", "pyiceberg reads JDBC catalogs on SQLite or PostgreSQL only")


def load_table(config: CatalogConfig, table: str) -> Table:
    """The table as pyiceberg sees it now. ``table`` is ``namespace.table`` (a catalog prefix is dropped).

    Raises pyiceberg's ``NoSuchTableError`` if it does not exist.
    """
    return table_loader(config, table)()


def table_loader(config: CatalogConfig, table: str, file_io: str | None = None) -> Callable[[], Table]:
    """A function that loads the table afresh on each call, through one catalog client.

    For a step that reads the table more than once (publish, tag and rollback read it again
    after a commit, or to retry one): the client (a SQLAlchemy engine, a REST session and its
    OAuth2 token, a metastore connection) is made on the first call and kept. ``file_io`` is
    pyiceberg's ``py-io-impl`` for the table's files, unless the connection names its own.
    """
    parts = list(split_identifier(table))  # bare or backtick-quoted parts, as the job reads them
    if len(parts) > 2 and parts[0] == config.catalog_name:
        parts = parts[1:]
    properties = pyiceberg_properties(config)
    if file_io:
        properties.setdefault("py-io-impl", file_io)
    if config.kind == "hadoop":
        return lambda: _hadoop_table(properties, parts)
    catalogs: list[Catalog] = []

    def load() -> Table:
        if catalogs:
            return catalogs[0].load_table(tuple(parts))
        if config.kind == "hive" and "," in properties.get("uri", ""):
            catalog, loaded = _table_from_a_metastore(config.catalog_name, properties, parts)
        else:
            from pyiceberg.catalog import load_catalog

            catalog = load_catalog(config.catalog_name, **properties)
            loaded = catalog.load_table(tuple(parts))
        catalogs.append(catalog)
        return loaded

    return load


def _table_from_a_metastore(
    catalog_name: str, properties: dict[str, str], parts: list[str]
) -> tuple[Catalog, Table]:
    """Ask each metastore of a list in turn, as Hive's client does; the first that answers decides.

    A metastore that is down (connection refused, a timeout) is skipped; any answer, a missing
    table included, is final. When none answers, the last outage is raised. Returns the catalog
    on the metastore that answered, and the table.
    """
    from pyiceberg.catalog import load_catalog

    last: Exception | None = None
    for uri in properties["uri"].split(","):
        try:
            catalog = load_catalog(catalog_name, **{**properties, "uri": uri})
            return catalog, catalog.load_table(tuple(parts))
        except Exception as error:
            if not is_transient_error(error):
                raise
            last = error
    assert last is not None  # the list has at least two URIs
    raise last


def _hadoop_table(properties: dict[str, str], parts: list[str]) -> Table:
    """The table as Iceberg's ``HadoopTableOperations.refresh`` finds it.

    ``version-hint.text`` names a version, whose file is ``vN.metadata.json`` or, with
    ``write.metadata.compression-codec=gzip``, ``vN.gz.metadata.json``; then, while ``v(N+1)``
    exists, that is the newer version: a commit renames its metadata file into place *before* it
    rewrites the hint, and a failed hint write is only logged, so the hint may lag the commit a
    cluster-mode task must find. No readable hint: the highest version listed.
    """
    from pyiceberg.exceptions import NoSuchTableError
    from pyiceberg.io import load_file_io
    from pyiceberg.table import StaticTable

    warehouse = properties["warehouse"].rstrip("/")
    metadata_dir = "/".join([warehouse, *parts, "metadata"])
    io = load_file_io(properties, metadata_dir)
    path: str | None = None
    try:
        with io.new_input(f"{metadata_dir}/version-hint.text").open() as hint:
            version = int(hint.read().decode().strip())
        path = _metadata_file(io, metadata_dir, version)
    except (ValueError, OSError) as error:
        if is_transient_error(error):  # the store is down: not the same as a table without a hint
            raise
    if path is None:
        path = _newest_metadata_file(io, metadata_dir)
        if path is None:
            raise NoSuchTableError(f"no Iceberg table metadata under {metadata_dir}") from None
        match = _METADATA_RE.search(path)
        version = int(match.group(1)) if match else 0
    while (following := _metadata_file(io, metadata_dir, version + 1)) is not None:
        version, path = version + 1, following
    return StaticTable.from_metadata(path, properties)


def _metadata_file(io: Any, metadata_dir: str, version: int) -> str | None:
    """Version ``version``'s metadata file, uncompressed or gzip (as pyiceberg reads them), or None."""
    for name in (f"v{version}.metadata.json", f"v{version}.gz.metadata.json"):
        if io.new_input(f"{metadata_dir}/{name}").exists():
            return f"{metadata_dir}/{name}"
    return None


def _newest_metadata_file(io: Any, metadata_dir: str) -> str | None:
    """The highest ``vN.metadata.json`` in a directory, listed through the table's own FileIO.

    The FileIO carries the connection's endpoint, region and keys (``s3.endpoint`` for MinIO or
    SeaweedFS ...); a file system built from the URI alone would ask AWS itself.
    """
    try:
        names = _list_names(io, metadata_dir)
    except (OSError, ValueError) as error:
        if is_transient_error(error):
            raise
        return None
    versions = [(int(m.group(1)), name) for name in names if (m := _METADATA_RE.search(name))]
    return f"{metadata_dir}/{max(versions)[1]}" if versions else None


def _list_names(io: Any, directory: str) -> list[str]:
    """The file names in ``directory``, through pyiceberg's PyArrowFileIO or FsspecFileIO."""
    if hasattr(io, "fs_by_scheme"):  # PyArrowFileIO: the file system it reads the table with
        from pyarrow import fs

        scheme, netloc, path = io.parse_location(directory, io.properties)
        infos = io.fs_by_scheme(scheme, netloc).get_file_info(fs.FileSelector(path, allow_not_found=True))
        return [info.base_name for info in infos]
    parsed = urllib.parse.urlsplit(directory)
    filesystem = io.get_fs(parsed.scheme or "file", parsed.hostname)
    root = f"{parsed.netloc}{parsed.path}" if parsed.netloc else parsed.path
    return [str(entry).rstrip("/").rsplit("/", 1)[-1] for entry in filesystem.ls(root, detail=False)]

"""One normaliser for every name a catalog or a table has: service URIs, storage locations, and
their OpenLineage dataset names.

The ``iceberg://`` asset URI (:mod:`airflow_iceberg.assets`) and the OpenLineage datasets the
operators report (:mod:`airflow_iceberg.operators.lineage`) are both built from these functions,
so one table has one asset URI and one set of OpenLineage names however its connection spells
it. The rules follow OpenLineage's naming spec (https://openlineage.io/docs/spec/naming) and,
where the spec says nothing, openlineage-spark (``FilesystemDatasetUtils``, which names the same
tables when Spark's own OpenLineage listener runs):

- Schemes and host names are lower-cased. S3 and GCS bucket names are kept as written: they are
  not DNS names to the file system, and S3 buckets made before 2018 may hold upper case. A host
  has one spelling: an IP address in its shortest form (``[0:0:0:0:0:0:0:1]`` is ``[::1]``), no
  trailing dot (``ms.example.com.`` is ``ms.example.com``), a non-ASCII name in its IDNA
  (punycode) form, as DNS resolves it (``métastore`` is ``xn--mtastore-b1a``).
- A scheme's default port is made explicit: ``thrift://ms`` is ``thrift://ms:9083``,
  ``jdbc:postgresql://db/x`` is ``jdbc:postgresql://db:5432/x``. OpenLineage names a service by
  host *and* port (``hive://{host}:{port}``, ``postgres://{host}:{port}``,
  ``hdfs://{namenode host}:{namenode port}``), so the port is part of the name whether or not the
  connection wrote it; dropping default ports instead would leave those names without one.
  (HDFS treats ``hdfs://nn`` and ``hdfs://nn:8020`` alike, HA nameservices included.)
- User info, query strings and fragments are dropped: they hold credentials and client options,
  not what the service is. The one exception is ``abfss://container@account...``,
  ``wasbs://container@account...`` and ``oci://bucket@namespace...``, where the part before
  ``@`` is the container or bucket.
- A JDBC URL is read as its driver reads it (:mod:`airflow_iceberg.jdbc_urls`) and named by its
  driver, hosts, ports, database and the properties that choose the database or schema
  (``currentSchema`` ...), nothing else: ``jdbc:postgresql:db`` is
  ``jdbc:postgresql://localhost:5432/db``, a failover mode (``jdbc:mysql:loadbalance://``) is
  dropped, and Oracle's ``user/password@`` never reaches a name.
- ``s3a://`` and ``s3n://`` are ``s3://``; ``abfs://`` is ``abfss://`` and ``wasb://`` is
  ``wasbs://`` (the same data without TLS), as OpenLineage names them.
- A local path is a ``file:`` URI: ``/wh``, ``file:/wh`` and ``file:///wh`` are ``file:///wh``.
  Trailing slashes are dropped and repeated slashes in a location collapse, as Hadoop's ``Path``
  collapses them. In a location, ``?`` and ``#`` are part of the path, as they are to Hadoop.
- A list of URIs of one service is that one service: Hive metastores
  (``thrift://a:9083,thrift://b:9083``, spaces allowed around the commas) and multi-host JDBC
  URLs (``jdbc:postgresql://a,b/db``). Each member is normalised, duplicates are dropped, and the
  rest is sorted and joined with ``,``: the order is the order a client tries them in, not part
  of which catalog it is.

Pure and light (no Airflow, pyiceberg or pyspark import): Airflow loads it whenever a DAG file
creates an ``iceberg://`` asset.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import urllib.parse
from collections.abc import Sequence

from airflow_iceberg.catalog.secret_detection import display_uri
from airflow_iceberg.jdbc_urls import JdbcUrl, parse_jdbc_url, schema_properties

#: Ports a client uses when a URI names none, by scheme (for JDBC: by driver).
DEFAULT_PORTS = {
    "thrift": 9083,
    "hdfs": 8020,
    "http": 80,
    "https": 443,
    "postgresql": 5432,
    "mysql": 3306,
    "mariadb": 3306,
    "sqlserver": 1433,
    "oracle": 1521,
}
#: Schemes that address the same data as another one, and that one.
SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "abfs": "abfss", "wasb": "wasbs"}
#: Object stores: OpenLineage names their objects without a leading slash (``s3://bucket``, ``wh/t``).
OBJECT_STORES = ("s3", "gs", "abfss", "wasbs")
#: Stores whose ``user@`` part is the container (Azure) or bucket (OCI), not a credential.
CONTAINER_STORES = ("abfss", "wasbs", "oci")
#: Object stores whose host part is a bucket name, kept as written.
BUCKET_STORES = ("s3", "gs")

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(.*)$", re.DOTALL)
_LIST_SEPARATOR = re.compile(r"\s*,\s*(?=[A-Za-z][A-Za-z0-9+.-]*://)")


# --------------------------------------------------------------------------- services


def normalize_uri(uri: str) -> str:
    """A service URI (or a list of them) reduced to what identifies the service.

    ``jdbc:`` URLs are named by :func:`normalize_jdbc_url`. Raises ``ValueError`` for a port that
    is not a number.
    """
    text = uri.strip()
    if text.lower().startswith("jdbc:"):
        return normalize_jdbc_url(text)
    members = [member for member in _LIST_SEPARATOR.split(text) if member]
    if len(members) > 1:
        return ",".join(sorted({normalize_uri(member) for member in members}))
    text = members[0].rstrip(",") if members else ""
    parts = urllib.parse.urlsplit(text)
    if not parts.scheme and not parts.netloc:
        return parts.path.rstrip("/")
    authority = _authority(parts.scheme, parts.netloc, uri)
    return _join(parts.scheme, authority, parts.path.rstrip("/"))


def normalize_jdbc_url(url: str) -> str:
    """A JDBC URL reduced to driver, hosts, ports, database and the schema-choosing properties.

    Read by :func:`airflow_iceberg.jdbc_urls.parse_jdbc_url` and written back as
    ``jdbc:<driver>://<hosts>/<database>?<schema keys>``, hosts canonical, default ports made
    explicit and sorted; SQL Server keeps its ``;databaseName=`` form, Oracle its
    ``@//hosts/service`` or ``@host:port:SID`` form, an opaque name (``jdbc:derby:memory:db``)
    stays one, and SQLite is the database file's path (``jdbc:sqlite:/p``,
    ``jdbc:sqlite:file:/p`` and ``jdbc:sqlite:file:///p`` are one). The result reads back as
    itself: normalising it again changes nothing.
    """
    jdbc = parse_jdbc_url(url)
    if jdbc.driver == "sqlite":
        path = jdbc.database
        if path.lower().startswith("file:"):
            path = _location_parts(path)[2]
        return f"jdbc:sqlite:{path}"
    hosts = _jdbc_hosts(jdbc)
    keys = schema_properties(jdbc)
    if jdbc.driver == "sqlserver":
        return ";".join([f"jdbc:sqlserver://{hosts}", *(f"{key}={value}" for key, value in keys)])
    if jdbc.driver == "oracle":
        return f"jdbc:oracle:thin:@{_oracle_target(jdbc, hosts)}"
    if jdbc.opaque:
        return f"jdbc:{jdbc.driver}:{jdbc.database}" + "".join(f";{key}={value}" for key, value in keys)
    path = f"/{jdbc.database}" if jdbc.database else ""
    query = "&".join(f"{key}={urllib.parse.quote(value, safe=',')}" for key, value in keys)
    return f"jdbc:{jdbc.driver}://{hosts}{path}" + (f"?{query}" if query else "")


def _jdbc_hosts(jdbc: JdbcUrl) -> str:
    # a named SQL Server instance (db\inst) is found through the SQL Browser, not on the default port
    named_instance = jdbc.driver == "sqlserver" and any("\\" in host for host, _ in jdbc.hosts)
    scheme = "" if named_instance else jdbc.driver
    # a bad port is shown with its host only: the rest of a JDBC URL may hold credentials
    return ",".join(sorted({host_port(scheme, h, p, f"{h}:{p}") for h, p in jdbc.hosts if h}))


def _oracle_target(jdbc: JdbcUrl, hosts: str) -> str:
    """``//hosts/service``, ``host:port:SID``, a descriptor for a SID on several hosts, or a TNS alias."""
    if not hosts:
        return jdbc.database
    if not jdbc.database.startswith(":"):
        return f"//{hosts}{jdbc.database}"
    if "," not in hosts:
        return f"{hosts}{jdbc.database}"
    addresses = "".join(
        f"(ADDRESS=(HOST={host})(PORT={port}))"
        for host, _, port in (member.rpartition(":") for member in hosts.split(","))
    )
    return f"(DESCRIPTION={addresses}(CONNECT_DATA=(SID={jdbc.database[1:]})))"


def hive_namespace(uri: str) -> str:
    """OpenLineage's namespace of a Hive metastore: ``hive://host:port``.

    For a list of metastores, that of the first URI of the canonical (sorted) list.
    openlineage-spark takes the first one *written*, so it may name a list written in another
    order after another member.
    """
    first = normalize_uri(uri).split(",")[0]
    return "hive://" + urllib.parse.urlsplit(first).netloc


#: OpenLineage's namespace scheme for the database behind a JDBC driver (naming spec: Postgres,
#: MySQL, MSSQL, Oracle, DB2). MariaDB speaks MySQL's protocol and has no entry of its own.
JDBC_DATASET_SCHEMES = {
    "postgresql": "postgres",
    "mysql": "mysql",
    "mariadb": "mysql",
    "sqlserver": "mssql",
    "oracle": "oracle",
    "db2": "db2",
}


def jdbc_dataset_namespace(url: str) -> tuple[str, str] | None:
    """OpenLineage's namespace of the database a JDBC URL reaches, and the name prefix within it.

    As the naming spec names a database's tables (``postgres://{host}:{port}``,
    ``{database}.{schema}.{table}``): ``jdbc:postgresql://DB/iceberg?currentSchema=s`` →
    (``postgres://db:5432``, ``iceberg.s``); SQL Server's database is its ``databaseName``. The
    first host of the canonical (sorted) list names a multi-host URL, as :func:`hive_namespace`
    does. None for a driver the spec does not name (SQLite, H2, Derby) or a URL without a host
    (an Oracle TNS alias).
    """
    jdbc = parse_jdbc_url(url)
    scheme = JDBC_DATASET_SCHEMES.get(jdbc.driver)
    hosts = _jdbc_hosts(jdbc)
    if scheme is None or not hosts:
        return None
    properties = schema_properties(jdbc)
    databases = [value for key, value in properties if key.lower() in ("databasename", "database")]
    schemas = [value for key, value in properties if key.lower() not in ("databasename", "database")]
    database = jdbc.database.lstrip("/:") or next(iter(databases), "")
    prefix = ".".join(part for part in (database, *schemas) if part)
    return f"{scheme}://{hosts.split(',')[0]}", prefix


# --------------------------------------------------------------------------- storage locations


def normalize_location(location: str) -> str:
    """A warehouse or table location as a URI: ``/wh``, ``file:/wh`` and ``file:///wh/`` are ``file:///wh``."""
    scheme, authority, path = _location_parts(location)
    if not scheme:  # a relative path: nothing to resolve it against
        return path
    return _join(scheme, authority, path or ("/" if scheme == "file" else ""))


def location_dataset(location: str) -> tuple[str, str]:
    """OpenLineage (namespace, name) of a storage location, as openlineage-spark names a table's files.

    ``file:///wh/db/t`` → (``file``, ``/wh/db/t``); ``s3a://bucket/wh/t`` → (``s3://bucket``,
    ``wh/t``); ``hdfs://nn/wh/t`` → (``hdfs://nn:8020``, ``/wh/t``);
    ``abfss://c@acct.dfs.core.windows.net/wh`` → (``abfss://c@acct.dfs.core.windows.net``, ``wh``).
    """
    return _dataset(*_location_parts(location))


def table_location_dataset(warehouse: str, parts: Sequence[str]) -> tuple[str, str]:
    """OpenLineage (namespace, name) of the table ``parts`` (namespace..., table) under a Hadoop warehouse.

    The parts are joined after the warehouse is parsed, so a name may hold ``?``, ``#`` or ``%``.
    """
    scheme, authority, path = _location_parts(warehouse)
    return _dataset(scheme, authority, "/".join([path, *parts]))


def catalog_location_dataset(location: str, name: str) -> tuple[str, str]:
    """OpenLineage (namespace, name) of a table ``name`` in a catalog rooted at ``location``.

    openlineage-spark's symlink of a Hadoop catalog table: ``file:/wh`` and ``db.t`` for a local
    warehouse ``/wh``, ``s3://bucket/wh`` and ``db.t`` on S3.
    """
    scheme, authority, path = _location_parts(location)
    scheme = scheme or "file"
    if not authority:  # file:/wh, dbfs:/wh
        return (f"{scheme}:{path}" if path else scheme), name
    return f"{scheme}://{authority}{path}", name


def _location_parts(location: str) -> tuple[str, str, str]:
    """(scheme, authority, path) of a normalised location; the path has no trailing slash.

    Parsed as Hadoop's ``Path`` parses a location (scheme, ``//authority``, the rest is path),
    not as a URL: ``?`` and ``#`` are file name characters here.
    """
    text = location.strip()
    match = _SCHEME_RE.match(text)
    if text.startswith("/") or match is None or len(match.group(1)) == 1:  # a path (or a drive letter)
        scheme, rest = ("file", text) if text.startswith("/") else ("", text)
    else:
        scheme, rest = match.group(1).lower(), match.group(2)
    scheme = SCHEME_ALIASES.get(scheme, scheme)
    authority = ""
    if rest.startswith("//"):
        netloc, slash, path = rest[2:].partition("/")
        authority, rest = _authority(scheme, netloc, location), slash + path
    path = re.sub(r"/{2,}", "/", rest).rstrip("/")
    return scheme, authority, path


def _dataset(scheme: str, authority: str, path: str) -> tuple[str, str]:
    path = re.sub(r"/{2,}", "/", path).rstrip("/")
    if not authority:  # a local path (file:/wh, /wh) or a file system without hosts (dbfs:/wh)
        return scheme or "file", path or "/"
    namespace = f"{scheme}://{authority}"
    if scheme in OBJECT_STORES:
        return namespace, path.lstrip("/") or "/"
    return namespace, path or "/"


# --------------------------------------------------------------------------- authorities


def _authority(scheme: str, netloc: str, written: str) -> str:
    """``host:port`` (or a sorted list of them), with the scheme's default port made explicit."""
    user, _, hosts = netloc.rpartition("@")
    members = sorted({_member(scheme, host.strip(), written) for host in hosts.split(",") if host.strip()})
    authority = ",".join(members)
    return f"{user}@{authority}" if user and scheme in CONTAINER_STORES else authority


def _member(scheme: str, text: str, written: str) -> str:
    if text.startswith("["):  # an IPv6 literal
        host, _, rest = text[1:].partition("]")
        return host_port(scheme, f"[{host}]", rest[1:] if rest.startswith(":") else rest, written)
    host, _, port = text.partition(":")
    return host_port(scheme, host, port, written)


def host_port(scheme: str, host: str, port: str, written: str) -> str:
    """``host:port`` with the host canonical (:func:`canonical_host`) and the scheme's default port.

    ``written`` is the URI as given, for the message when the port is not a number.
    """
    host = canonical_host(host, keep_case=scheme in BUCKET_STORES)
    port = port.strip()
    if port:
        if not port.isdigit():
            raise ValueError(f"the port {port!r} in {display_uri(written)!r} is not a number")
        port = str(int(port))
    elif host and scheme in DEFAULT_PORTS:
        port = str(DEFAULT_PORTS[scheme])
    return f"{host}:{port}" if port else host


def canonical_host(host: str, keep_case: bool = False) -> str:
    """One spelling per host: IP addresses compressed, no trailing dot, lower case, IDNA (punycode).

    ``keep_case`` keeps a bucket name as written (S3 and GCS buckets are not DNS names here).
    """
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        try:
            return f"[{ipaddress.IPv6Address(text[1:-1]).compressed}]"
        except ValueError:
            return text.lower()
    if keep_case:
        return text
    text = text.rstrip(".") or text  # an absolute name, ms.example.com., is the name
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        pass
    text = text.lower()
    if not text.isascii():
        with contextlib.suppress(UnicodeError):  # not a valid DNS name: kept as written, lower-cased
            text = text.encode("idna").decode("ascii")
    return text


def _join(scheme: str, authority: str, path: str) -> str:
    scheme = scheme.lower()
    if authority or scheme in ("file", *OBJECT_STORES, *DEFAULT_PORTS):
        return f"{scheme}://{authority}{path}"
    return f"{scheme}:{path}"

"""Read a table's metadata with pyiceberg, from the same ``iceberg_catalog`` connection Spark uses.

The snapshot sensor and trigger must not start Spark: they poll a table's metadata, which
pyiceberg reads directly. The connection's catalog properties are Iceberg's own, which pyiceberg
mostly shares; the differences are handled here:

- ``rest``, ``hive`` and ``glue``: the same properties, loaded with ``pyiceberg.catalog.load_catalog``;
- ``jdbc``: pyiceberg's SQL catalog takes a SQLAlchemy URL (``jdbc:postgresql://h/db`` becomes
  ``postgresql+psycopg2://user:password@h/db``; ``jdbc:sqlite:/path`` becomes ``sqlite:////path``),
  under the same catalog name, which the JDBC catalog stores with every table;
- ``hadoop``: pyiceberg has no Hadoop catalog, so the newest metadata file is found the way
  Iceberg's HadoopCatalog finds it, through ``metadata/version-hint.text`` (falling back to the
  highest ``vN.metadata.json``).

Nessie and custom ``catalog-impl`` catalogs have no pyiceberg equivalent and are refused.
pyiceberg is imported inside the functions: DAG parsing never loads it.

:func:`is_transient_error` tells an outage (the catalog unreachable, slow, overloaded or
restarting), which is worth waiting out, from a configuration error, which is not.
"""

from __future__ import annotations

import errno
import re
import urllib.parse
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from airflow_iceberg.catalog.config import CatalogConfig, field_error
from airflow_iceberg.catalog.spark_settings import catalog_properties
from airflow_iceberg.jobs.job_spec import split_identifier

if TYPE_CHECKING:
    from pyiceberg.table import Table

PYICEBERG_KINDS = ("rest", "hive", "glue", "jdbc", "hadoop")
_METADATA_RE = re.compile(r"v(\d+)\.metadata\.json$")
#: errno values of a network that refused, dropped or timed out, not of a wrong path or permission.
_TRANSIENT_ERRNOS = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.ETIMEDOUT,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.ENETDOWN,
        errno.EPIPE,
        errno.EAGAIN,
    }
)
#: What drivers that only raise a generic error (psycopg2, SQLite, pyarrow's S3 and HDFS) say
#: when the server is down, restarting, overloaded or slow.
_TRANSIENT_MESSAGE = re.compile(
    r"connection refused|could not connect|couldn't connect|timed out|timeout expired"
    r"|server closed the connection|connection (?:was )?reset|broken pipe|temporarily unavailable"
    r"|temporary failure in name resolution|the database system is (?:starting up|shutting down)"
    r"|terminating connection|database is locked|too many connections|network_connection",
    re.IGNORECASE,
)
#: pyiceberg's REST errors for 5xx and 429 answers.
_TRANSIENT_REST_ERRORS = ("ServerError", "ServiceUnavailableError", "TooManyRequestsError")
#: thrift's TTransportException types for a socket that would not open, timed out or closed.
_TRANSIENT_THRIFT_TYPES = (1, 3, 4)  # NOT_OPEN, TIMED_OUT, END_OF_FILE


def pyiceberg_properties(config: CatalogConfig) -> dict[str, str]:
    """The pyiceberg catalog properties for a connection (secrets included: keep them in memory)."""
    if config.kind not in PYICEBERG_KINDS:
        raise field_error(
            "catalog_type",
            f"a {config.kind} catalog cannot be read with pyiceberg; "
            f"the snapshot sensor supports {', '.join(PYICEBERG_KINDS)}",
        )
    properties = {k: v for k, v in catalog_properties(config).items() if not k.startswith("jdbc.")}
    if config.kind == "hive" and properties.get("uri"):  # pyiceberg splits a list on "," without trimming
        properties["uri"] = ",".join(uri.strip() for uri in properties["uri"].split(",") if uri.strip())
    if config.kind == "jdbc":
        properties["type"] = "sql"
        properties["uri"] = sqlalchemy_url(str(config.uri), config.login, config.password)
    return properties


def sqlalchemy_url(jdbc_url: str, login: str | None = None, password: str | None = None) -> str:
    """The SQLAlchemy URL of a ``jdbc:sqlite:`` or ``jdbc:postgresql:`` catalog database."""
    if jdbc_url.startswith("jdbc:sqlite:"):
        path = jdbc_url[len("jdbc:sqlite:") :].split("?", 1)[0]
        if path.startswith("file:"):
            path = urllib.parse.urlsplit(path).path
        return f"sqlite:///{path}"
    if jdbc_url.startswith("jdbc:postgresql:"):
        target = urllib.parse.urlsplit(jdbc_url[len("jdbc:") :])
        params = dict(urllib.parse.parse_qsl(target.query))
        user = login or params.get("user")
        secret = password or params.get("password")
        auth = ""
        if user:
            auth = urllib.parse.quote(user, safe="")
            if secret:
                auth += ":" + urllib.parse.quote(secret, safe="")
            auth += "@"
        return f"postgresql+psycopg2://{auth}{target.netloc.rpartition('@')[2]}{target.path}"
    raise field_error("host", "pyiceberg reads JDBC catalogs on SQLite or PostgreSQL only")


def load_table(config: CatalogConfig, table: str) -> Table:
    """The table as pyiceberg sees it now. ``table`` is ``namespace.table`` (a catalog prefix is dropped).

    Raises pyiceberg's ``NoSuchTableError`` if it does not exist.
    """
    parts = list(split_identifier(table))  # bare or backtick-quoted parts, as the job reads them
    if len(parts) > 2 and parts[0] == config.catalog_name:
        parts = parts[1:]
    properties = pyiceberg_properties(config)
    if config.kind == "hadoop":
        return _hadoop_table(properties, parts)
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog(config.catalog_name, **properties)
    return catalog.load_table(tuple(parts))


def _hadoop_table(properties: dict[str, str], parts: list[str]) -> Table:
    from pyiceberg.exceptions import NoSuchTableError
    from pyiceberg.io import load_file_io
    from pyiceberg.table import StaticTable

    warehouse = properties["warehouse"].rstrip("/")
    metadata_dir = "/".join([warehouse, *parts, "metadata"])
    io = load_file_io(properties, metadata_dir)
    try:
        with io.new_input(f"{metadata_dir}/version-hint.text").open() as hint:
            version = int(hint.read().decode().strip())
        path = f"{metadata_dir}/v{version}.metadata.json"
    except (ValueError, OSError) as error:
        if is_transient_error(error):  # the store is down: not the same as a table without a hint
            raise
        path = _newest_metadata_file(metadata_dir)
        if path is None:
            raise NoSuchTableError(f"no Iceberg table metadata under {metadata_dir}") from None
    return StaticTable.from_metadata(path, properties)


def _newest_metadata_file(metadata_dir: str) -> str | None:
    """The highest ``vN.metadata.json`` in a directory any pyarrow file system can list."""
    from pyarrow import fs

    try:
        filesystem, root = fs.FileSystem.from_uri(metadata_dir)
        infos = filesystem.get_file_info(fs.FileSelector(root, allow_not_found=True))
    except (OSError, ValueError) as error:
        if is_transient_error(error):
            raise
        return None
    versions = [
        (int(m.group(1)), info.base_name) for info in infos if (m := _METADATA_RE.search(info.base_name))
    ]
    return f"{metadata_dir}/{max(versions)[1]}" if versions else None


def describe_snapshot(table_name: str, snapshot: Any) -> dict[str, Any]:
    """A JSON-friendly description of a pyiceberg snapshot, as the sensor's XCom and event payload."""
    summary = snapshot.summary
    properties = dict(summary.additional_properties) if summary else {}
    return {
        "table": table_name,
        "snapshot_id": snapshot.snapshot_id,
        "parent_snapshot_id": snapshot.parent_snapshot_id,
        "sequence_number": snapshot.sequence_number,
        "timestamp_ms": snapshot.timestamp_ms,
        "operation": summary.operation.value if summary else None,
        "summary": properties,
    }


def head_snapshot_id(table: Any, branch: str | None = None) -> int | None:
    """The snapshot at the head of ``branch`` (default: the table's current snapshot), if any."""
    if branch:
        ref = table.metadata.refs.get(branch)
        return ref.snapshot_id if ref is not None else None
    snapshot = table.current_snapshot()
    return snapshot.snapshot_id if snapshot is not None else None


def head_snapshot_id_at(table: Any, timestamp_ms: int, branch: str | None = None) -> int | None:
    """The snapshot that was the head of ``branch`` (default: main) at ``timestamp_ms``, if any.

    For main, from the table's snapshot log (which records every change of the current
    snapshot, rollbacks included); for a branch, the newest ancestor of its head committed by
    then. Snapshot times are the writers' clocks.
    """
    if not branch:
        entries = [entry for entry in table.metadata.snapshot_log if entry.timestamp_ms <= timestamp_ms]
        return entries[-1].snapshot_id if entries else None
    head = head_snapshot_id(table, branch)
    snapshot = table.snapshot_by_id(head) if head is not None else None
    while snapshot is not None and snapshot.timestamp_ms > timestamp_ms:
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    return snapshot.snapshot_id if snapshot is not None else None


def snapshots_after(table: Any, after_snapshot_id: int | None, branch: str | None = None) -> list[Any]:
    """The snapshots on ``branch`` (or main) committed after ``after_snapshot_id``, oldest first.

    Walks back from the head through parent ids. If ``after_snapshot_id`` is not an ancestor
    (the table was replaced, or the branch reset), snapshots with a higher sequence number count
    as new; ``None`` means every snapshot is new.
    """
    head = head_snapshot_id(table, branch)
    baseline = table.snapshot_by_id(after_snapshot_id) if after_snapshot_id is not None else None
    found = []
    snapshot = table.snapshot_by_id(head) if head is not None else None
    while snapshot is not None and snapshot.snapshot_id != after_snapshot_id:
        if baseline is not None and snapshot.sequence_number <= baseline.sequence_number:
            break
        found.append(snapshot)
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    return list(reversed(found))


def matches(description: dict[str, Any], operations: tuple[str, ...], summary: dict[str, str]) -> bool:
    """Whether a described snapshot passes the filters: one of ``operations``, every ``summary`` entry."""
    if operations and description.get("operation") not in operations:
        return False
    properties = description.get("summary") or {}
    return all(str(properties.get(key)) == str(value) for key, value in summary.items())


def is_transient_error(error: BaseException) -> bool:
    """Whether reading a catalog failed for a reason that passes: the catalog is unreachable, slow,
    overloaded or restarting (connection refused or reset, a timeout, an HTTP 5xx or 429).

    Anything else (a wrong connection, credentials refused, a missing namespace, a bug) is not:
    waiting would not fix it. The error, its cause and its context are all looked at, since
    clients wrap socket errors in their own.
    """
    return any(_is_transient(cause) for cause in _causes(error))


def _causes(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _is_transient(error: BaseException) -> bool:
    if isinstance(error, (ConnectionError, TimeoutError)):  # refused, reset, aborted, socket timeouts
        return True
    name = type(error).__name__
    if name in _TRANSIENT_REST_ERRORS:
        return True
    if name == "TTransportException":
        return getattr(error, "type", None) in _TRANSIENT_THRIFT_TYPES
    if isinstance(error, OSError) or name in ("OperationalError", "InterfaceError", "DisconnectionError"):
        # OSError: sockets, pyarrow's file systems, requests; the others are SQLAlchemy's
        if getattr(error, "errno", None) in _TRANSIENT_ERRNOS:
            return True
        return getattr(error, "connection_invalidated", False) or bool(_TRANSIENT_MESSAGE.search(str(error)))
    return False

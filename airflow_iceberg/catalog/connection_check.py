"""Fast, Spark-free checks behind the connection form's Test button.

Each check touches the real catalog — a directory, a metastore, a database, a REST service — the
way Spark would, and answers ``(ok, message)``. The message is one line that says what was
checked and what came back, for example ``hive catalog 'prod': get_all_databases on Hive
Metastore thrift://hms:9083 succeeded: 4 database(s)``; a failure names the same check and the
first line of the error, never a traceback.

A Test button must not hang the UI. Every network step has its own timeout (TCP connect, thrift
socket, libpq ``connect_timeout``), and the whole check runs under a deadline, because some
client libraries (pyiceberg's REST client) offer no timeout of their own.

Client libraries (pyiceberg, thrift, psycopg2) are imported inside the checks, so operators and
DAG parsing never pay for them; they come with the ``catalog-check`` extra.
"""

from __future__ import annotations

import os
import re
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlparse

from airflow_iceberg.catalog.config import CatalogConfig
from airflow_iceberg.catalog.secret_detection import display_uri
from airflow_iceberg.catalog.spark_settings import catalog_properties
from airflow_iceberg.jdbc_urls import libpq_parameters, options_search_path, parse_jdbc_url
from airflow_iceberg.naming import DEFAULT_PORTS  # ports assumed when a URI names none

#: Seconds for each connect or call.
TIMEOUT_SECONDS = 5.0
#: Seconds for a whole check, whatever the client library does.
DEADLINE_SECONDS = 10.0


@dataclass(frozen=True)
class Probe:
    """One real check: ``what`` it does (for the message) and the call that does it.

    ``run`` returns what it found, in a few words, or raises.
    """

    what: str
    run: Callable[[], str]


def check_catalog(config: CatalogConfig) -> tuple[bool, str]:
    """Run the check that fits the catalog's type; never raises, never takes much longer than the deadline."""
    prefix = f"{config.kind} catalog {config.catalog_name!r}"
    try:
        probe = _PROBES.get(config.kind, _tcp_probe)(config)
    except Exception as error:  # a URI too malformed to even plan a check
        return False, f"{prefix}: {summarize(error)}"
    if isinstance(probe, str):  # nothing this machine can contact; the note says why
        return True, f"{prefix}: {probe}"
    try:
        found = run_with_deadline(probe.run, DEADLINE_SECONDS)
    except ImportError as error:
        extra = "pip install '.[catalog-check]' in the airflow-iceberg checkout"
        return False, f"{prefix}: {probe.what} needs the {error.name} package: {extra}"
    except Exception as error:  # the UI wants a sentence, not a traceback
        return False, f"{prefix}: {probe.what} failed: {summarize(error)}"
    return True, f"{prefix}: {probe.what} succeeded: {found}"


def summarize(error: BaseException) -> str:
    """``ErrorType: first line of the message``, which is what a person needs to act on."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def run_with_deadline(run: Callable[[], str], seconds: float) -> str:
    """Return ``run()``, or raise ``TimeoutError`` if it has not finished after ``seconds``.

    The call runs in a daemon thread: a client blocked on a silent server cannot be interrupted
    from outside, but it no longer holds up the caller, and it cannot keep the process alive.
    """
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = run()
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=target, name="iceberg-catalog-check", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"no answer within {seconds:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return str(outcome["value"])


def connectable(host: str, port: int) -> None:
    """Fail fast and clearly when nothing accepts TCP connections at ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_SECONDS):
            pass
    except TimeoutError as error:
        reason = f"no answer within {TIMEOUT_SECONDS:g} s"
        raise ConnectionError(f"cannot connect to {host}:{port}: {reason}") from error
    except OSError as error:
        raise ConnectionError(f"cannot connect to {host}:{port}: {error.strerror or error}") from error


def _accepts(host: str, port: int) -> str:
    connectable(host, port)
    return "accepts connections"


def _host_port(uri: str) -> tuple[str, int]:
    target = urlparse(uri.removeprefix("jdbc:"))
    if not target.hostname:
        raise ValueError(f"{display_uri(uri)} names no host")
    return target.hostname, target.port or DEFAULT_PORTS.get(target.scheme, 0)


# --------------------------------------------------------------------------- hadoop


def _local_path(location: str) -> str | None:
    parsed = urlparse(location)
    return unquote(parsed.path) if parsed.scheme in ("", "file") else None


def _hadoop_probe(config: CatalogConfig) -> Probe | str:
    path = _local_path(str(config.warehouse))
    if path is None:
        scheme = urlparse(str(config.warehouse)).scheme
        return (
            f"configuration is valid; the {scheme}:// warehouse {display_uri(str(config.warehouse))} "
            "was not contacted: that needs the Hadoop file system of the cluster"
        )
    return Probe(f"write access to warehouse directory {path}", lambda: _writable_directory(path))


def _writable_directory(path: str) -> str:
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing.rstrip("/")) or "/"
    if not os.path.isdir(existing):
        raise NotADirectoryError(f"{existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(f"{existing} is not writable")
    return "exists and is writable" if existing == path else f"can be created under {existing}"


# --------------------------------------------------------------------------- hive


def _hive_probe(config: CatalogConfig) -> Probe | str:
    if not config.uri:
        return "configuration is valid; no URI is set, so Spark uses hive.metastore.uris from hive-site.xml"
    uris = [uri.strip() for uri in config.uri.split(",") if uri.strip()]
    for uri in uris:
        _host_port(uri)  # a URI without a host fails now, with the URI in the message
    sasl = str(config.hadoop_properties.get("hive.metastore.sasl.enabled", "")).lower() == "true"
    if sasl:  # a Kerberos metastore speaks SASL, which a plain thrift client cannot
        return Probe(f"TCP connection to Kerberos Hive Metastore {config.uri}", lambda: _any_accepts(uris))
    return Probe(f"get_all_databases on Hive Metastore {config.uri}", lambda: _any_lists_databases(uris))


def _any_accepts(uris: list[str]) -> str:
    return _first_success(uris, lambda uri: _accepts(*_host_port(uri)))


def _any_lists_databases(uris: list[str]) -> str:
    return _first_success(uris, lambda uri: f"{len(hive_databases(uri))} database(s)")


def _first_success(uris: list[str], attempt: Callable[[str], str]) -> str:
    """Like a metastore client: try each URI in turn; the first that answers is enough."""
    errors = []
    for uri in uris:
        try:
            found = attempt(uri)
        except Exception as error:
            if len(uris) == 1:
                raise
            errors.append(f"{uri}: {summarize(error)}")
        else:
            return found if len(uris) == 1 else f"{found} at {uri}"
    raise ConnectionError("; ".join(errors))


def hive_databases(uri: str) -> list[str]:
    """The metastore's databases, over plain thrift with a socket timeout (pyiceberg's client has none)."""
    from hive_metastore.ThriftHiveMetastore import Client
    from thrift.protocol import TBinaryProtocol
    from thrift.transport import TSocket, TTransport

    host, port = _host_port(uri)
    connectable(host, port)  # thrift logs a stack trace for a refused connection; fail before that
    sock = TSocket.TSocket(host, port)
    sock.setTimeout(TIMEOUT_SECONDS * 1000)
    transport = TTransport.TBufferedTransport(sock)
    transport.open()
    try:
        return list(Client(TBinaryProtocol.TBinaryProtocol(transport)).get_all_databases())
    except TTransport.TTransportException as error:  # "read timeout", "TSocket read 0 bytes"
        raise ConnectionError(f"{error} (is {host}:{port} a Hive Metastore thrift port?)") from error
    finally:
        transport.close()


# --------------------------------------------------------------------------- jdbc


def _jdbc_probe(config: CatalogConfig) -> Probe | str:
    uri = str(config.uri)
    if uri.startswith("jdbc:sqlite:"):
        return _sqlite_probe(uri)
    if uri.startswith("jdbc:postgresql:"):
        return _postgres_probe(config)
    return _tcp_probe(config)


def sqlite_path(uri: str) -> str:
    """The database file of a ``jdbc:sqlite:`` URL (``:memory:`` or empty for in-memory)."""
    rest = uri[len("jdbc:sqlite:") :]
    if rest.startswith("file:"):
        return unquote(urlparse(rest).path)
    return rest.split("?", 1)[0]


def _sqlite_probe(uri: str) -> Probe | str:
    path = sqlite_path(uri)
    if path in ("", ":memory:"):
        return "configuration is valid; an in-memory SQLite catalog lives only inside the Spark driver"
    if not os.path.isabs(path):
        return (
            f"configuration is valid; the relative SQLite path {path} is resolved in the Spark driver's "
            "working directory, so it was not checked here"
        )
    if not os.path.exists(path):  # a new catalog: Iceberg creates the file on first use
        folder = os.path.dirname(path)
        return Probe(
            f"write access to the folder {folder} of SQLite catalog database {path}",
            lambda: _sqlite_folder(path, folder),
        )
    return Probe(f"reading SQLite catalog database {path}", lambda: _sqlite_tables(path))


def _sqlite_folder(path: str, folder: str) -> str:
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"neither {path} nor its folder {folder} exists")
    _writable_directory(folder)
    return "the database does not exist yet; Iceberg creates it there on first use"


def _sqlite_tables(path: str) -> str:
    import sqlite3

    # Read-only, so the Test button never creates or changes anything; reading sqlite_master
    # makes SQLite check the file header ("file is not a database").
    connection = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, timeout=TIMEOUT_SECONDS)
    try:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "iceberg_tables" not in tables:
            return "no Iceberg catalog tables yet (Iceberg creates them on first use)"
        (count,) = connection.execute("SELECT count(*) FROM iceberg_tables").fetchone()
        return f"{count} Iceberg table(s) registered"
    finally:
        connection.close()


def _postgres_probe(config: CatalogConfig) -> Probe:
    """``SELECT 1`` with the libpq parameters the snapshot sensor uses: same hosts, schema, ``sslmode``."""
    jdbc = parse_jdbc_url(str(config.uri))
    parameters = libpq_parameters(jdbc)
    user = config.login or jdbc.property("user")
    options: dict[str, Any] = {
        **parameters,
        "dbname": parameters.get("dbname") or user or "postgres",
        "user": user,
        "password": config.password or config.uri_password,
        "connect_timeout": max(2, int(TIMEOUT_SECONDS)),  # libpq's minimum is 2
    }
    schema = options_search_path(options.get("options", ""))
    hosts = zip(parameters["host"].split(","), parameters["port"].split(","), strict=True)
    where = ",".join(f"{host}:{port}" for host, port in hosts) + f"/{options['dbname']}"
    what = f"SELECT 1 on PostgreSQL database {where}" + (f", schema {schema}," if schema else "")
    what += f" as {user}" if user else ""
    return Probe(what, lambda: _postgres_tables(options, config.catalog_name))


def _postgres_tables(options: dict[str, Any], catalog_name: str) -> str:
    import psycopg2

    connection = psycopg2.connect(**options)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1, to_regclass('iceberg_tables') IS NOT NULL")
            _, has_catalog_tables = cursor.fetchone()
            if not has_catalog_tables:
                return "no Iceberg catalog tables yet (Iceberg creates them on first use)"
            cursor.execute("SELECT count(*) FROM iceberg_tables WHERE catalog_name = %s", (catalog_name,))
            (count,) = cursor.fetchone()
            return f"{count} Iceberg table(s) registered for catalog {catalog_name!r}"
    finally:
        connection.close()


# --------------------------------------------------------------------------- rest


def _rest_probe(config: CatalogConfig) -> Probe:
    properties = {k: v for k, v in catalog_properties(config).items() if k != "type"}
    if "credential" in properties:
        auth = "with OAuth2 client credentials"
    elif "token" in properties:
        auth = "with a bearer token"
    else:
        auth = "without authentication"
    what = f"GET /v1/config and a namespace listing on REST catalog {display_uri(str(config.uri))} {auth}"
    return Probe(what, lambda: _rest_namespaces(config.catalog_name, properties))


def _rest_namespaces(catalog_name: str, properties: dict[str, str]) -> str:
    """Load the catalog (token, then ``GET /v1/config``) and list namespaces.

    The listing matters: a server may answer ``/v1/config`` to anyone (SeaweedFS does), so only an
    authenticated call proves that the credential or token is accepted.
    """
    from pyiceberg.catalog.rest import RestCatalog

    for url in (properties["uri"], properties.get("oauth2-server-uri")):
        if url:
            connectable(*_host_port(url))  # pyiceberg has no connect timeout of its own
    try:
        namespaces = RestCatalog(catalog_name, **properties).list_namespaces()
    except Exception as error:
        if _NOT_FOUND_RE.search(str(error)):  # the server answered, but no catalog lives at that path
            raise ConnectionError(
                f"HTTP 404 (not found) from {display_uri(properties['uri'])}: no Iceberg REST catalog at "
                "that path. Check the URI's path: it is the catalog's base URL, the part before "
                "/v1/config (e.g. http://rest:8181 or https://host/api/catalog)"
            ) from error
        raise
    return f"{len(namespaces)} top-level namespace(s)"


#: How pyiceberg reports an HTTP 404: ``RESTError 404: Received unexpected JSON Payload: <!DOCTYPE…``.
_NOT_FOUND_RE = re.compile(r"\b404\b")


# --------------------------------------------------------------------------- other types


def _tcp_probe(config: CatalogConfig) -> Probe | str:
    if not config.uri:
        return f"configuration is valid; a {config.kind} catalog has no URI to contact from here"
    host, port = _host_port(config.uri)
    # Only reachability: these catalogs' APIs (Glue, Nessie, custom classes) need their own clients.
    what = f"TCP connection to {host}:{port} (the catalog API itself is not called)"
    return Probe(what, lambda: _accepts(host, port))


_PROBES: dict[str, Callable[[CatalogConfig], Probe | str]] = {
    "hadoop": _hadoop_probe,
    "hive": _hive_probe,
    "jdbc": _jdbc_probe,
    "rest": _rest_probe,
}

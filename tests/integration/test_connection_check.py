"""The connection form's Test button against real catalogs: no Spark, one line, bounded time.

Every check goes through ``IcebergCatalogHook(iceberg_conn_id=...).test_connection()`` with the
connection defined as ``AIRFLOW_CONN_*``, as the UI and a deployment would. For each type a good
connection passes and a bad one — wrong password or secret, closed port, unknown host, or a
server that accepts TCP connections but never answers — fails with a message that names the
check, in a few seconds rather than a TCP timeout's minutes.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import time
import uuid
from collections.abc import Iterator

import pyarrow as pa
import pytest

from airflow_iceberg.catalog.connection_check import DEADLINE_SECONDS, TIMEOUT_SECONDS
from airflow_iceberg.hooks.iceberg_catalog import IcebergCatalogHook
from tests.integration.catalog_connections import (
    hadoop_connection,
    hive_connection,
    postgres_connection,
    rest_connection,
    sqlite_connection,
)
from tests.servers.ports import free_port

#: A refused connection or a bad password is reported before any timeout could fire; only a
#: silent server waits for one. (How fast a check that succeeds is, is not asserted: that is speed.)
FAST_SECONDS = TIMEOUT_SECONDS


@pytest.fixture
def test_button(monkeypatch):
    """Define the connection as ``AIRFLOW_CONN_CHECKED`` and press Test; returns (ok, message, seconds)."""

    def press(connection: dict) -> tuple[bool, str, float]:
        monkeypatch.setenv("AIRFLOW_CONN_CHECKED", json.dumps(connection))
        started = time.monotonic()
        ok, message = IcebergCatalogHook(iceberg_conn_id="checked").test_connection()
        elapsed = time.monotonic() - started
        assert "\n" not in message and "Traceback" not in message, message
        return ok, message, elapsed

    return press


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port where the kernel completes TCP handshakes but nobody ever reads or answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


def closed_port() -> int:
    return free_port()


def with_host(connection: dict, host: str) -> dict:
    return {**connection, "host": host}


# --------------------------------------------------------------------------- hadoop


def test_hadoop_local_warehouse(test_button, tmp_path):
    existing = tmp_path / "warehouse"
    existing.mkdir()
    ok, message, _ = test_button(hadoop_connection(existing, "demo"))
    assert ok, message
    assert message == f"hadoop catalog 'demo': write access to warehouse directory {existing} succeeded: " + (
        "exists and is writable"
    )
    ok, message, _ = test_button(hadoop_connection(tmp_path / "new" / "wh", "demo"))
    assert ok and message.endswith(f"can be created under {tmp_path}"), message


def test_hadoop_warehouse_under_a_file_fails(test_button, tmp_path):
    (tmp_path / "afile").write_text("not a directory")
    ok, message, _ = test_button(hadoop_connection(tmp_path / "afile" / "wh", "demo"))
    assert not ok
    assert message == (
        f"hadoop catalog 'demo': write access to warehouse directory {tmp_path}/afile/wh failed: "
        f"NotADirectoryError: {tmp_path}/afile is not a directory"
    )


# --------------------------------------------------------------------------- hive


def test_hive_metastore_lists_its_databases(test_button, hive_metastore):
    ok, message, _elapsed = test_button(hive_connection(hive_metastore))
    count = len(hive_metastore.list_databases())
    assert ok, message
    assert message == (
        f"hive catalog 'hive': get_all_databases on Hive Metastore {hive_metastore.uri} succeeded: "
        f"{count} database(s)"
    )


def test_hive_second_uri_answers_when_the_first_is_down(test_button, hive_metastore):
    uris = f"thrift://127.0.0.1:{closed_port()},{hive_metastore.uri}"
    ok, message, _ = test_button(with_host(hive_connection(hive_metastore), uris))
    assert ok, message
    assert message.endswith(f"database(s) at {hive_metastore.uri}"), message


def test_hive_closed_port_and_unknown_host_fail_fast(test_button, hive_metastore):
    port = closed_port()
    ok, message, elapsed = test_button(
        with_host(hive_connection(hive_metastore), f"thrift://127.0.0.1:{port}")
    )
    assert not ok and elapsed < FAST_SECONDS
    assert message == (
        f"hive catalog 'hive': get_all_databases on Hive Metastore thrift://127.0.0.1:{port} failed: "
        f"ConnectionError: cannot connect to 127.0.0.1:{port}: Connection refused"
    )
    ok, message, elapsed = test_button(
        with_host(hive_connection(hive_metastore), "thrift://metastore.invalid")
    )
    assert not ok and elapsed < FAST_SECONDS
    assert "cannot connect to metastore.invalid:9083" in message, message


def test_hive_silent_server_fails_within_the_timeout(test_button, hive_metastore, silent_port):
    ok, message, elapsed = test_button(
        with_host(hive_connection(hive_metastore), f"thrift://127.0.0.1:{silent_port}")
    )
    assert not ok
    assert elapsed < TIMEOUT_SECONDS + FAST_SECONDS
    assert message.startswith(
        f"hive catalog 'hive': get_all_databases on Hive Metastore thrift://127.0.0.1:{silent_port} failed: "
    )


# --------------------------------------------------------------------------- jdbc: PostgreSQL


def test_postgres_answers_with_the_right_password(test_button, postgres_server, tmp_path):
    ok, message, _elapsed = test_button(
        postgres_connection(postgres_server, tmp_path, catalog_name="checked_pg")
    )
    assert ok, message
    where = f"{postgres_server.host}:{postgres_server.port}/{postgres_server.database}"
    assert message.startswith(
        f"jdbc catalog 'checked_pg': SELECT 1 on PostgreSQL database {where} as iceberg succeeded: "
    )


def test_postgres_wrong_password_fails(test_button, postgres_server, tmp_path):
    ok, message, elapsed = test_button(postgres_connection(postgres_server, tmp_path, password="wrong"))
    assert not ok and elapsed < FAST_SECONDS
    assert "SELECT 1 on PostgreSQL database" in message
    assert (
        f'OperationalError: connection to server at "127.0.0.1", port {postgres_server.port} failed: '
        in message
    )
    assert f'password authentication failed for user "{postgres_server.user}"' in message


def test_postgres_closed_port_fails_fast_and_silent_server_within_the_timeout(
    test_button, postgres_server, tmp_path, silent_port
):
    connection = postgres_connection(postgres_server, tmp_path)
    port = closed_port()
    ok, message, elapsed = test_button(with_host(connection, f"jdbc:postgresql://127.0.0.1:{port}/iceberg"))
    assert not ok and elapsed < FAST_SECONDS
    assert "Connection refused" in message, message
    ok, message, elapsed = test_button(
        with_host(connection, f"jdbc:postgresql://127.0.0.1:{silent_port}/iceberg")
    )
    assert not ok and elapsed < TIMEOUT_SECONDS + FAST_SECONDS
    assert "timeout expired" in message, message


# --------------------------------------------------------------------------- jdbc: SQLite


def test_sqlite_catalog_database(test_button, tmp_path):
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    database, warehouse = tmp_path / "catalog.db", tmp_path / "warehouse"
    ok, message, _ = test_button(sqlite_connection(database, warehouse))
    assert (ok, message) == (
        True,
        f"jdbc catalog 'lite': write access to the folder {tmp_path} of SQLite catalog database {database} "
        "succeeded: the database does not exist yet; Iceberg creates it there on first use",
    )
    assert not database.exists(), "the Test button must not create the database"

    catalog = SqlCatalog("lite", uri=f"sqlite:///{database}", warehouse=warehouse.as_uri())
    catalog.create_namespace("db")
    catalog.create_table("db.t", schema=pa.schema([pa.field("id", pa.int64())]))
    ok, message, _ = test_button(sqlite_connection(database, warehouse))
    assert ok, message
    assert message == (
        f"jdbc catalog 'lite': reading SQLite catalog database {database} succeeded: "
        "1 Iceberg table(s) registered"
    )


def test_sqlite_bad_file_and_missing_folder_fail(test_button, tmp_path):
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a SQLite database, only text that is long enough " * 4)
    ok, message, _ = test_button(sqlite_connection(garbage, tmp_path))
    assert not ok
    assert message == (
        f"jdbc catalog 'lite': reading SQLite catalog database {garbage} failed: "
        "DatabaseError: file is not a database"
    )
    missing = tmp_path / "no-such-folder" / "catalog.db"
    ok, message, _ = test_button(sqlite_connection(missing, tmp_path))
    assert not ok
    assert f"FileNotFoundError: neither {missing} nor its folder {missing.parent} exists" in message
    with sqlite3.connect(garbage.with_name("untouched.db")):
        pass  # sanity: sqlite itself works here, so the failures above are about the files


# --------------------------------------------------------------------------- rest


def test_rest_oauth2_client_credentials_and_bearer_token(test_button, rest_catalog):
    ok, message, _elapsed = test_button(rest_connection(rest_catalog))
    assert ok, message
    assert message.startswith(
        f"rest catalog 'rest': GET /v1/config and a namespace listing on REST catalog {rest_catalog.uri} "
        "with OAuth2 client credentials succeeded: "
    )
    assert message.endswith("top-level namespace(s)")
    ok, message, _ = test_button(rest_connection(rest_catalog, token=rest_catalog.fetch_token()))
    assert ok and "with a bearer token succeeded" in message, message


def test_rest_wrong_secret_or_token_fails(test_button, rest_catalog):
    ok, message, elapsed = test_button(rest_connection(rest_catalog, secret="wrong-secret"))
    assert not ok and elapsed < FAST_SECONDS
    assert message.endswith(
        "with OAuth2 client credentials failed: OAuthError: invalid_client: Invalid client credentials"
    )
    # SeaweedFS answers GET /v1/config to anyone: only the namespace listing exposes a bad token.
    ok, message, _ = test_button(rest_connection(rest_catalog, token="not-a-token"))
    assert not ok
    assert message.endswith(
        "with a bearer token failed: "
        "UnauthorizedError: NotAuthorizedException: Bearer token is invalid or expired"
    )


def test_rest_closed_port_fails_fast_and_silent_server_within_the_deadline(
    test_button, rest_catalog, silent_port
):
    port = closed_port()
    ok, message, elapsed = test_button(with_host(rest_connection(rest_catalog), f"http://127.0.0.1:{port}"))
    assert not ok and elapsed < FAST_SECONDS
    assert f"ConnectionError: cannot connect to 127.0.0.1:{port}: Connection refused" in message
    silent = {**rest_connection(rest_catalog), "host": f"http://127.0.0.1:{silent_port}"}
    silent["extra"] = {
        **silent["extra"],
        "catalog_properties": {"oauth2-server-uri": f"http://127.0.0.1:{silent_port}/v1/oauth/tokens"},
    }
    ok, message, elapsed = test_button(silent)
    assert not ok and elapsed < DEADLINE_SECONDS + FAST_SECONDS
    assert message.endswith(f"failed: TimeoutError: no answer within {DEADLINE_SECONDS:g} s"), message


def test_a_password_in_the_jdbc_url_is_used_but_never_shown(test_button, postgres_server, tmp_path):
    url = f"{postgres_server.jdbc_uri}?user={postgres_server.user}&password={postgres_server.password}"
    connection = with_host(postgres_connection(postgres_server, tmp_path), url)
    del connection["login"], connection["password"]
    ok, message, _ = test_button(connection)
    assert ok, message
    assert postgres_server.password not in message


def test_rest_uri_with_a_wrong_path_says_to_check_the_path(test_button):
    """A web server that is not a REST catalog at that path answers 404 with an HTML page."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class NotACatalog(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<!DOCTYPE HTML><html><body><h1>Not Found</h1></body></html>"
            self.send_response(404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotACatalog)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        uri = f"http://127.0.0.1:{server.server_port}/wrong/path"
        connection = {"conn_type": "iceberg_catalog", "host": uri, "extra": {"catalog_type": "rest"}}
        ok, message, elapsed = test_button(connection)
    finally:
        server.shutdown()
        server.server_close()
    assert not ok and elapsed < FAST_SECONDS
    assert message.endswith(
        f"failed: ConnectionError: HTTP 404 (not found) from {uri}: no Iceberg REST catalog at that path. "
        "Check the URI's path: it is the catalog's base URL, the part before /v1/config "
        "(e.g. http://rest:8181 or https://host/api/catalog)"
    ), message
    assert "DOCTYPE" not in message


def test_a_jdbc_catalog_in_its_own_postgresql_schema_is_checked_and_watched_there(
    test_button, postgres_server, tmp_path, monkeypatch, request
):
    """``jdbc:postgresql://db/iceberg?currentSchema=team_b`` is how a JdbcCatalog is kept in its own
    schema (pgjdbc sets the search path; JdbcCatalog's tables are unqualified). The sensor's
    SQLAlchemy URL dropped the query, so it read (and, pyiceberg being pyiceberg, created) the
    catalog tables in ``public``: the table "did not exist" there, and every commit to the real one
    was missed. The Test button now checks the same schema the sensor reads, with ``sslmode``."""
    import psycopg2
    from pyiceberg.catalog.sql import SqlCatalog

    from airflow_iceberg.sensors.snapshot import IcebergSnapshotSensor

    schema = f"team_{uuid.uuid4().hex[:8]}"

    def run_sql(statement: str) -> None:
        with psycopg2.connect(
            host=postgres_server.host,
            port=postgres_server.port,
            dbname=postgres_server.database,
            user=postgres_server.user,
            password=postgres_server.password,
        ) as db:
            db.cursor().execute(statement)

    run_sql(f"CREATE SCHEMA {schema}")
    # Iceberg's JdbcCatalog creates its tables only when no schema of the database has one named
    # iceberg_tables (it asks the driver's metadata without a schema): this schema's would keep a
    # later catalog of the shared server from getting its own in public.
    request.addfinalizer(lambda: run_sql(f"DROP SCHEMA {schema} CASCADE"))
    warehouse = tmp_path / "wh"
    warehouse.mkdir()
    writer = SqlCatalog(  # the writer, in that schema, by libpq's own options
        "teams",
        uri=f"{postgres_server.sqlalchemy_uri}?options=-csearch_path%3D{schema}",
        warehouse=warehouse.as_uri(),
    )
    writer.create_namespace("db")
    table = writer.create_table("db.orders", schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    connection = postgres_connection(postgres_server, warehouse, catalog_name="teams")
    connection["host"] = (
        f"{postgres_server.jdbc_uri}?currentSchema={schema}&sslmode=disable"  # as Spark uses it
    )
    monkeypatch.setenv("AIRFLOW_CONN_TEAM_CATALOG", json.dumps(connection))

    ok, message, _ = test_button(connection)
    assert ok and message.endswith("succeeded: 1 Iceberg table(s) registered for catalog 'teams'"), message
    assert f", schema {schema}, as " in message
    sensor = IcebergSnapshotSensor(
        task_id="s", table="db.orders", iceberg_conn_id="team_catalog", deferrable=False
    )
    sensor._baseline_id = sensor.baseline({})
    assert sensor._baseline_id == table.current_snapshot().snapshot_id, "the baseline is not the table's head"
    table.append(pa.table({"id": pa.array([3], pa.int64())}))
    poked = sensor.poke({})
    assert poked.is_done and poked.xcom_value["snapshot_id"] == table.current_snapshot().snapshot_id

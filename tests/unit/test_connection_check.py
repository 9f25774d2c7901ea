"""The Test button's logic without catalog servers: what each check plans, says, and how long it may take.

Real servers are exercised in ``tests/integration/test_connection_check.py``; here client
libraries are replaced where a server would be needed, and loopback sockets stand in for hosts.
"""

from __future__ import annotations

import socket
import sys
import time

import pytest

from airflow_iceberg.catalog import connection_check
from airflow_iceberg.catalog.config import config_from_fields
from airflow_iceberg.catalog.connection_check import (
    check_catalog,
    display_uri,
    run_with_deadline,
    sqlite_path,
    summarize,
)
from airflow_iceberg.hooks.iceberg_catalog import IcebergCatalogHook

FORM_LABELS = {
    "catalog_properties": "Catalog properties (JSON)",
    "hadoop_properties": "Hadoop properties (JSON)",
}


def check(extra: dict, **fields) -> tuple[bool, str]:
    return check_catalog(config_from_fields({"catalog_name": "cat", **extra}, **fields))


@pytest.fixture
def listening_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


@pytest.fixture
def closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the fixture returns


# --------------------------------------------------------------------------- building blocks


def test_summarize_keeps_the_type_and_the_first_line_only():
    assert summarize(ValueError("bad thing\n  at Foo.java:1\n  at Bar.java:2")) == "ValueError: bad thing"
    assert summarize(ValueError("\n\n  second line first  \n")) == "ValueError: second line first"
    assert summarize(TimeoutError()) == "TimeoutError"


def test_run_with_deadline_returns_raises_and_gives_up_in_time():
    assert run_with_deadline(lambda: "found", 1) == "found"
    with pytest.raises(KeyError, match="missing"):
        run_with_deadline(lambda: {}["missing"], 1)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"no answer within 0\.2 s"):
        run_with_deadline(lambda: time.sleep(5) or "late", 0.2)
    assert time.monotonic() - started < 1


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        ("jdbc:postgresql://db:5432/cat?user=u&password=p", "jdbc:postgresql://db:5432/cat"),
        ("https://client:secret@rest.example/api?token=t", "https://rest.example/api"),
        ("thrift://hms:9083", "thrift://hms:9083"),
        ("jdbc:sqlite:/data/cat.db?journal_mode=wal", "jdbc:sqlite:/data/cat.db"),
    ],
)
def test_display_uri_hides_user_info_and_query(uri, shown):
    assert display_uri(uri) == shown


@pytest.mark.parametrize(
    ("uri", "path"),
    [
        ("jdbc:sqlite:/data/cat.db", "/data/cat.db"),
        ("jdbc:sqlite:/data/cat.db?foreign_keys=on", "/data/cat.db"),
        ("jdbc:sqlite:file:/data/cat%20x.db?cache=shared", "/data/cat x.db"),
        ("jdbc:sqlite:file:///data/cat.db", "/data/cat.db"),
        ("jdbc:sqlite::memory:", ":memory:"),
        ("jdbc:sqlite:relative.db", "relative.db"),
    ],
)
def test_sqlite_path_from_jdbc_url(uri, path):
    assert sqlite_path(uri) == path


# --------------------------------------------------------------------------- nothing to contact


@pytest.mark.parametrize(
    ("extra", "fields", "note"),
    [
        (
            {"catalog_type": "hadoop", "warehouse": "s3a://bucket/wh"},
            {},
            "the s3a:// warehouse s3a://bucket/wh was not contacted",
        ),
        ({"catalog_type": "hive", "warehouse": "file:///wh"}, {}, "hive.metastore.uris from hive-site.xml"),
        (
            {"catalog_type": "jdbc", "warehouse": "file:///wh"},
            {"host": "jdbc:sqlite:catalog.db"},
            "relative SQLite path catalog.db is resolved in the Spark driver's working directory",
        ),
        (
            {"catalog_type": "jdbc", "warehouse": "file:///wh"},
            {"host": "jdbc:sqlite::memory:"},
            "in-memory SQLite catalog",
        ),
        ({"catalog_type": "glue", "warehouse": "s3://b/wh"}, {}, "a glue catalog has no URI to contact"),
    ],
)
def test_a_valid_configuration_with_nothing_to_contact_passes_with_a_note(extra, fields, note):
    ok, message = check(extra, **fields)
    assert ok
    assert message.startswith(f"{extra['catalog_type']} catalog 'cat': configuration is valid; ")
    assert note in message


# --------------------------------------------------------------------------- reachability checks


def test_other_types_check_that_the_host_accepts_connections(listening_port, closed_port):
    ok, message = check({"catalog_type": "nessie"}, host=f"http://127.0.0.1:{listening_port}/api/v2")
    assert (ok, message) == (
        True,
        f"nessie catalog 'cat': TCP connection to 127.0.0.1:{listening_port} (the catalog API itself is "
        "not called) succeeded: accepts connections",
    )
    ok, message = check({"catalog_type": "nessie"}, host=f"http://127.0.0.1:{closed_port}/api/v2")
    assert not ok
    assert message.endswith(
        f"failed: ConnectionError: cannot connect to 127.0.0.1:{closed_port}: Connection refused"
    )


def test_a_kerberos_metastore_is_only_checked_for_reachability(listening_port):
    ok, message = check(
        {"catalog_type": "hive", "hadoop_properties": {"hive.metastore.sasl.enabled": "true"}},
        host=f"thrift://127.0.0.1:{listening_port}",
    )
    assert ok, message
    assert (
        f"TCP connection to Kerberos Hive Metastore thrift://127.0.0.1:{listening_port} succeeded" in message
    )


def test_other_jdbc_databases_get_their_default_port(monkeypatch):
    seen = []
    monkeypatch.setattr(connection_check, "connectable", lambda host, port: seen.append((host, port)))
    ok, message = check(
        {"catalog_type": "jdbc", "warehouse": "file:///wh"}, host="jdbc:mysql://db.example/iceberg"
    )
    assert ok and seen == [("db.example", 3306)], message


def test_a_malformed_uri_fails_with_the_reason():
    ok, message = check(
        {"catalog_type": "jdbc", "warehouse": "file:///wh"}, host="jdbc:postgresql://db:notaport/cat"
    )
    assert not ok
    assert message == "jdbc catalog 'cat': ValueError: the port 'notaport' of the host 'db' is not a number"


# --------------------------------------------------------------------------- what clients receive


def test_postgres_check_takes_credentials_from_the_connection_or_the_url(monkeypatch):
    import psycopg2

    calls = []

    def fake_connect(**options):
        calls.append(options)
        raise psycopg2.OperationalError("stop here\nDETAIL: second line")

    monkeypatch.setattr(psycopg2, "connect", fake_connect)
    ok, message = check(
        {"catalog_type": "jdbc", "warehouse": "file:///wh"},
        host="jdbc:postgresql://db.example/cat?sslmode=require",
        login="etl",
        password="s3cret",
    )
    assert not ok
    assert message == (
        "jdbc catalog 'cat': SELECT 1 on PostgreSQL database db.example:5432/cat as etl failed: "
        "OperationalError: stop here"
    )
    check(
        {"catalog_type": "jdbc", "warehouse": "file:///wh"},
        host="jdbc:postgresql://db.example:6543/cat?user=u&password=from-url",
    )
    # a catalog in its own schema is checked there, as the sensor reads it (same libpq parameters)
    ok, message = check(
        {"catalog_type": "jdbc", "warehouse": "file:///wh"},
        host="jdbc:postgresql://a,b:5433/cat?currentSchema=team_b&ssl=true&ApplicationName=etl&loginTimeout=3",
        login="etl",
    )
    assert message.startswith(
        "jdbc catalog 'cat': SELECT 1 on PostgreSQL database a:5432,b:5433/cat, schema team_b, as etl failed"
    )
    assert calls == [
        {
            "host": "db.example",
            "port": "5432",
            "dbname": "cat",
            "user": "etl",
            "password": "s3cret",
            "connect_timeout": 5,
            "sslmode": "require",
        },
        {
            "host": "db.example",
            "port": "6543",
            "dbname": "cat",
            "user": "u",
            "password": "from-url",
            "connect_timeout": 5,
        },
        {
            "host": "a,b",
            "port": "5432,5433",
            "dbname": "cat",
            "user": "etl",
            "password": None,
            "connect_timeout": 5,
            "sslmode": "verify-full",  # pgjdbc's ssl=true alone
            "application_name": "etl",
            "options": "-c search_path=team_b",
        },
    ]


@pytest.mark.parametrize(
    ("login", "password", "auth", "expected"),
    [
        ("client", "secret", "with OAuth2 client credentials", {"credential": "client:secret"}),
        (None, "tok", "with a bearer token", {"token": "tok"}),
        (None, None, "without authentication", {}),
    ],
)
def test_rest_check_gives_pyiceberg_the_catalog_properties(
    monkeypatch, listening_port, login, password, auth, expected
):
    import pyiceberg.catalog.rest

    received = {}

    class FakeRestCatalog:
        def __init__(self, name, **properties):
            received.update(properties, name=name)

        def list_namespaces(self):
            return [("a",), ("b",)]

    monkeypatch.setattr(pyiceberg.catalog.rest, "RestCatalog", FakeRestCatalog)
    uri = f"http://127.0.0.1:{listening_port}"
    ok, message = check(
        {"catalog_type": "rest", "warehouse": "wh", "catalog_properties": {"scope": "catalog"}},
        host=uri,
        login=login,
        password=password,
    )
    assert (ok, message) == (
        True,
        f"rest catalog 'cat': GET /v1/config and a namespace listing on REST catalog {uri} {auth} "
        "succeeded: 2 top-level namespace(s)",
    )
    assert received == {"name": "cat", "uri": uri, "warehouse": "wh", "scope": "catalog", **expected}


def test_a_missing_client_library_says_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg2", None)  # makes `import psycopg2` fail
    ok, message = check({"catalog_type": "jdbc", "warehouse": "file:///wh"}, host="jdbc:postgresql://db/cat")
    assert (ok, message) == (
        False,
        "jdbc catalog 'cat': SELECT 1 on PostgreSQL database db:5432/cat needs the psycopg2 package: "
        "pip install '.[catalog-check]' in the airflow-iceberg checkout",
    )


# --------------------------------------------------------------------------- the hook


def test_hook_reports_an_invalid_connection_without_contacting_anything(iceberg_connection):
    conn_id = iceberg_connection("bad_conn", extra={"catalog_type": "hadoop"})
    ok, message = IcebergCatalogHook(iceberg_conn_id=conn_id).test_connection()
    assert (ok, message) == (
        False,
        "Invalid configuration: Iceberg catalog connection field 'Warehouse' (warehouse): "
        "is required for a hadoop catalog",
    )


def test_the_test_button_refuses_a_spark_and_iceberg_pairing_iceberg_never_built(iceberg_connection):
    extra = {"catalog_type": "hadoop", "warehouse": "/w", "spark_version": "4.0", "iceberg_version": "1.9.2"}
    hook = IcebergCatalogHook(iceberg_conn_id=iceberg_connection("pair", extra=extra))
    ok, message = hook.test_connection()
    assert not ok
    assert message.startswith(
        "Invalid configuration: Iceberg catalog connection field 'Iceberg version' (iceberg_version): "
        "Iceberg 1.9.2 has no runtime for Spark 4.0 (Spark version)"
    )


def test_hook_runs_the_check_of_its_connection(iceberg_connection, tmp_path):
    conn_id = iceberg_connection(extra={"catalog_name": "demo", "warehouse": tmp_path.as_uri()})
    assert IcebergCatalogHook(iceberg_conn_id=conn_id).test_connection() == (
        True,
        f"hadoop catalog 'demo': write access to warehouse directory {tmp_path} succeeded: "
        "exists and is writable",
    )


def test_the_test_button_says_a_saved_iceberg_version_pins_an_older_runtime(iceberg_connection, tmp_path):
    """A connection saved by the old form stores ``1.10.2``, which still wins over the line's default:
    the button says so, else nothing on the form tells the user that clearing the field upgrades."""
    extra = {"catalog_name": "demo", "warehouse": tmp_path.as_uri(), "iceberg_version": "1.10.2"}
    ok, message = IcebergCatalogHook(iceberg_conn_id=iceberg_connection(extra=extra)).test_connection()
    assert (ok, message) == (
        True,
        f"hadoop catalog 'demo': write access to warehouse directory {tmp_path} succeeded: "
        "exists and is writable; runtime: Iceberg 1.10.2, as Iceberg version says (leave it empty for "
        "Spark 3.5's newest, 1.12.0)",
    )
    extra["iceberg_version"] = "1.12.0"  # the line's default, given explicitly: nothing to say
    ok, message = IcebergCatalogHook(iceberg_conn_id=iceberg_connection(extra=extra)).test_connection()
    assert ok and message.endswith("exists and is writable"), message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("catalog_properties", {"fs.s3a.secret.key": "s3cr3t-value"}),
        ("hadoop_properties", {"fs.s3a.secret.key": "s3cr3t-value"}),
        (
            "catalog_properties",
            '{"credential": "s3cr3t-value"}',
        ),  # a JSON string: Airflow masks nothing in it
    ],
)
def test_a_secret_outside_secret_properties_fails_the_test_button(iceberg_connection, field, value):
    """Airflow shows such a value in clear; the button says where it belongs, as a task would."""
    conn_id = iceberg_connection(host="thrift://m:1", extra={"catalog_type": "hive", field: value})
    ok, message = IcebergCatalogHook(iceberg_conn_id=conn_id).test_connection()
    key = "credential" if isinstance(value, str) else "fs.s3a.secret.key"
    target = f"hadoop.{key}" if field == "hadoop_properties" else key
    assert not ok
    label = FORM_LABELS[field]
    assert message == (
        f"Invalid configuration: Iceberg catalog connection field {label!r} ({field}): key {key!r} looks "
        f"like a secret, and Airflow shows {label} in clear in the UI and REST API (it masks only some "
        f"key names there, and none inside a JSON string); move it to Secret properties (JSON) "
        f"(secret_properties) as {target!r}"
    )
    assert "s3cr3t-value" not in message

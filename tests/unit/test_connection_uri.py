"""A connection in URI form works for every catalog type, Airflow's own round trip included.

Airflow writes connections out as URIs (``Connection.get_uri()``) and reads them back
(``Connection(uri=...)``): the Test button does it for every test, ``airflow connections export``
and secrets backends that store URIs do it too. Whatever comes back must be the same catalog.
"""

from __future__ import annotations

import json

import pytest
from airflow.models.connection import Connection

from airflow_iceberg.catalog.config import config_from_connection
from airflow_iceberg.hooks.iceberg_catalog import IcebergCatalogHook

CASES = {
    "hadoop": ({"catalog_type": "hadoop", "warehouse": "s3a://b/wh"}, {"login": "AK", "password": "s/k"}),
    "hive": ({"catalog_type": "hive"}, {"host": "thrift://a:9083,thrift://b:9083"}),
    "hive-port": ({"catalog_type": "hive"}, {"host": "thrift://hms", "port": 9083}),
    "rest": (
        {
            "catalog_type": "rest",
            "catalog_properties": {"oauth2-server-uri": "https://idp/t?x=1", "scope": "catalog"},
            "secret_properties": {"s3.secret-access-key": "p@ss:w/rd"},
            "cache_enabled": "false",
        },
        {"host": "https://rest.example/api/catalog", "login": "client", "password": "p@ss:w/rd%"},
    ),
    "jdbc-postgresql": (
        {"catalog_type": "jdbc", "warehouse": "file:///w"},
        {"host": "postgresql://db:5432/Cat", "login": "etl", "password": "pw"},
    ),
    "jdbc-sqlite": ({"catalog_type": "jdbc", "warehouse": "/w"}, {"host": "jdbc:sqlite:/data/Cat.db"}),
    "jdbc-uri-in-extra": (
        {"catalog_type": "jdbc", "warehouse": "/w", "uri": "jdbc:postgresql://db:5432/cat"},
        {},
    ),
    "glue": ({"catalog_type": "glue", "warehouse": "s3://b/wh"}, {"login": "AK", "password": "SK"}),
    "nessie": ({"catalog_type": "nessie", "warehouse": "/w"}, {"host": "http://nessie:19120/api/v2"}),
    "custom": (
        {"catalog_type": "custom", "catalog_impl": "com.x.Cat", "login_property": "u", "pass_property": "p"},
        {"login": "me", "password": "secret"},
    ),
}


def stored(extra: dict, fields: dict) -> Connection:
    """The connection as the UI stores it: every form field present, unset ones as null."""
    return Connection(conn_id="stored", conn_type="iceberg_catalog", extra=json.dumps(extra), **fields)


@pytest.mark.parametrize("name", sorted(CASES))
def test_uri_round_trip_keeps_the_catalog(name):
    original = stored(*CASES[name])
    back = Connection(conn_id="back", uri=original.get_uri())
    assert config_from_connection(back) == config_from_connection(original)


def test_old_jdbc_host_with_jdbc_prefix_is_read_back_by_the_hook(monkeypatch):
    """``jdbc:postgresql://…`` in Host: Airflow's parser refuses the URI it wrote; the hook reads it."""
    original = stored({"catalog_type": "jdbc", "warehouse": "/w"}, {"host": "jdbc:postgresql://db:5432/cat"})
    with pytest.raises(Exception, match="Invalid connection string"):
        Connection(conn_id="back", uri=original.get_uri())
    monkeypatch.setenv("AIRFLOW_CONN_ROUNDTRIP", original.get_uri())
    hook = IcebergCatalogHook(iceberg_conn_id="roundtrip")
    assert hook.catalog_config == config_from_connection(original)
    assert hook.catalog_config.uri == "jdbc:postgresql://db:5432/cat"


def test_uri_examples_in_the_docs_are_read_as_documented():
    import re
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "connection.md").read_text()
    examples = dict(re.findall(r"AIRFLOW_CONN_(\w+)='([^']+)'", text))
    read = {name: config_from_connection(Connection(conn_id=name, uri=uri)) for name, uri in examples.items()}
    assert {name: (c.kind, c.uri, c.login, c.password) for name, c in read.items()} == {
        "HMS": ("hive", "thrift://hms:9083", None, None),
        "PG": ("jdbc", "jdbc:postgresql://db:5432/iceberg", "etl", "pw"),
        "PG2": ("jdbc", "jdbc:postgresql://db:5432/iceberg", "etl", "pw"),
    }

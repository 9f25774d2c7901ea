"""Unit-test fixtures: Airflow connections defined through environment variables, as users do."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def iceberg_connection(monkeypatch):
    """Define ``AIRFLOW_CONN_<ID>`` JSON for an iceberg_catalog connection; returns a setter."""

    def define(conn_id: str = "iceberg_catalog_default", **connection) -> str:
        connection.setdefault("conn_type", "iceberg_catalog")
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection))
        return conn_id

    return define


@pytest.fixture
def spark_connection(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))

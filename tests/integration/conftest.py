"""Integration fixtures: a private Airflow home, and an independent reader for Iceberg tables."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.integration.airflow_runner import AirflowRunner


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def airflow_runner(tmp_path_factory) -> AirflowRunner:
    if not shutil.which("spark-submit") or not os.environ.get("ICEBERG_RUNTIME_JAR"):
        pytest.fail("spark-submit and ICEBERG_RUNTIME_JAR must be set up: run through `make test`")
    return AirflowRunner.create(tmp_path_factory.mktemp("airflow_home"))

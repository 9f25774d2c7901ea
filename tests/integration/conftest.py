"""Integration fixtures: a private Airflow home, and an independent reader for Iceberg tables."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.integration.airflow_runner import AirflowRunner

#: Test-only JVM flags for every Spark driver the integration tests start (spark-submit of the real
#: operators, the Spark Connect-free job runs): small jobs on a busy 2-core machine start about 40%
#: faster with the C1 JIT alone and the serial collector. They change how fast Spark starts, never
#: what it does. Users' Spark settings are theirs: the demo's spark-defaults.conf has none of this.
QUICK_START_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def pytest_configure(config):
    """Point every spark-submit the tests start at a copy of the local Spark settings plus the flags."""
    source = os.environ.get("SPARK_CONF_DIR")
    if not source or os.environ.get("AIRFLOW_ICEBERG_TEST_SPARK_CONF"):
        return
    target = Path(tempfile.mkdtemp(prefix="airflow-iceberg-test-spark-conf-"))
    defaults = Path(source, "spark-defaults.conf")
    text = defaults.read_text() if defaults.is_file() else ""
    if "spark.driver.extraJavaOptions" not in text:
        text += f"\nspark.driver.extraJavaOptions    {QUICK_START_JAVA_OPTIONS}\n"
    (target / "spark-defaults.conf").write_text(text)
    os.environ["SPARK_CONF_DIR"] = str(target)
    os.environ["AIRFLOW_ICEBERG_TEST_SPARK_CONF"] = str(target)


#: The longest test files (their DAG runs and servers), longest first, from ``make test``'s
#: ``--durations`` on 2 cores: catalog backends about 29 min, retries and kills 13, YARN 10, the
#: rest 5 to 9. Under ``pytest -n 2 --dist loadfile --no-loadscope-reorder`` a worker takes the
#: next file in collection order when its queue runs low (two tests or fewer left), so starting
#: with these keeps both workers busy to the end.
#: (pytest-xdist's default reorder, by number of tests, ran the few-test YARN and standalone
#: files last: one worker ran them alone for most of the last half hour.)
LONGEST_FIRST = (
    "test_catalog_backends.py",
    "test_retries_and_kills.py",
    "test_cluster_mode_on_yarn.py",
    "test_spark_connect.py",
    "test_standalone_cluster.py",
    "test_concurrency.py",
    "test_write_audit_publish.py",
    "test_secrets.py",
    "test_example_dag.py",
    "test_connection_ui.py",
    "test_bad_input.py",
    "test_assets_and_lineage.py",
)


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)

    def rank(item) -> int:
        path = Path(str(item.fspath))
        if path.parent.name == "integration" and path.name in LONGEST_FIRST:
            return LONGEST_FIRST.index(path.name)
        return len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: within a file, and among the other files, the order is kept


@pytest.fixture(scope="session")
def airflow_runner(tmp_path_factory) -> AirflowRunner:
    if not shutil.which("spark-submit") or not os.environ.get("ICEBERG_RUNTIME_JAR"):
        pytest.fail("spark-submit and ICEBERG_RUNTIME_JAR must be set up: run through `make test`")
    return AirflowRunner.create(tmp_path_factory.mktemp("airflow_home"))


def pytest_unconfigure(config):
    target = os.environ.pop("AIRFLOW_ICEBERG_TEST_SPARK_CONF", None)
    if target:
        shutil.rmtree(target, ignore_errors=True)

"""Fixtures for the PySpark job's tests.

One local SparkSession for the whole run (starting Spark costs seconds), with the real Iceberg
runtime jar, the Iceberg SQL extensions and a Hadoop catalog on a temporary warehouse. Each test
gets its own table names, so tests never depend on each other. Results are checked with
:class:`~tests.jobs.helpers.Lake`, which reads the warehouse with pyiceberg, not with Spark.

Run with the Spark runtime's interpreter: ``.spark-venv/bin/python -m pytest tests/jobs`` (Spark 3.5),
or ``SPARK_LINE=4.0`` in scripts/local_env.sh and ``.spark4-venv/bin/python -m pytest tests/jobs``.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # the Spark venv does not install airflow_iceberg
    sys.path.insert(0, str(REPO_ROOT))

from tests.jobs.helpers import CATALOG, NAMESPACE, SESSION_CATALOG, Lake  # noqa: E402
from tests.jobs.openlineage_spark import openlineage_listener  # noqa: E402

# Spark's Python workers must be this interpreter (the one with pyspark), whatever is on PATH.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def _runtime_jar() -> str:
    """The Iceberg runtime jar built for this interpreter's Spark line (3.5 or 4.0)."""
    import pyspark

    artifact = f"iceberg-spark-runtime-{'.'.join(pyspark.__version__.split('.')[:2])}_"
    jar = os.environ.get("ICEBERG_RUNTIME_JAR")
    if not jar:
        found = sorted((REPO_ROOT / ".cache" / "jars").glob(f"{artifact}*.jar"))
        jar = str(found[-1]) if found else ""
    if not jar or not Path(jar).is_file():
        pytest.exit("Iceberg runtime jar not found: run `make setup` and `source scripts/local_env.sh`", 2)
    if not Path(jar).name.startswith(artifact):
        pytest.exit(
            f"{Path(jar).name} is not built for pyspark {pyspark.__version__}: "
            "source scripts/local_env.sh with the SPARK_LINE of this interpreter",
            2,
        )
    return jar


def openlineage_spark_jar() -> str | None:
    """openlineage-spark's jar for this Spark line (``OPENLINEAGE_SPARK_JAR``), if setup fetched it.

    It is only on the classpath: ``tests/jobs/test_openlineage_spark.py`` registers its listener
    for its own jobs, so no other test runs with it.
    """
    jar = os.environ.get("OPENLINEAGE_SPARK_JAR", "")
    return jar if jar and Path(jar).is_file() else None


@pytest.fixture(scope="session")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("warehouse")


@pytest.fixture(scope="session")
def session_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the session catalog (``spark_catalog``, an Iceberg ``SparkSessionCatalog``) keeps tables."""
    return tmp_path_factory.mktemp("session-warehouse")


def _has_spark_runtime() -> bool:
    """Tells whether this interpreter's pyspark is the full runtime (Airflow's venv has pyspark-client)."""
    try:
        import pyspark
    except ImportError:
        return False
    return (Path(pyspark.__file__).parent / "jars").is_dir()


if not _has_spark_runtime():
    # The job modules import pyspark and py4j at module level. Under Airflow's interpreter (whose
    # pyspark is the Connect-only pyspark-client) not one job test could run: say so and stop,
    # rather than report a green run that tested nothing.
    raise pytest.UsageError(
        f"tests/jobs needs the Spark runtime's interpreter, not {sys.executable}: "
        "run `make job-test` or `.spark-venv/bin/python -m pytest tests/jobs`"
    )


@pytest.fixture(scope="session")
def spark(warehouse: Path, session_warehouse: Path) -> Iterator:
    """The one shared session: local[2], no UI, loopback only, few shuffle partitions.

    Besides the ``lake`` catalog, Spark's own session catalog is Iceberg's ``SparkSessionCatalog``
    (as on many Hive deployments), so that tests can check what lands there. Tests that do not
    name ``spark_catalog`` never touch it; non-Iceberg tables it would hold stay under
    ``session_warehouse``, never in the working directory.
    """
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("airflow-iceberg job tests")
        .config("spark.jars", ",".join(filter(None, [_runtime_jar(), openlineage_spark_jar()])))
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config(f"spark.sql.catalog.{CATALOG}", "org.apache.iceberg.spark.SparkCatalog")
        .config(f"spark.sql.catalog.{CATALOG}.type", "hadoop")
        .config(f"spark.sql.catalog.{CATALOG}.warehouse", str(warehouse))
        .config(f"spark.sql.catalog.{SESSION_CATALOG}", "org.apache.iceberg.spark.SparkSessionCatalog")
        .config(f"spark.sql.catalog.{SESSION_CATALOG}.type", "hadoop")
        .config(f"spark.sql.catalog.{SESSION_CATALOG}.warehouse", str(session_warehouse / "iceberg"))
        .config("spark.sql.warehouse.dir", str(session_warehouse / "spark"))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def lake(warehouse: Path) -> Lake:
    return Lake(warehouse)


@pytest.fixture(scope="session")
def session_lake(session_warehouse: Path) -> Lake:
    """pyiceberg's view of the Iceberg tables in the session catalog."""
    return Lake(session_warehouse / "iceberg", catalog=SESSION_CATALOG)


@pytest.fixture
def new_table() -> Callable[[str], str]:
    """Return a function that makes a fresh ``lake.db.<prefix>_<random>`` identifier."""

    def make(prefix: str = "t") -> str:
        return f"{CATALOG}.{NAMESPACE}.{prefix}_{uuid.uuid4().hex[:10]}"

    return make


@pytest.fixture
def table(new_table: Callable[[str], str]) -> str:
    """A table name no other test uses (the table itself does not exist yet)."""
    return new_table("t")


@pytest.fixture(params=["driver", "sql"])
def publish_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Move refs through the driver's Iceberg transaction, or with SQL and metadata tables only (as Connect).

    The ``sql`` way reads refs, ancestry and ``main``'s snapshot log from the metadata tables and
    moves refs with SQL statements, as the job does over Spark Connect.
    """
    if request.param == "sql":
        from airflow_iceberg.jobs import publish, snapshot_history

        monkeypatch.setattr(publish, "has_driver_jvm", lambda spark: False)
        monkeypatch.setattr(snapshot_history, "driver_table", lambda spark, table: None)
    return str(request.param)


@pytest.fixture
def openlineage_events(spark, tmp_path) -> Iterator[Callable[[], list[dict]]]:
    """openlineage-spark's listener on the shared session for one test (see :func:`openlineage_listener`)."""
    with openlineage_listener(spark, tmp_path / "openlineage-spark.jsonl") as read:
        yield read

"""Session-scoped pytest fixtures for the real catalog servers.

Register them once for the whole suite, in the root ``tests/conftest.py``::

    pytest_plugins = ["tests.servers.fixtures"]

Each server starts on first use, is shared by the whole session (they take 1-5 s to start), and
is stopped at session end, also when the run fails or is interrupted.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .connect_catalog_secrets import REST_SECRET_KEY, server_conf
from .hive_metastore import HiveMetastore
from .nessie import NessieServer
from .postgres import PostgresServer
from .seaweedfs_rest import SeaweedRestCatalog
from .spark_connect import SERVER_ICEBERG_VERSION, SparkConnectServer
from .yarn import YarnCluster

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SPARK_PYTHON = ".spark-venv/bin/python"


def spark_home() -> Path:
    """Finds the pyspark installation whose jars run the Hive metastore.

    ``$SPARK_HOME`` wins. Otherwise the pyspark package directory is asked from the Spark
    runtime's own interpreter, ``$SPARK_PYTHON`` (default ``.spark-venv/bin/python``, relative to
    the repository root), because pyspark lives in a separate venv from Airflow.

    Returns:
        A Spark home or pyspark package directory (both have ``jars/``).

    Raises:
        RuntimeError: If that interpreter is missing or cannot import pyspark.
    """
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    python = REPO_ROOT / os.environ.get("SPARK_PYTHON", DEFAULT_SPARK_PYTHON)  # absolute stays absolute
    try:
        result = subprocess.run(
            [str(python), "-c", "import pyspark,os;print(os.path.dirname(pyspark.__file__))"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except OSError as exc:
        raise RuntimeError(f"cannot run the Spark interpreter {python} (set SPARK_PYTHON): {exc}") from exc
    if result.returncode != 0 or not result.stdout.strip():
        raise RuntimeError(
            f"{python} cannot import pyspark (set SPARK_PYTHON or SPARK_HOME): {result.stderr}"
        )
    return Path(result.stdout.strip().splitlines()[-1])


def _class_cache(config: pytest.Config) -> Path | None:
    """A folder under .pytest_cache that keeps the compiled metastore launcher between runs."""
    cache = getattr(config, "cache", None)  # absent with -p no:cacheprovider
    return Path(cache.mkdir("loopback-metastore")) if cache is not None else None


@pytest.fixture(scope="session")
def hive_metastore(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HiveMetastore]:
    """A Hive metastore on 127.0.0.1 (``.uri``, ``.warehouse``) shared by the session."""
    server = HiveMetastore(
        tmp_path_factory.mktemp("hive-metastore"), spark_home(), class_cache=_class_cache(request.config)
    )
    with server:
        yield server


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """A PostgreSQL server with a password-protected database, shared by the session."""
    with PostgresServer(tmp_path_factory.mktemp("postgres")) as server:
        yield server


@pytest.fixture(scope="session")
def rest_catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedRestCatalog]:
    """An OAuth2-protected Iceberg REST catalog (SeaweedFS) shared by the session."""
    with SeaweedRestCatalog(tmp_path_factory.mktemp("seaweedfs")) as server:
        yield server


@pytest.fixture(scope="session")
def nessie_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NessieServer]:
    """A Nessie server (in-memory version store) on 127.0.0.1, shared by the session."""
    with NessieServer(tmp_path_factory.mktemp("nessie")) as server:
        yield server


@pytest.fixture(scope="session")
def yarn_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[YarnCluster]:
    """A YARN ResourceManager and NodeManager on 127.0.0.1, shared by the session.

    spark-submit reaches it with ``--master yarn``, the environment ``.spark_env()``
    (``HADOOP_CONF_DIR``) and the settings ``.spark_conf(spark_home(), <Spark python>)``; the
    provider's ``yarn_resourcemanager_webapp_address`` is ``.rm_webapp_address``.
    """
    with YarnCluster(tmp_path_factory.mktemp("yarn")) as server:
        yield server


#: hadoop-aws and the AWS SDK it was built against, for S3A (``s3a://``).
S3A_JARS = (".cache/jars/hadoop-aws-3.3.4.jar", ".cache/jars/aws-java-sdk-bundle-1.12.262.jar")
#: Spark 4.0 and 4.1 run Hadoop 3.4, whose hadoop-aws needs the 500 MB AWS SDK v2 bundle; hadoop-aws
#: 3.3.4 (which the cache has) works on it once Hadoop 3.4's defaults that 3.3.4 cannot read are
#: given as plain numbers (they carry units), and the credentials provider is one 3.3.4 has.
S3A_ON_HADOOP_34 = {
    "spark.hadoop.fs.s3a.connection.establish.timeout": "30000",
    "spark.hadoop.fs.s3a.connection.timeout": "200000",
    "spark.hadoop.fs.s3a.connection.ttl": "300000",
    "spark.hadoop.fs.s3a.threads.keepalivetime": "60",
    "spark.hadoop.fs.s3a.multipart.purge.age": "86400",
    "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
}


@pytest.fixture(scope="session")
def connect_rest_catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedRestCatalog]:
    """The REST catalog whose OAuth2 and S3 secrets, and endpoints, the Spark Connect server holds."""
    with SeaweedRestCatalog(
        tmp_path_factory.mktemp("connect-seaweedfs"), secret_key=REST_SECRET_KEY
    ) as server:
        yield server


@pytest.fixture(scope="session")
def spark_connect_server(
    tmp_path_factory: pytest.TempPathFactory, connect_rest_catalog: SeaweedRestCatalog
) -> Iterator[SparkConnectServer]:
    """A Spark Connect server (Spark 4.1, Iceberg runtime, AWS bundle, S3A) on 127.0.0.1, for the session.

    It starts with the test catalogs' secrets (:mod:`.connect_catalog_secrets`) and writes an event
    log, in which the tests look for them. S3A's keys are never set on the server: tests give them
    per session, as a task would (and the operators refuse that). Put every test that uses it in
    one file: ``pytest -n 2 --dist loadfile`` then starts it once. It holds the endpoints of the
    catalogs whose secrets it holds too: :func:`connect_rest_catalog`'s, and catalog ``demo``'s
    warehouse, ``demo_warehouse`` (an attribute of the server).
    """
    demo_warehouse = tmp_path_factory.mktemp("connect-demo-warehouse")
    bundle = REPO_ROOT / f".cache/jars/iceberg-aws-bundle-{SERVER_ICEBERG_VERSION}.jar"
    extra = (bundle,) if bundle.is_file() else ()
    s3a = tuple(REPO_ROOT / jar for jar in S3A_JARS)
    s3a = s3a if all(jar.is_file() for jar in s3a) else ()
    with SparkConnectServer(
        tmp_path_factory.mktemp("spark-connect"),
        extra_jars=extra,
        driver_class_path=s3a,
        conf={
            **server_conf(connect_rest_catalog, f"file://{demo_warehouse}"),
            **(S3A_ON_HADOOP_34 if s3a else {}),
        },
        event_log=True,
    ) as server:
        server.demo_warehouse = demo_warehouse
        yield server

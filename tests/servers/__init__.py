"""Real catalog servers for integration tests.

Each server runs on free 127.0.0.1 ports inside its own working directory and is always stopped
afterwards: a context manager or pytest fixture stops it, an ``atexit`` hook stops whatever a
crashed test left running, and the kernel kills the child if the test process itself is killed.

The servers are real (no mocks) so that the provider is tested against the same wire protocols
that production catalogs speak:

- :class:`~tests.servers.hive_metastore.HiveMetastore`: the Hive 2.3 thrift metastore from
  pyspark's jars, with Derby and the lock tables Iceberg needs.
- :class:`~tests.servers.postgres.PostgresServer`: a private PostgreSQL cluster for the JDBC /
  SQL catalog, with password authentication.
- :class:`~tests.servers.seaweedfs_rest.SeaweedRestCatalog`: SeaweedFS ``weed mini``, serving an
  Iceberg REST catalog with OAuth2 and an S3 endpoint.
- :class:`~tests.servers.spark_connect.SparkConnectServer`: a Spark Connect server from the Spark
  4.0 runtime with the Iceberg runtime on its classpath, for the operators' Connect mode.
- :class:`~tests.servers.yarn.YarnCluster`: Hadoop 3.3.4's YARN ResourceManager and one NodeManager
  on the local file system, for spark-submit's ``--master yarn`` (client and cluster deploy mode).
"""

from .hive_metastore import HiveMetastore
from .postgres import PostgresServer
from .process import ManagedProcess, ServerError
from .seaweedfs_rest import SeaweedRestCatalog
from .spark_connect import SparkConnectServer
from .yarn import YarnCluster

__all__ = [
    "HiveMetastore",
    "ManagedProcess",
    "PostgresServer",
    "SeaweedRestCatalog",
    "ServerError",
    "SparkConnectServer",
    "YarnCluster",
]

"""Whether pyiceberg commits a ref step (publish, tag, rollback) exactly as Iceberg's Java catalog would.

The steps run in the worker through pyiceberg only where its commit is the same commit, equally
atomic against every other writer of the table (Spark jobs included); everywhere else they run
as the Spark job. Per catalog type:

- ``rest``: the server applies the commit and checks its requirements; pyiceberg sends the same
  updates and requirements Iceberg's Java REST client sends.
- ``jdbc`` (SQLite, PostgreSQL): pyiceberg's SqlCatalog swaps the table's ``metadata_location``
  with the same compare-and-set as Iceberg's JdbcCatalog, in the same rows.
- ``hive``: pyiceberg's HiveCatalog commits under the metastore's exclusive table lock, which
  Iceberg's HiveCatalog takes by default. A table or catalog that turns that lock off
  (``engine.hive.lock-enabled``, ``iceberg.engine.hive.lock-enabled``) commits by the metastore's
  own check of the metadata location, which pyiceberg does not ask for: Spark.
- ``glue``: Spark. pyiceberg 0.12's Glue commit is not Iceberg's GlueCatalog's: it knows none
  of Java's client settings (``client.factory``, ``client.assume-role.*``, Lake Formation,
  ``client.credentials-provider``), so it could commit as another identity, or to another
  account's catalog; an UpdateTable that botocore retried after Glue applied it is reported as a
  conflict, where Java's ``GlueTableOperations`` checks whether its commit landed; it copies every
  table property into the Glue table's parameters and drops a description set in Glue; and it
  takes no ``lock-impl`` lock.
- ``hadoop``: pyiceberg has no Hadoop catalog (its commit is an atomic rename of the next
  version file, which only Hadoop's file systems make): Spark. So do ``nessie`` and custom
  ``catalog_impl`` catalogs, which pyiceberg has no client for.

Where the client writes the new metadata file (``jdbc``, ``hive``), pyiceberg's writer
must keep the table's metadata exactly, so the table itself is checked too
(:func:`table_refusal`): every field of its metadata file must survive pyiceberg's model of it
(a field of a newer spec would be dropped), it must not ask for gzip'd metadata files
(``write.metadata.compression-codec``: pyiceberg writes plain JSON), and its files must be on a
file system pyiceberg writes with the connection's own settings.

Every function returns why not (a sentence for the task log), or None.
"""

from __future__ import annotations

import importlib.util
import json
import time
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_iceberg.catalog.config import CatalogConfig
from airflow_iceberg.catalog.pyiceberg_tables import pyiceberg_properties, untranslated_identity_properties
from airflow_iceberg.exceptions import InvalidCatalogConfigError

if TYPE_CHECKING:
    from pyiceberg.table import Table

#: The catalog types whose commits pyiceberg makes exactly as Iceberg's Java catalogs do.
COMMIT_KINDS = ("rest", "jdbc", "hive")
#: File systems pyiceberg's FileIO writes (PyArrowFileIO, FsspecFileIO) with the catalog's ``s3.*``,
#: ``gcs.*`` and ``adls.*`` properties, as Iceberg's own FileIOs do.
WRITABLE_SCHEMES = ("file", "s3", "s3a", "s3n", "gs", "abfs", "abfss")
#: Catalog properties Iceberg's Java clients and FileIOs read and pyiceberg 0.12 has no equivalent for:
#: who the client is (an assumed role, a credentials provider, a client factory, Lake Formation) and
#: how files are written (SSE-KMS, a canned ACL, an access point, ADLS shared keys, write tags).
JAVA_ONLY_PREFIXES = (
    "client.factory",
    "client.assume-role.",
    "client.credentials-provider",
    "glue.lakeformation-enabled",
    "s3.sse.",
    "s3.acl",
    "s3.access-points.",
    "s3.write.tags.",
    "s3.write.storage-class",
    "adls.auth.shared-key.",
)
#: ``spark.hadoop.*`` settings Iceberg's catalog clients or HadoopFileIO read (file systems, the
#: metastore, Iceberg's own, Hadoop security and RPC): the worker's client would not. YARN's or
#: MapReduce's (EMR's spark-defaults.conf sets some) change nothing the step does.
CLIENT_HADOOP_PREFIXES = tuple(
    f"spark.hadoop.{prefix}"
    for prefix in ("fs.", "hive.", "iceberg.", "hadoop.security.", "hadoop.rpc.", "dfs.", "metastore.")
)
#: How far a log may run backwards before Iceberg's Java ``TableMetadata`` refuses it (ONE_MINUTE).
CLOCK_TOLERANCE_MS = 60_000
_WHY_KIND = {
    "hadoop": "pyiceberg has no Hadoop catalog: a Hadoop table's commit is an atomic rename of its next "
    "version file, which only Hadoop's file systems make",
    "nessie": "pyiceberg has no Nessie catalog",
    "custom": "pyiceberg has no client for a custom catalog_impl",
    "glue": "pyiceberg's Glue commit is not Iceberg's GlueCatalog's (it ignores Java's client and "
    "credential settings, takes an UpdateTable the AWS SDK retried for a conflict, and rewrites the Glue "
    "table's parameters)",
}


def catalog_refusal(config: CatalogConfig, conf: Mapping[str, Any] | None, over_connect: bool) -> str | None:
    """Why a step on this connection's catalog keeps the Spark path, or None (pyiceberg commits it exactly).

    :param conf: The Spark properties the job would start with (the deployment's properties file and
        the operator's ``conf``), which can set catalog and Hadoop properties only Spark reads.
    :param over_connect: The task's Spark connection is a Spark Connect server.
    """
    kind = config.kind
    if kind not in COMMIT_KINDS:
        return _WHY_KIND.get(kind, f"pyiceberg does not commit to a {kind} catalog")
    if over_connect and config.connect_server_credentials:
        return (
            "the catalog's credentials are the Spark Connect server's (connect_server_credentials): the "
            "worker has none to reach the catalog with"
        )
    prefix = f"spark.sql.catalog.{config.catalog_name}"
    own = sorted(key for key in conf or {} if key == prefix or key.startswith(f"{prefix}."))
    if own:
        return f"the task's conf sets catalog properties only Spark reads ({', '.join(own)})"
    try:
        properties = pyiceberg_properties(config)
    except InvalidCatalogConfigError as error:
        return str(error)
    if refused := client_refusal(config, properties):
        return refused
    if kind == "rest":
        return None  # the server writes the metadata: the client's file systems play no part
    hadoop = sorted(config.hadoop_properties) + sorted(
        key for key in conf or {} if key.startswith(CLIENT_HADOOP_PREFIXES)
    )
    if hadoop:
        named = ", ".join(hadoop)
        return f"its Hadoop settings ({named}) configure Hadoop's clients, which pyiceberg does not use"
    return None


def client_refusal(config: CatalogConfig, properties: Mapping[str, str]) -> str | None:
    """Why the worker's client would not reach the catalog as the Spark job's does, or None."""
    kind = config.kind
    if java_only := sorted(key for key in properties if key.startswith(JAVA_ONLY_PREFIXES)):
        return (
            f"the catalog sets client or FileIO settings pyiceberg does not have ({', '.join(java_only)}): "
            "it would reach the catalog or write files as another identity, or without them"
        )
    if kind == "jdbc" and (untranslated := untranslated_identity_properties(config)):
        return (
            f"the JDBC driver gets identity or TLS settings libpq has no equivalent for "
            f"({', '.join(untranslated)})"
        )
    if kind == "hive" and str(properties.get("hive.kerberos-authentication", "false")).lower() == "true":
        return (
            "the metastore is kerberized: the worker's Kerberos ticket is not necessarily the identity "
            "the Spark job commits as"
        )
    if missing := missing_client(kind, properties):
        return f"this worker lacks {missing}, which pyiceberg's {kind} catalog needs"
    return None


def missing_client(kind: str, properties: Mapping[str, str]) -> str | None:
    """The module pyiceberg's client for this catalog imports that this worker does not have, or None.

    The ``catalog-check`` extra installs pyiceberg's Hive, SQL and PyArrow extras; boto3 (SigV4
    signing of REST requests) and a PostgreSQL driver may be missing.
    """
    needed = []
    if kind == "hive":
        needed.append(("hive_metastore", "pyiceberg's Hive client (pip install 'pyiceberg[hive]')"))
        needed.append(("thrift", "Thrift (pip install 'pyiceberg[hive]')"))
    if kind == "jdbc":
        needed.append(("sqlalchemy", "SQLAlchemy (pip install 'pyiceberg[sql-sqlite]')"))
        if str(properties.get("uri", "")).startswith("postgresql"):
            needed.append(("psycopg2", "psycopg2 (pip install 'pyiceberg[sql-postgres]')"))
    if kind == "rest" and str(properties.get("rest.sigv4-enabled", "false")).lower() == "true":
        needed.append(("boto3", "boto3, which signs REST requests with SigV4 (pip install boto3)"))
    for module, what in needed:
        if importlib.util.find_spec(module) is None:
            return what
    return None


def table_refusal(config: CatalogConfig, loaded: Table) -> str | None:
    """Why this table keeps the Spark path although its catalog does not, or None."""
    metadata = loaded.metadata
    properties = metadata.properties
    if metadata.format_version >= 3:  # on every catalog: the step's own reads serialise the metadata
        return (
            f"it is a format-version {metadata.format_version} table, whose metadata pyiceberg "
            "does not write yet"
        )
    if config.kind == "rest":
        return None
    if config.kind == "hive" and str(properties.get("engine.hive.enabled", "false")).lower() == "true":
        return (
            "Hive reads it (engine.hive.enabled=true) through the storage descriptor Iceberg's Java "
            "client keeps, which pyiceberg's Hive catalog rewrites on every commit"
        )
    if config.kind == "hive" and str(properties.get("engine.hive.lock-enabled", "true")).lower() == "false":
        return (
            "the table commits without the metastore's lock (engine.hive.lock-enabled=false), which "
            "pyiceberg's Hive catalog takes instead of the metastore's check Iceberg then relies on"
        )
    for where in (metadata.location, properties.get("write.metadata.path")):
        scheme = urllib.parse.urlsplit(where).scheme or "file" if where else "file"
        if scheme not in WRITABLE_SCHEMES:
            return f"its files are on {scheme}://, which pyiceberg does not write"
    if behind := clock_refusal(metadata):
        return behind
    codec = str(properties.get("write.metadata.compression-codec", "none")).lower()
    if codec not in ("none", ""):
        return (
            f"its metadata files are written with {codec} (write.metadata.compression-codec), pyiceberg's "
            "as plain JSON"
        )
    dropped = dropped_fields(_metadata_json(loaded), json.loads(metadata.model_dump_json()))
    if dropped:
        return (
            "its metadata holds fields pyiceberg would drop when it writes the next metadata file "
            f"({', '.join(dropped[:5])})"
        )
    return None


def clock_refusal(metadata: Any, now_ms: int | None = None) -> str | None:
    """Why this worker's clock must not stamp the table's next metadata file, or None.

    The client stamps ``last-updated-ms`` and the new snapshot-log entry (SQL and Hive
    catalogs; a REST server stamps its own). Iceberg's Java ``TableMetadata`` refuses to load
    metadata whose log runs backwards by more than a minute, so a worker clock that far behind the
    table's last update would leave a table no Spark job can read.
    """
    latest = max(
        [metadata.last_updated_ms]
        + [entry.timestamp_ms for entry in metadata.snapshot_log[-1:]]
        + [entry.timestamp_ms for entry in metadata.metadata_log[-1:]]
    )
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if now_ms >= latest - CLOCK_TOLERANCE_MS:
        return None
    return (
        f"this worker's clock is {(latest - now_ms) / 1000:.0f} s behind the table's last update, and "
        "Iceberg's Java client cannot load metadata whose log runs backwards by more than a minute"
    )


def dropped_fields(written: Any, kept: Any, path: str = "") -> list[str]:
    """The fields of ``written`` (a metadata file's JSON) that ``kept`` (pyiceberg's model of it) lacks.

    A field whose value is null counts as absent. Lists are compared item by item, in order.
    """
    if isinstance(written, dict):
        if not isinstance(kept, dict):
            return [path or "/"]
        lost = []
        for key, value in written.items():
            if value is None:
                continue
            if key not in kept:
                lost.append(f"{path}/{key}")
            else:
                lost += dropped_fields(value, kept[key], f"{path}/{key}")
        return lost
    if isinstance(written, list):
        if not isinstance(kept, list) or len(kept) != len(written):
            return [path or "/"]
        pairs = enumerate(zip(written, kept, strict=True))
        return [lost for i, (item, model) in pairs for lost in dropped_fields(item, model, f"{path}[{i}]")]
    return []


def _metadata_json(loaded: Table) -> dict[str, Any]:
    """The table's current metadata file as written (gzip'd or not), parsed."""
    from pyiceberg.serializers import Compressor

    location = loaded.metadata_location
    with (
        loaded.io.new_input(location).open() as stream,
        Compressor.get_compressor(location).stream_decompressor(stream) as plain,
    ):
        return json.loads(plain.read())

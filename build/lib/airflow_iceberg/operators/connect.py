"""Spark Connect mode: the same job spec, run from the Airflow worker in a remote Spark Connect session.

When an operator's ``conn_id`` is a ``spark_connect`` connection (the apache-spark provider's
type), :class:`ConnectJob` replaces spark-submit: it opens a new session on the server (the
provider's :class:`SparkConnectHook` builds the ``sc://host:port/;token=...`` URL), tags it, sets
the catalog settings on it, and calls the job package's own ``run_job`` with that session, in
this process. Validation, the result (and so the XCom), commit ids and error messages are the
job's, exactly as on the driver.

What a running server cannot take per session is the server's business: the Iceberg runtime
jar on its classpath and ``spark.sql.extensions`` (static settings, fixed when its JVM started).
Catalogs are set per session (``spark.sql.catalog.<name>.*``, ``spark.sql.defaultCatalog``), so
each task gets its connection's catalogs, and its secrets never leave this process except in
the gRPC config request to the server.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_iceberg.catalog.spark_settings import EXTENSIONS_KEY, ICEBERG_EXTENSIONS, SparkSettings

if TYPE_CHECKING:
    import logging

    from airflow_iceberg.jobs.job_spec import JobRequest

#: The apache-spark provider's connection type for a Spark Connect server.
SPARK_CONNECT_CONN_TYPE = "spark_connect"


#: Settings of the catalogs' that only the server sets, when it starts (see docs/spark-connect.md).
SERVER_SETTINGS = (EXTENSIONS_KEY, "spark.redaction.regex")


def is_spark_connect(conn_id: str) -> bool:
    """Whether ``conn_id`` is a ``spark_connect`` connection (else the task runs spark-submit)."""
    from airflow.providers.common.compat.sdk import BaseHook

    return BaseHook.get_connection(conn_id).conn_type == SPARK_CONNECT_CONN_TYPE


def session_settings(settings: SparkSettings, user_conf: Mapping[str, Any] | None) -> dict[str, str]:
    """The non-secret settings a task sets on its session: the catalogs', then the user's ``conf``.

    ``spark.sql.extensions`` and ``spark.redaction.regex`` are left out (static: the server
    starts with them); the user's ``conf`` wins as in spark-submit mode. Settings the server
    refuses to change per session (``spark.executor.memory`` ...) are skipped with a warning.
    """
    conf = {**settings.conf, "spark.sql.defaultCatalog": settings.catalog_names[0]}
    conf.update({str(key): str(value) for key, value in (user_conf or {}).items()})
    for key in SERVER_SETTINGS:
        conf.pop(key, None)
    return conf


class ConnectJob:
    """One task's run in a Spark Connect session, and the means to interrupt it from another thread.

    :param conn_id: The ``spark_connect`` connection of the server.
    :param log: The operator's logger (never given a secret or the connection URL, which holds the token).
    """

    def __init__(self, conn_id: str, log: logging.Logger) -> None:
        self.conn_id = conn_id
        self.log = log
        #: Every operation of the task carries this tag; ``interrupt`` cancels them by it.
        self.tag = f"airflow-iceberg-{uuid.uuid4().hex}"
        self._session: Any = None
        #: Set by :meth:`interrupt`: the job's failure is then the kill's doing.
        self.killed = False

    def run(self, settings: SparkSettings, request: JobRequest, user_conf: Mapping[str, Any] | None) -> int:
        """Open a session, configure it, run the job in it, release it; return the job's exit code.

        :param user_conf: The operator's own ``conf``, set on the session after the catalogs'.
        """
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
        from pyspark.sql.connect.session import SparkSession

        from airflow_iceberg.jobs.iceberg_job import run_job

        url = SparkConnectHook(conn_id=self.conn_id).get_connection_url()
        # A builder of its own: the shared ``SparkSession.builder`` would keep the URL (and its token).
        spark = SparkSession.Builder().remote(url).create()
        self._session = spark
        try:
            spark.addTag(self.tag)
            if self.killed:  # killed while the session was being opened
                raise RuntimeError("the task was killed before its Spark Connect job started")
            self.log.info("Spark Connect session %s, operation tag %s", spark.session_id, self.tag)
            self._configure(spark, session_settings(settings, user_conf), secret=False)
            self._configure(spark, settings.secret_conf, secret=True)
            self._check_extensions(spark)
            return run_job(spark, request)
        finally:
            self._session = None
            if not spark.is_stopped:  # ``interrupt`` may have released it already
                spark.stop()  # releases the session on the server, with its settings and secrets

    def interrupt(self) -> None:
        """Cancel every running operation of the task (``interruptTag``), then release its session.

        Called from ``on_kill``, while ``run`` may be blocked in the same or another thread.
        Releasing the session makes any operation the job starts afterwards fail at once, and the
        server stops the session's streaming queries with it.
        """
        self.killed = True
        spark = self._session
        if spark is None:
            return
        try:
            interrupted = spark.interruptTag(self.tag)
            self.log.info("Interrupted %d Spark Connect operation(s) tagged %s", len(interrupted), self.tag)
        finally:
            spark.stop()

    def _configure(self, spark: Any, conf: Mapping[str, str], *, secret: bool) -> None:
        from pyspark.errors import AnalysisException

        for key, value in conf.items():
            try:
                spark.conf.set(key, value)
            except AnalysisException as error:
                if secret or "CANNOT_MODIFY_CONFIG" not in str(error):
                    raise
                self.log.warning(
                    "Spark Connect: %s cannot be set per session; it is the server's to set", key
                )

    def _check_extensions(self, spark: Any) -> None:
        """Warn when the server runs without Iceberg's SQL extensions (branches and CALL need them)."""
        extensions = spark.conf.get(EXTENSIONS_KEY, "") or ""
        if ICEBERG_EXTENSIONS not in extensions:
            self.log.warning(
                "The Spark Connect server was started without %s in %s: branches, tags and table "
                "upkeep (CALL) will fail; start it with --conf %s=%s",
                ICEBERG_EXTENSIONS,
                EXTENSIONS_KEY,
                EXTENSIONS_KEY,
                ICEBERG_EXTENSIONS,
            )


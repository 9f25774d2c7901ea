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
each task gets its connection's catalogs. Their secrets are the server's, never sent
(:mod:`airflow_iceberg.operators.connect_secrets`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_iceberg.catalog.spark_settings import EXTENSIONS_KEY, ICEBERG_EXTENSIONS, SparkSettings
from airflow_iceberg.jobs.connect import is_committing
from airflow_iceberg.operators.connect_secrets import (
    check_server_secrets,
    refuse_redirected_endpoints,
    server_held_endpoints,
    user_secret_keys,
)
from airflow_iceberg.operators.connect_tries import (
    DEFAULT_USER_ID,
    CommitKeys,
    EarlierRuns,
    RemoteOperations,
    RunIds,
    TryNumbers,
)

if TYPE_CHECKING:
    import logging

    from airflow_iceberg.jobs.spec.request import JobRequest

#: The apache-spark provider's connection type for a Spark Connect server.
SPARK_CONNECT_CONN_TYPE = "spark_connect"


#: The session setting of Spark Connect's progress reports (a negative interval turns them off).
PROGRESS_INTERVAL_KEY = "spark.connect.progress.reportInterval"
#: How long a failed or killed task waits for its interrupted write to end before it gives up.
KILL_WAIT_SECONDS = 30


#: Settings of the catalogs' that only the server sets, when it starts (see docs/spark-connect.md).
SERVER_SETTINGS = (EXTENSIONS_KEY, "spark.redaction.regex")


def is_spark_connect(conn_id: str) -> bool:
    """Whether ``conn_id`` is a ``spark_connect`` connection (else the task runs spark-submit)."""
    from airflow.providers.common.compat.sdk import BaseHook

    return BaseHook.get_connection(conn_id).conn_type == SPARK_CONNECT_CONN_TYPE


def connection_url(conn_id: str) -> str:
    """The server's ``sc://`` URL, built only from a connection with a Host; its token is masked.

    pyspark refuses a URL without a host by quoting the whole URL, token included, and the
    provider percent-encodes the token into it (``==`` becomes ``%3D%3D``), a form Airflow's
    masker, which knows the Password as typed, would not hide. So an empty Host is refused here,
    quoting nothing, and the encoded token is registered with the masker too.
    """
    from urllib.parse import quote

    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
    from airflow.providers.common.compat.sdk import BaseHook, mask_secret

    from airflow_iceberg.exceptions import IcebergJobError

    connection = BaseHook.get_connection(conn_id)
    if connection.password:
        mask_secret(quote(connection.password))
    host = (connection.host or "").strip().removeprefix("sc://")
    if not host.split("/")[0].split(":")[0]:
        raise IcebergJobError(
            f"Spark Connect connection {conn_id!r}: Host is empty; set it to the Spark Connect "
            "server's host name (server or sc://server), and Port to its port (15002 by default)"
        )
    return with_user_id(SparkConnectHook(conn_id=conn_id).get_connection_url(), connection.login)


def with_user_id(url: str, login: str | None) -> str:
    """The provider's ``sc://`` URL with a fixed ``user_id`` when the connection has no Login.

    The server keys sessions by (user id, session id); pyspark's default user id is the
    worker's ``$USER``, which a retry on another worker may not share.
    """
    return url if login else f"{url};user_id={DEFAULT_USER_ID}"  # with a Login, the provider set it


def commit_operation_hook(job: ConnectJob) -> Callable[[Any], Any]:
    """A pyspark ``SparkSession.Hook`` factory: names the committing request, refuses any after a kill.

    The job marks the call that commits (:func:`airflow_iceberg.jobs.connect.committing`); the
    first ExecutePlan request sent inside it gets ``job.ids.operation_id``, the id the next try
    settles. Built on first use: this module must not import pyspark when DAGs are parsed.
    """
    from pyspark.sql.connect.session import SparkSession

    class CommitOperationHook(SparkSession.Hook):
        def __init__(self, session: Any) -> None:
            self.session = session

        def on_execute_plan(self, request: Any) -> Any:
            if job.killed:
                raise RuntimeError("the task was killed; no new Spark Connect operation is started")
            if is_committing() and not job.commit_started and job.ids is not None:
                request.operation_id = job.ids.operation_id
                job.commit_started = True
            return request

    return CommitOperationHook


def session_settings(settings: SparkSettings, user_conf: Mapping[str, Any] | None) -> dict[str, str]:
    """The non-secret settings a task sets on its session: the catalogs', then the user's ``conf``.

    ``spark.sql.extensions`` and ``spark.redaction.regex`` are left out (static: the server
    starts with them), and so are the user's secret-looking keys (the server's to set, like the
    catalogs' secrets); the user's ``conf`` wins as in spark-submit mode. Settings the server
    refuses to change per session (``spark.executor.memory`` ...) are skipped with a warning.
    """
    conf = {**settings.conf, "spark.sql.defaultCatalog": settings.catalog_names[0]}
    conf.update({str(key): str(value) for key, value in (user_conf or {}).items()})
    for key in (*SERVER_SETTINGS, *user_secret_keys(user_conf)):
        conf.pop(key, None)
    return conf


class ConnectJob:
    """One task's run in a Spark Connect session, and the means to interrupt it from another thread.

    A write's Spark Connect operation outlives a worker that dies under it, so a try with a
    commit id first settles the earlier runs of its commit (:mod:`.connect_tries`): it waits until
    none of them can still commit, and only then runs the job, in a session whose id, and the id
    of whose committing operation, its own retry can find again. Neither id is logged: a session
    id lets anyone who can reach the server into the session; logs carry a fingerprint.

    :param conn_id: The ``spark_connect`` connection of the server.
    :param log: The operator's logger (never given a secret or the connection URL, which holds the token).
    :param server_credential_catalogs: The catalogs whose secrets the server holds
        (``connect_server_credentials``): their endpoints must be the server's own.
    """

    def __init__(
        self, conn_id: str, log: logging.Logger, server_credential_catalogs: Iterable[str] = ()
    ) -> None:
        self.conn_id = conn_id
        self.log = log
        self.server_credential_catalogs = tuple(server_credential_catalogs)
        #: Every operation of the task carries this tag; ``interrupt`` cancels them by it.
        self.tag = f"airflow-iceberg-{uuid.uuid4().hex}"
        self._session: Any = None
        self._remote: Any = None
        #: This run's session and committing operation (set by :meth:`run`).
        self.ids: RunIds | None = None
        #: Whether the committing operation has been sent (see :meth:`run`'s hook).
        self.commit_started = False
        #: Set by :meth:`interrupt`: the job's failure is then the kill's doing.
        self.killed = False

    def run(
        self,
        settings: SparkSettings,
        request: JobRequest,
        user_conf: Mapping[str, Any] | None,
        tries: TryNumbers | None = None,
    ) -> int:
        """Settle earlier runs, open a session, configure it, run the job, release it; return the exit code.

        :param user_conf: The operator's own ``conf``, set on the session after the catalogs'.
        :param tries: This try and the first try of its commit id; None (or a request that does not
            reuse commits) skips the settling, and the ids are random.
        """
        from airflow.providers.common.compat.sdk import BaseHook

        connection = BaseHook.get_connection(self.conn_id)
        url = connection_url(self.conn_id)
        self._remote = RemoteOperations(url)
        try:
            if self.killed:  # killed before ``interrupt`` could stop the settling
                raise RuntimeError("the task was killed before its Spark Connect job started")
            self.ids = self._settle(request, settings, connection.password, tries)
            session_url = f"{url};session_id={self.ids.session_id}"
            return self._run_in_session(session_url, settings, request, user_conf)
        finally:
            self._remote.close()

    def _settle(
        self, request: JobRequest, settings: SparkSettings, token: str | None, tries: TryNumbers | None
    ) -> RunIds:
        """This run's ids, after every earlier run of its commit is proven unable to commit."""
        from airflow.providers.common.compat.sdk import mask_secret

        if tries is None or not (request.reuse_commit and request.commit_id):
            ids = RunIds(session_id=str(uuid.uuid4()), operation_id=str(uuid.uuid4()))
        else:
            secrets = [token or "", *(settings.secret_conf[key] for key in sorted(settings.secret_conf))]
            keys = CommitKeys(request.commit_id, secrets)
            ids = EarlierRuns(self._remote, keys, self.log).settle(tries.first, tries.current)
        for value in (ids.session_id, ids.operation_id):
            mask_secret(value)  # never logged by us; masked should a server message quote one
        return ids

    def _run_in_session(
        self, url: str, settings: SparkSettings, request: JobRequest, user_conf: Mapping[str, Any] | None
    ) -> int:
        from pyspark.sql.connect.session import SparkSession

        from airflow_iceberg.jobs.iceberg_job import run_job

        if self.killed:
            raise RuntimeError("the task was killed before its Spark Connect job started")
        # A builder of its own: the shared ``SparkSession.builder`` would keep the URL (and its token).
        spark = SparkSession.Builder().remote(url)._registerHook(commit_operation_hook(self)).create()
        self._session = spark
        finished = False
        try:
            spark.addTag(self.tag)
            self.log.info(
                "Spark Connect session %s (a fingerprint: the id is never logged), operation tag %s",
                self.ids.fingerprint,
                self.tag,
            )
            # Progress reports are responses a reattaching retry would have to skip one by one.
            spark.conf.set(PROGRESS_INTERVAL_KEY, "-1")
            check_server_secrets(spark, settings.secret_conf, self.log)
            conf = session_settings(settings, user_conf)
            endpoints = server_held_endpoints(self.server_credential_catalogs, conf)
            refuse_redirected_endpoints(spark, conf, endpoints, self.log)  # the server's own: not sent
            self._configure(spark, {key: value for key, value in conf.items() if key not in endpoints})
            self._check_extensions(spark)
            code = run_job(spark, request)
            finished = code == 0
            return code
        finally:
            self._session = None
            self._close(spark, finished)

    def _close(self, spark: Any, finished: bool) -> None:
        """Release the session, unless its committing operation may still be running.

        After a failure (the job's own, a kill, an ``execution_timeout``), the write the job sent
        may still run on the server: it is interrupted, and the session is released only once the
        server says the operation has ended. Releasing earlier would drop the operation without
        waiting for its thread, which might still commit; left open, the session is settled by
        the task's next try instead.
        """
        ended = True
        if not finished and self.commit_started and self.ids is not None:
            try:
                spark.interruptTag(self.tag)
            except Exception as error:  # the session may be gone already
                self.log.info("Spark Connect: could not interrupt after a failure: %s", type(error).__name__)
            try:
                ended = self._remote.wait_until_ended(self.ids, timeout=KILL_WAIT_SECONDS, stoppable=False)
            except Exception as error:
                self.log.warning("Spark Connect: could not follow the interrupted write: %s", error)
                ended = False
        if ended:
            spark.stop()  # releases the session on the server, with its settings and secrets
            return
        self.log.warning(
            "Spark Connect: the interrupted write of session %s had not ended after %d s; the session "
            "is left for the task's next try, which waits for it before it writes",
            self.ids.fingerprint if self.ids else "?",
            KILL_WAIT_SECONDS,
        )
        spark.release_session_on_close = False
        spark.stop()

    def interrupt(self) -> None:
        """Cancel every running operation of the task (``interruptTag``), and any wait for an earlier try.

        Called from ``on_kill``, while ``run`` may be blocked in the same thread (under Airflow's
        SIGTERM handler) or another one. It does not release the session: ``run`` does, once the
        interrupted write has ended. New operations are refused from now on (the hook).
        """
        self.killed = True
        if self._remote is not None:
            self._remote.stop()
        spark = self._session
        if spark is None:
            return
        try:
            interrupted = spark.interruptTag(self.tag)
        except Exception as error:  # the session or the server is gone: nothing left to interrupt
            self.log.warning("Spark Connect: could not interrupt tag %s: %s", self.tag, type(error).__name__)
            return
        self.log.info("Interrupted %d Spark Connect operation(s) tagged %s", len(interrupted), self.tag)

    def _configure(self, spark: Any, conf: Mapping[str, str]) -> None:
        from pyspark.errors import AnalysisException

        for key, value in conf.items():
            try:
                spark.conf.set(key, value)
            except AnalysisException as error:
                if "CANNOT_MODIFY_CONFIG" not in str(error):
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

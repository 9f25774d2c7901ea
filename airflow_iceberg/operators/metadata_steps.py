"""Publish, tag and rollback in the Airflow worker through pyiceberg, where that is exactly as safe as Spark.

These steps move refs and make no snapshot, so they need no Spark application: a spark-submit
JVM (or a Spark Connect session) costs seconds for a commit that takes milliseconds. Where the
catalog allows it, the worker reads the table's metadata with pyiceberg, runs the job's own
decisions on it (the same refusals and messages, the same markers for retries), and commits the
ref change with requirements the catalog checks atomically (:mod:`airflow_iceberg.catalog.pyiceberg_refs`).
The result, its XCom keys and values, the asset events and the OpenLineage datasets are those of
the Spark job. Where pyiceberg cannot do it exactly (a Hadoop, Nessie or custom catalog, a
Hive table without the metastore's lock, a metadata field pyiceberg would drop:
:mod:`airflow_iceberg.catalog.pyiceberg_path`), the step runs as the Spark job, and the task log
says why.

``engine`` picks the path: ``"auto"`` (the default) as above; ``"spark"`` always the Spark job
(spark-submit or Spark Connect, as ``conn_id`` says); ``"pyiceberg"`` the worker or, when that
cannot be exact, a refusal before anything changes.

Over Spark Connect the worker commits itself too (it holds the catalog's connection, as the
session would get it), unless the catalog's credentials are the server's
(``connect_server_credentials``): then only the server can reach the catalog, and the step runs
in a session.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_iceberg.catalog.pyiceberg_path import catalog_refusal, table_refusal
from airflow_iceberg.exceptions import IcebergJobError, InvalidSpecError
from airflow_iceberg.jobs.error_text import describe_error
from airflow_iceberg.jobs.spec.action import ActionSpec
from airflow_iceberg.jobs.spec.branches import PublishSpec, RollbackSpec, TagSpec
from airflow_iceberg.jobs.spec.identifiers import split_identifier
from airflow_iceberg.operators.base import IcebergSparkSubmitOperator
from airflow_iceberg.operators.cluster_mode import SUBMITTED_FOR_KEY
from airflow_iceberg.operators.lineage import catalog_of

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

    from airflow_iceberg.catalog.config import CatalogConfig
    from airflow_iceberg.catalog.pyiceberg_refs import PyicebergTableRefs

#: The values of ``engine``.
ENGINES = ("auto", "pyiceberg", "spark")
#: The task state store's key for the commit id whose step last took the Spark path.
SPARK_STARTED_KEY = "airflow_iceberg_spark_path_for"


class IcebergRefStepOperator(IcebergSparkSubmitOperator):
    """Base class of the operators that only move refs: they may run in the worker through pyiceberg.

    :param engine: ``"auto"`` (default): through pyiceberg in the worker where that is exactly as
        safe as the Spark job, else the Spark job; ``"spark"``: always the Spark job;
        ``"pyiceberg"``: in the worker, or refused before anything changes where it cannot be exact.
        See docs/operators.md, "Publish, tag and rollback without Spark".
    """

    def __init__(self, *, engine: str = "auto", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.engine = engine

    def run_in_worker(
        self, context: Context, spec: ActionSpec, configs: Mapping[str, CatalogConfig], over_connect: bool
    ) -> dict[str, Any] | None:
        if self.engine not in ENGINES:
            raise InvalidSpecError(
                f"{spec.table}: engine must be one of {', '.join(map(repr, ENGINES))}, got {self.engine!r}"
            )
        if self.engine == "spark":
            return None
        config = catalog_of(spec.table, configs)
        refused = self._earlier_tries_spark_work(context, over_connect)
        refs, refused = (None, refused) if refused else self._pyiceberg_refs(spec, config, over_connect)
        if refs is None:
            if self.engine == "pyiceberg":
                raise InvalidSpecError(
                    f"{spec.table}: engine='pyiceberg' cannot run this {spec.action} exactly as the Spark "
                    f"job would: {refused}. Nothing changed; with engine='auto' it runs as the Spark job"
                )
            self.log.info("Running %s of %s as a Spark job: %s", spec.action, spec.table, refused)
            return None
        self.log.info(
            "Running %s of %s in this worker through pyiceberg (no Spark application: it only moves refs)",
            spec.action,
            spec.table,
        )
        commit_id = self._commit_id(context)
        marker_id = commit_id if self.idempotent and context.get("ti") is not None else None
        try:
            result = run_ref_step(refs, spec, marker_id)
        except Exception as error:  # the Spark job's words for the same failure (its result file's error)
            raise IcebergJobError(f"{spec.table}: {describe_error(error)}") from error
        from airflow_iceberg.catalog.pyiceberg_lineage import describe_lineage

        return {"status": "success", **result, "lineage": describe_lineage(spec.table, refs.metadata)}

    def _earlier_tries_spark_work(self, context: Context, over_connect: bool) -> str | None:
        """Why this retry keeps the Spark path: an earlier try of its commit id may still run Spark work.

        That try may have taken the Spark path (a worker without pyiceberg, ``engine="spark"``, a
        table that then needed it) and still be committing: a cluster-mode driver outlives its
        worker, and Spark Connect operations outlive their client. Only the Spark path settles
        them first (``durable`` reconnects to the stored application; the Connect run waits for,
        or interrupts, the earlier try's operations); a commit from the worker beside them could be
        undone or repeated by theirs (a rollback rolled back twice).
        """
        if context.get("ti") is None or self.engine == "pyiceberg":  # no try of it ran Spark
            return None
        store = context.get("task_state_store")
        # durable keeps the job across clears: only one stored for this commit id is still this step's
        stored = store is not None and store.get(self.external_id_key)
        if stored and store.get(SUBMITTED_FOR_KEY) == self._cluster_commit_id(context):
            return (
                "an earlier try's Spark application (stored by durable execution) may still be "
                "running, and only the Spark path reconnects to it instead of committing beside it"
            )
        tries = self._try_numbers(context)
        if not over_connect or tries is None or tries.current == tries.first:
            return None
        if store is not None and store.get(SPARK_STARTED_KEY) != self._commit_id(context):
            return None  # the earlier tries of this commit id all ran in the worker
        return (
            "an earlier try's Spark Connect operations may still be running, and only the Spark "
            "path settles them before it commits"
        )

    def _run_spark_job(self, context: Context, spec: ActionSpec, *args: Any, **kwargs: Any) -> Any:
        """The Spark job, after noting in the task state store that this commit id took the Spark path."""
        store = context.get("task_state_store")
        if store is not None and context.get("ti") is not None:
            store.set(SPARK_STARTED_KEY, self._commit_id(context))
        return super()._run_spark_job(context, spec, *args, **kwargs)

    def _pyiceberg_refs(
        self, spec: ActionSpec, config: CatalogConfig, over_connect: bool
    ) -> tuple[PyicebergTableRefs | None, str | None]:
        """The table's refs through pyiceberg, or None and why the step cannot run there exactly."""
        if not pyiceberg_installed():
            return None, (
                "pyiceberg is not installed in this worker (it comes with airflow-iceberg's extras "
                "'sensors' and 'cluster')"
            )
        # Over Spark Connect the session's settings are the server's and the task's conf; spark-submit
        # also reads the deployment's properties file.
        spark_properties = self.conf if over_connect else self._submit_properties()
        refused = catalog_refusal(config, spark_properties, over_connect) or root_namespace_refusal(
            spec.table, config
        )
        if refused is not None:
            return None, refused
        from pyiceberg.exceptions import NoSuchTableError

        from airflow_iceberg.catalog.metadata_file_io import METADATA_FILE_IO
        from airflow_iceberg.catalog.pyiceberg_refs import PyicebergTableRefs
        from airflow_iceberg.catalog.pyiceberg_tables import table_loader

        load = table_loader(config, spec.table, file_io=METADATA_FILE_IO)
        try:
            loaded = load()
        except NoSuchTableError:  # the step says so, in the job's words
            loaded = None
        except Exception as error:  # the catalog cannot be reached or refused: as the Spark job would fail
            raise IcebergJobError(f"{spec.table}: {describe_error(error)}") from error
        if loaded is not None and (refused := table_refusal(config, loaded)) is not None:
            return None, refused
        return PyicebergTableRefs(spec.table, load, loaded, writes_metadata_files=config.kind != "rest"), None


def root_namespace_refusal(table: str, config: CatalogConfig) -> str | None:
    """Why a two-part name headed by the catalog's name keeps the Spark path, or None.

    Spark reads ``lite.orders`` as table ``orders`` in catalog ``lite``'s root namespace when
    ``lite`` is a catalog; the worker's client would take ``lite`` for a namespace, another table.
    """
    parts = split_identifier(table)
    if len(parts) == 2 and parts[0] == config.catalog_name:
        return (
            f"{table} names table {parts[1]!r} in the root namespace of catalog {parts[0]!r} (as Spark "
            "reads a name headed by a catalog), which the worker's client would read as namespace "
            f"{parts[0]!r}"
        )
    return None


def pyiceberg_installed() -> bool:
    """Whether this worker has pyiceberg (an optional dependency), without importing it."""
    return importlib.util.find_spec("pyiceberg") is not None


def run_ref_step(refs: PyicebergTableRefs, spec: ActionSpec, marker_id: str | None) -> dict[str, Any]:
    """Run a publish, tag or rollback through pyiceberg: the Spark job's own steps on the worker's refs."""
    if isinstance(spec, PublishSpec):
        from airflow_iceberg.catalog.pyiceberg_publish import publish_with_pyiceberg

        return publish_with_pyiceberg(refs, spec)
    if isinstance(spec, TagSpec):
        from airflow_iceberg.jobs.branches import tag_with

        return tag_with(refs, spec, marker_id)
    if isinstance(spec, RollbackSpec):
        from airflow_iceberg.jobs.rollback import rollback_with

        return rollback_with(refs, spec, marker_id)
    raise TypeError(f"{spec.action} is not a ref step")

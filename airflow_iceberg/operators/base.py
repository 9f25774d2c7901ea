"""What every airflow-iceberg operator shares: a SparkSubmitOperator that submits our PySpark job.

It is the provider's ``SparkSubmitOperator`` as :mod:`.lazy_spark_submit` gives it: every argument
and behaviour, with the provider imported only when a task runs spark-submit.

Subclasses only say *what* to do (a :class:`WriteSpec` or :class:`ReadSpec`); this class does
the rest in ``execute``: validate the request before any JVM starts, turn the catalog
connection(s) into Spark settings, run spark-submit through the apache-spark provider (so its
connection, deploy modes, sizing and kill handling all keep working) or, given a Spark Connect
connection, run the job in a remote session, and return the job's JSON result as the task's XCom.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import uuid
from collections.abc import Iterable, Mapping, Sequence
from contextlib import ExitStack
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow_iceberg.catalog.spark_settings import (
    EXTENSIONS_KEY,
    REDACTION_KEY,
    SparkSettings,
    combined_settings,
    merge_csv,
    redaction_regex,
    runtime_conflict,
)
from airflow_iceberg.exceptions import (
    CatalogSettingsConflictError,
    IcebergJobError,
    InvalidCatalogConfigError,
    InvalidSpecError,
)
from airflow_iceberg.hooks.iceberg_catalog import IcebergCatalogHook
from airflow_iceberg.jobs import ICEBERG_JOB_PATH, write_job_archive
from airflow_iceberg.jobs.connect import unsupported_reason as connect_refusal
from airflow_iceberg.jobs.spec.action import ActionSpec
from airflow_iceberg.jobs.spec.identifiers import split_identifier
from airflow_iceberg.jobs.spec.reads import ReadSpec
from airflow_iceberg.jobs.spec.request import JobRequest
from airflow_iceberg.operators.cluster_mode import (
    GENERATION_KEY,
    PRESERVE_STAGING_KEY,
    RM_WEBAPP_ADDRESS_KEY,
    SUBMITTED_FOR_KEY,
    YARN_SECRET_FILE,
    cluster_mode_refusal,
    forget_another_commits_job,
    kubernetes_mount_conf,
    kubernetes_secret_mounts,
    result_from_catalog,
    secret_shipping_refusal,
    ship_secret_file,
)
from airflow_iceberg.operators.connect import ConnectJob, is_spark_connect
from airflow_iceberg.operators.connect_file_systems import shared_file_system_refusal
from airflow_iceberg.operators.connect_secrets import refuse_per_session_secrets
from airflow_iceberg.operators.connect_tries import TryNumbers
from airflow_iceberg.operators.lazy_spark_submit import LazySparkSubmitOperator
from airflow_iceberg.operators.lineage import TableLineageMixin, check_partition_events_supported
from airflow_iceberg.operators.rendered import as_list
from airflow_iceberg.operators.reserved_conf import reserved_conf_problem
from airflow_iceberg.operators.spark_defaults import (
    deployment_properties,
    deployment_property,
    jvm_system_property,
)
from airflow_iceberg.operators.spark_master import SparkMaster, spark_master
from airflow_iceberg.operators.spark_submit_env import spark_submit_environment
from airflow_iceberg.operators.yarn_staging import stop_submitter
from airflow_iceberg.operators.yarn_staging_mixin import YarnStagingMixin

if TYPE_CHECKING:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.providers.common.compat.sdk import Context

    from airflow_iceberg.catalog.config import CatalogConfig

DEFAULT_JOB_NAME = "airflow-iceberg-{{ ti.dag_id }}.{{ ti.task_id }}"


class IcebergSparkSubmitOperator(YarnStagingMixin, TableLineageMixin, LazySparkSubmitOperator):
    """Base class: submit the packaged Iceberg job with the catalog's Spark settings.

    Every :class:`SparkSubmitOperator` argument (``conn_id`` for the Spark master, ``deploy_mode``,
    executor sizing, ``env_vars``, ``packages``, ``jars``, ``conf`` ...) is accepted and passed on.
    ``conn_id``'s type picks the mode: a ``spark`` connection runs spark-submit; a
    ``spark_connect`` connection runs the same job in a Spark Connect session from this process
    (:mod:`airflow_iceberg.operators.connect`), where only ``conf`` of those arguments applies.

    :param table: The Iceberg table, ``namespace.table`` or ``catalog.namespace.table``; nested
        namespaces as ``catalog.a.b.table``. Without a catalog prefix the connection's catalog is
        used. A part is bare (``sales-eu``, ``Orders``, ``été``) or in backticks for anything else
        (``db.`order lines```); the job quotes every part. (templated)
    :param iceberg_conn_id: The ``iceberg_catalog`` connection of the table's catalog.
    :param extra_iceberg_conn_ids: More ``iceberg_catalog`` connections to load in the same job,
        for example to read a source table from another catalog. (templated)
    :param idempotent: Exactly-once across retries (default True). Each commit is tagged with the
        task instance (dag, task, run, map index); a retry of a try that committed and then died
        finds that commit and returns it instead of writing again. Set False to write again when
        a task instance is cleared and re-run on purpose.
    :param partition_events: Emit one asset event per partition each commit changed, with its
        Airflow ``partition_key`` (``2024-01-02T05`` for ``hours(ts)``, ``2024-01-02`` for
        ``days(d)``), for DAGs on a ``PartitionedAssetTimetable``. Such events do not trigger
        DAGs with a plain asset schedule. Default False: one event per commit, without a key
        (see docs/assets-and-lineage.md).

    Set ``writes_table = True`` on a subclass that commits to ``table``: the table becomes an
    outlet (an asset alias at parse time, the ``iceberg://`` asset and its commit at run time).
    ``reads_table = True`` makes it an inlet. See :mod:`airflow_iceberg.operators.lineage`.
    """

    template_fields: Sequence[str] = (
        *LazySparkSubmitOperator.template_fields,
        "table",
        "iceberg_conn_id",
        "extra_iceberg_conn_ids",
    )

    def __init__(
        self,
        *,
        table: str,
        iceberg_conn_id: str = IcebergCatalogHook.default_conn_name,
        extra_iceberg_conn_ids: Sequence[str] | str = (),
        name: str = DEFAULT_JOB_NAME,
        idempotent: bool = True,
        partition_events: bool = False,
        **kwargs: Any,
    ) -> None:
        for reserved in ("application", "application_args"):
            if reserved in kwargs:
                raise TypeError(
                    f"{type(self).__name__} submits its own PySpark job; do not pass {reserved!r}"
                )
        super().__init__(name=name, **kwargs)
        self.table = table
        self.iceberg_conn_id = iceberg_conn_id
        self.extra_iceberg_conn_ids = extra_iceberg_conn_ids
        self.idempotent = idempotent
        if partition_events:
            check_partition_events_supported()
        self.partition_events = partition_events
        self.declare_table_assets()

    # ------------------------------------------------------------------ what subclasses provide

    def build_spec(self) -> ActionSpec:
        """The job specification for this task, from the (rendered) operator arguments."""
        raise NotImplementedError

    # ------------------------------------------------------------------ shared machinery

    @cached_property
    def catalog_hooks(self) -> list[IcebergCatalogHook]:
        """One hook per catalog connection: the table's own first, then the extra ones."""
        extra = as_list(self.extra_iceberg_conn_ids, "extra_iceberg_conn_ids")
        conn_ids = dict.fromkeys([self.iceberg_conn_id, *extra])
        return [IcebergCatalogHook(iceberg_conn_id=conn_id) for conn_id in conn_ids]

    def catalog_settings(self) -> SparkSettings:
        """Spark settings for every catalog this task loads, refusing settings they would fight over."""
        return combined_settings(hook.catalog_config for hook in self.catalog_hooks)

    def qualify(self, identifier: str, catalog_names: Sequence[str]) -> str:
        """Prefix the default catalog unless the identifier already starts with a configured one.

        The first part (bare or in backticks) is compared, so ``a.b.t`` with no catalog ``a`` is
        the table ``t`` in the nested namespace ``a.b`` of the default catalog.
        """
        if split_identifier(identifier)[0] in catalog_names:
            return identifier
        return f"{catalog_names[0]}.{identifier}"

    def execute(self, context: Context) -> dict[str, Any]:
        spec = self.build_spec().validated()  # bad input fails here, before any JVM starts
        if problem := reserved_conf_problem(self.conf):
            raise InvalidSpecError(f"{spec.table}: {problem}")
        settings = self.catalog_settings()
        spec = self.qualify_spec(spec, settings.catalog_names).validated()
        configs = {hook.catalog_config.catalog_name: hook.catalog_config for hook in self.catalog_hooks}
        lineage = self.plan_lineage(spec, configs)  # every written table's asset URI, before Spark starts
        over_connect = is_spark_connect(self._conn_id)
        # The driver runs on the cluster: its result comes from the catalog (:mod:`.cluster_mode`).
        on_cluster = not over_connect and self._driver_runs_on_the_cluster()
        self._refuse_what_cannot_run(spec, settings, configs, over_connect, on_cluster)
        if on_cluster:
            spec = self._for_the_cluster(spec)
        if on_cluster and (refused := self._untracked_driver_refusal(context)):
            raise InvalidSpecError(f"{spec.table}: {refused}")
        result = self.run_in_worker(context, spec, configs, over_connect)
        if result is None:
            result = self._run_spark_job(context, spec, settings, configs, over_connect, on_cluster)
        if result is None:
            raise IcebergJobError(
                f"{spec.table}: the job exited without reporting a result. The result file is written "
                "by the driver in local and client deploy modes; it may have been killed"
            )
        self.finish_lineage(context, lineage, spec, result)  # asset events, OpenLineage; never raises
        self.log_result(result)
        return result

    def run_in_worker(
        self, context: Context, spec: ActionSpec, configs: Mapping[str, CatalogConfig], over_connect: bool
    ) -> dict[str, Any] | None:
        """The step's result when it ran in this worker without Spark; None runs it as the Spark job.

        Every operation runs as the Spark job unless its operator says otherwise: publish, tag and
        rollback run through pyiceberg where that is exactly as safe (:mod:`.metadata_steps`).
        ``execute`` calls it after all of its checks, so the path never changes what is refused.
        """
        return None

    def _run_spark_job(
        self,
        context: Context,
        spec: ActionSpec,
        settings: SparkSettings,
        configs: Mapping[str, CatalogConfig],
        over_connect: bool,
        on_cluster: bool,
    ) -> dict[str, Any] | None:
        """Run the packaged job (spark-submit, or in a Spark Connect session); its result, if it wrote one."""
        with tempfile.TemporaryDirectory(prefix="airflow-iceberg-") as workdir, ExitStack() as held:
            result_file = os.path.join(workdir, "result.json")
            request = JobRequest(
                spec=spec,
                result_file=None if on_cluster else result_file,
                commit_id=self._cluster_commit_id(context) if on_cluster else self._commit_id(context),
                commit_properties=_airflow_identity(context),
                reuse_commit=self.idempotent and context.get("ti") is not None,
                partition_keys=self.partition_events,
                # Over Spark Connect the secrets go straight from memory to the session.
                secret_conf_file=None
                if over_connect
                else private_secret_file(workdir, settings.secret_conf, held),
            )
            if over_connect:
                held = [name for name, config in configs.items() if config.connect_server_credentials]
                self._run_over_connect(spec, settings, request, self._try_numbers(context), held)
            else:
                if on_cluster:
                    request = self._secrets_for_the_cluster(request, configs.values())
                self._configure_submit(settings, request, job_archive=str(write_job_archive(workdir)))
                self._run_spark_submit(context, spec, result_file, str(request.commit_id), on_cluster)
            if on_cluster:
                result = result_from_catalog(configs, spec, str(request.commit_id))
            else:
                result = _read_result(result_file)
        return result

    def _refuse_what_cannot_run(
        self,
        spec: ActionSpec,
        settings: SparkSettings,
        configs: Mapping[str, Any],
        over_connect: bool,
        on_cluster: bool,
    ) -> None:
        """Refuse, before any JVM or session starts, what the chosen execution mode cannot run."""
        if over_connect:  # what a Spark Connect session cannot take, refused before any session opens
            catalogs = list(configs.values())
            refused = connect_refusal(spec) or shared_file_system_refusal(catalogs, self.conf)
            if refused:
                raise InvalidSpecError(f"{spec.table}: {refused}")
            refuse_per_session_secrets(catalogs, settings, self.conf)
            return
        if conflict := runtime_conflict(configs.values()):  # spark-submit loads the runtimes
            raise CatalogSettingsConflictError(f"{spec.table}: {conflict}")
        if not on_cluster:
            return
        if refused := cluster_mode_refusal(spec, configs, self.partition_events):
            raise InvalidSpecError(f"{spec.table}: {refused}")
        staging = self._submit_property(PRESERVE_STAGING_KEY)
        shipping_conf = {**(self.conf or {}), **({PRESERVE_STAGING_KEY: staging} if staging else {})}
        if settings.secret_conf and (refused := secret_shipping_refusal(self._master(), shipping_conf)):
            raise InvalidCatalogConfigError(f"{spec.table}: {refused}")
        if settings.secret_conf and "yarn" in self._master() and not self._rm_webapp_address():
            raise InvalidCatalogConfigError(
                f"{spec.table}: in YARN cluster deploy mode the catalog secrets travel in the "
                "application's staging directory, which the operator deletes once the ResourceManager "
                f"says the application ended (Spark does not, for a killed one): set {RM_WEBAPP_ADDRESS_KEY} "
                "in the Spark connection's extra (e.g. http://resourcemanager:8088); docs/cluster.md"
            )

    def _untracked_driver_refusal(self, context: Context) -> str | None:
        """Why a retry of this cluster-mode task could make a second commit, or None.

        In client mode the driver is the worker's child: a worker that dies takes it along, and the
        retry's look for its commit id is final. On the cluster the driver outlives the worker, so
        only the provider's ``durable`` tracking (the application's id in the task state store,
        ``yarn_track_via_rm_api`` / ``track_driver_via_k8s_api``) keeps a retry from submitting a
        second driver beside the first, both committing. ``idempotent=False`` promises no
        exactly-once, and is let through.
        """
        if not self.idempotent or context.get("ti") is None:
            return None
        hook = self._get_hook()
        if not (hook._is_yarn or hook._is_kubernetes):
            return None  # spark-submit refuses Python in cluster mode elsewhere (standalone, local)
        tracked = (
            hook._should_track_yarn_application_via_rm_api()
            if hook._is_yarn
            else hook._should_track_driver_via_k8s_api()
        )
        if getattr(self, "durable", False) and tracked and context.get("task_state_store") is not None:
            return None
        option = "yarn_track_via_rm_api=True" if hook._is_yarn else "track_driver_via_k8s_api=True"
        return (
            "in cluster deploy mode the driver outlives a worker that dies, and a retry would submit "
            "a second one beside it (two commits); exactly-once there needs the apache-spark "
            f"provider's durable tracking: durable=True (Airflow 3.3 or newer), {option}, and "
            "deploy_mode='cluster' on the operator or the Spark connection's deploy-mode extra (where "
            "the provider sees it); or idempotent=False, or client deploy mode (docs/cluster.md)"
        )

    def _run_spark_submit(
        self, context: Context, spec: ActionSpec, result_file: str, commit_id: str, on_cluster: bool
    ) -> None:
        """Run spark-submit through the provider (``durable`` resume included); raise the job's own error."""
        if on_cluster:
            self._delete_an_earlier_tries_staging(context)
            self._forget_another_commits_job(context, commit_id)
        try:
            super().execute(context)
        except Exception as error:
            if on_cluster and self._hook is not None:
                self._delete_yarn_staging(self._hook, self._hook._yarn_application_id)
            _raise_job_failure(spec, result_file, error)
            if on_cluster:
                raise IcebergJobError(
                    f"{spec.table}: {error}. In cluster deploy mode the job's own error is in the "
                    "driver's log on the cluster (yarn logs -applicationId <id>, kubectl logs <driver "
                    "pod>); a failed job leaves the table as it was"
                ) from error
            raise

    def _run_over_connect(
        self,
        spec: ActionSpec,
        settings: SparkSettings,
        request: JobRequest,
        tries: TryNumbers | None,
        server_credential_catalogs: Sequence[str] = (),
    ) -> None:
        """Run the job in a Spark Connect session from this process (no spark-submit)."""
        from airflow_iceberg.jobs.error_text import describe_error

        job = ConnectJob(self._conn_id, self.log, server_credential_catalogs)
        self._connect_job = job
        try:
            code = job.run(settings, request, self.conf, tries)
        except InvalidCatalogConfigError:
            raise  # refused in the session, before the task set anything: the refusal says why
        except Exception as error:
            if job.killed:
                raise IcebergJobError(
                    f"{spec.table}: the task was killed; its Spark Connect operations (tag {job.tag}) "
                    "were interrupted"
                ) from error
            _raise_job_failure(spec, str(request.result_file), error)
            # Failed before the job could report (opening, settling or configuring the session).
            raise IcebergJobError(f"{spec.table}: {describe_error(error)}") from error
        finally:
            self._connect_job = None
        if code != 0:
            _raise_job_failure(spec, str(request.result_file), None)
            raise IcebergJobError(f"{spec.table}: the job failed without reporting why")

    def on_kill(self) -> None:
        """Interrupt the running job: its Spark Connect operations, or the spark-submit process.

        A killed YARN application leaves its staging directory (the secrets file in it) behind; a
        watcher process deletes it once the ResourceManager says the application ended
        (:mod:`.yarn_staging`). spark-submit is stopped first if it still runs: the provider's
        YARN kill goes to the ResourceManager only, and an application still being uploaded
        would otherwise be submitted after the task was stopped.
        """
        job = getattr(self, "_connect_job", None)
        if job is not None:
            job.interrupt()
            return
        hook = self._hook
        if hook is None:
            # Nothing was submitted from this process (a Spark Connect task, a ref step in the
            # worker, a task killed before spark-submit): the provider's on_kill would build a hook
            # for it, importing the provider and running post_submit_commands, to kill nothing.
            return
        if hook._is_yarn_cluster_mode:
            stop_submitter(hook._submit_sp, self.log)
        super().on_kill()
        if self._ships_secrets_to(hook) and hook._yarn_application_id:
            self._watch_then_delete_staging(hook, hook._yarn_application_id)

    def poll_until_complete(self, external_id: Any, context: Context) -> None:
        """The provider's polling, with the YARN application's id where the provider's ``on_kill`` looks.

        A retry that reconnects to a running application never ran ``submit``, so the hook has no
        ``_yarn_application_id``: ``on_kill`` would kill nothing, and the application would run on
        (and commit) after its task was marked failed.
        """
        hook = self._hook
        if hook is not None and hook._is_yarn_cluster_mode and not hook._yarn_application_id:
            hook._yarn_application_id = str(external_id)
        super().poll_until_complete(external_id, context)

    def qualify_spec(self, spec: ActionSpec, catalog_names: Sequence[str]) -> ActionSpec:
        """Return the spec with every table identifier qualified by its catalog.

        This default qualifies ``table``, the only identifier most specs have; specs that name
        other tables (sources, sinks) override it.
        """
        return dataclasses.replace(spec, table=self.qualify(spec.table, catalog_names))

    def _for_the_cluster(self, spec: ActionSpec) -> ActionSpec:
        """Settle what cluster deploy mode changes before submitting: the spec, YARN's tracking.

        Preview rows stay with the driver, so a read's ``preview_rows`` is dropped (with a warning)
        rather than computed for nothing. ``durable`` on YARN needs the provider to poll the
        ResourceManager (``yarn_track_via_rm_api``): turned on when the Spark connection names the
        ResourceManager's web address, refused before anything is submitted when it does not.
        """
        if isinstance(spec, ReadSpec) and spec.preview_rows:
            self.log.warning(
                "preview_rows=%s is ignored in cluster deploy mode: the rows stay with the driver on "
                "the cluster; the XCom has no preview",
                spec.preview_rows,
            )
            spec = dataclasses.replace(spec, preview_rows=0)
        if "yarn" in self._master() and getattr(self, "durable", False) and not self._yarn_track_via_rm_api:
            if not self._rm_webapp_address():
                raise InvalidSpecError(
                    f"{spec.table}: durable execution (on by default with Airflow 3.3) of a YARN "
                    "cluster-mode task reconnects to its application through the ResourceManager's "
                    f"REST API: set {RM_WEBAPP_ADDRESS_KEY} in the Spark connection's extra "
                    "(e.g. http://resourcemanager:8088); without it a retry could not find its "
                    "running application (docs/cluster.md)"
                )
            self._yarn_track_via_rm_api = True
        return spec

    def _rm_webapp_address(self) -> str:
        """The ResourceManager's web address in the Spark connection's extra, or ''."""
        from airflow.providers.common.compat.sdk import BaseHook

        extra = BaseHook.get_connection(self._conn_id).extra_dejson
        return str(extra.get(RM_WEBAPP_ADDRESS_KEY) or "").strip()

    def _secrets_for_the_cluster(self, request: JobRequest, configs: Iterable[CatalogConfig]) -> JobRequest:
        """The request as a driver on the cluster gets its secrets (:mod:`.cluster_mode`).

        YARN: the secrets file travels with ``--files`` into the application's staging directory,
        and the job reads it in its container. Kubernetes: each connection's ``kubernetes_credentials``
        is mounted into the driver pod, and the job reads the folder; nothing leaves the worker.
        """
        if request.secret_conf_file:  # only on YARN: refused elsewhere before this
            self.files = ship_secret_file(self.files, request.secret_conf_file)
            self._secrets_shipped_to_yarn = True
            request = dataclasses.replace(request, secret_conf_file=YARN_SECRET_FILE)
        if "k8s" in self._master() and (mounts := kubernetes_secret_mounts(configs)):
            self.conf = {**kubernetes_mount_conf(mounts), **(self.conf or {})}
            request = dataclasses.replace(
                request, secret_mounts={catalog: path for catalog, (_, path) in mounts.items()}
            )
        return request

    @cached_property
    def _spark_master(self) -> SparkMaster:
        """The Spark master and deploy mode of ``conn_id``, looked up once (:mod:`.spark_master`).

        The checks before submitting ask for them several times; they are read from the connection
        as the provider's hook reads them, without importing it: a step that then runs in the
        worker (pyiceberg) never loads the spark-submit hook or the Kubernetes client.
        """
        return spark_master(self._conn_id, self._deploy_mode)

    def _master(self) -> str:
        """The Spark master, as the provider's hook resolves it from the connection."""
        return self._spark_master.master

    def _driver_runs_on_the_cluster(self) -> bool:
        """Cluster deploy mode, resolved as spark-submit resolves it.

        ``--deploy-mode`` (the operator's ``deploy_mode``, else the Spark connection's extra), else
        ``spark.submit.deployMode`` from ``--conf`` (the operator's ``conf``), else from the
        deployment's properties file (``properties_file`` or ``spark-defaults.conf``), else
        spark-submit's ``DEPLOY_MODE`` environment variable. A cluster mode this missed would run
        the job with a worker-local result path and a ``/proc/<pid>/fd/<n>`` secrets path.
        """
        mode = self._spark_master.deploy_mode or self._submit_property(
            "spark.submit.deployMode"
        )
        if mode is None:
            mode = self._submit_environment().get("DEPLOY_MODE")
        return str(mode or "").strip() == "cluster"

    def _submit_environment(self) -> dict[str, str]:
        """The environment spark-submit starts with (see :mod:`.spark_submit_env`)."""
        env_vars = None if "k8s" in self._master() else self.env_vars
        return spark_submit_environment(os.environ, env_vars)

    def _submit_properties(self) -> dict[str, str]:
        """The Spark properties spark-submit starts with: the deployment's properties file, then ``conf``."""
        environment = self._submit_environment()
        binary = getattr(self, "spark_binary", None) or "spark-submit"
        found = deployment_properties(self.properties_file, environment, binary)
        return {**found, **{str(key): str(value) for key, value in (self.conf or {}).items()}}

    def _submit_property(self, key: str) -> str | None:
        """``key`` as spark-submit sees it: the operator's ``conf``, else the deployment's properties file."""
        if key in (self.conf or {}):
            return str((self.conf or {})[key])
        environment = self._submit_environment()
        found = deployment_property(
            key, self.properties_file, environment, getattr(self, "spark_binary", None) or "spark-submit"
        )
        return found if found is not None else jvm_system_property(key, environment)

    def _forget_another_commits_job(self, context: Context, commit_id: str) -> None:
        """Keep ``durable``'s stored Spark job for this commit id only: :func:`forget_another_commits_job`."""
        store = context.get("task_state_store")
        if store is None or not getattr(self, "durable", False):
            return
        job_keys = (self.external_id_key, getattr(self, "_K8S_DRIVER_STATUS_KEY", "k8s_driver_status"))
        forgot = forget_another_commits_job(store, commit_id, job_keys)
        if not self.idempotent and context.get("ti") is not None:  # see _cluster_commit_id
            store.set(GENERATION_KEY, self._generation(context))
        if forgot:
            self.log.info(
                "This task instance was cleared since its Spark job ran: submitting a new one for commit %s",
                commit_id,
            )

    def _get_hook(self) -> SparkSubmitHook:
        """The provider's hook, except that spark-submit inherits none of Airflow's secrets.

        See :mod:`airflow_iceberg.operators.spark_submit_env`.
        """
        from airflow_iceberg.operators.clean_environment_hook import with_clean_environment

        return with_clean_environment(super()._get_hook())

    def _cluster_commit_id(self, context: Context) -> str:
        """The commit id of a cluster-mode try: :meth:`_commit_id`, except a non-idempotent retry's.

        With ``idempotent=False`` every try gets a new commit id, but ``durable`` still reconnects a
        retry to the driver the worker left running on the cluster (or finds it succeeded); that
        driver commits under the id it was submitted with, so the retry must report that id, and
        must not take its new id for a clear. Until a clear (a new :meth:`_generation`), a
        non-idempotent retry keeps the commit id stored beside the provider's job.
        """
        commit_id = self._commit_id(context)
        store = context.get("task_state_store")
        durable = getattr(self, "durable", False)
        if self.idempotent or store is None or not durable or context.get("ti") is None:
            return commit_id
        stored = store.get(SUBMITTED_FOR_KEY)
        if stored and store.get(GENERATION_KEY) == self._generation(context):
            return str(stored)
        return commit_id

    def _generation(self, context: Context) -> str:
        """The task instance's clear generation: the commit id an idempotent task would have."""
        ti = context["ti"]
        first_try = self._first_try(ti)
        run_started = getattr(context.get("dag_run"), "start_date", None)
        started = run_started.isoformat() if run_started is not None else ""
        return f"{ti.dag_id}:{ti.task_id}:{ti.run_id}:{getattr(ti, 'map_index', -1)}:{first_try}:{started}"

    def _commit_id(self, context: Context) -> str:
        """The id a commit is tagged with: the same for a retry, new for a cleared (repaired) task.

        ``<dag_id>:<task_id>:<run_id>:<map_index>:<first try>:<run started>``. Airflow keeps the
        clear generation per task instance: a clear sets ``max_tries = try_number + retries``, a
        retry changes nothing, so ``max_tries - retries + 1`` is the first try since the last
        clear (Airflow's own ``get_first_reschedule_date`` reads it the same way). The run's
        ``start_date`` tells apart a run deleted and created again, or another Airflow's run with
        the same run_id; a retry's run is the same running DagRun, so it keeps it.
        ``dag_run.clear_number`` is not used: it counts clears of *any* task of the run, so the
        retry of one task would look like a repair when a neighbour was cleared.
        """
        if not self.idempotent or context.get("ti") is None:
            return uuid.uuid4().hex
        return self._generation(context)

    def _first_try(self, ti: Any) -> int:
        """The task instance's first try since it was last cleared (see :meth:`_commit_id`)."""
        max_tries = getattr(ti, "max_tries", None)
        return max_tries - (self.retries or 0) + 1 if isinstance(max_tries, int) else 1

    def _try_numbers(self, context: Context) -> TryNumbers | None:
        """This try and the first try of its commit id: the tries a Spark Connect run settles first."""
        ti = context.get("ti")
        if not self.idempotent or ti is None:
            return None
        first = self._first_try(ti)
        current = getattr(ti, "try_number", first)
        return TryNumbers(first=first, current=max(current if isinstance(current, int) else first, first))

    def log_result(self, result: Mapping[str, Any]) -> None:
        self.log.info("Iceberg job result for %s: %s", result.get("table"), json.dumps(result, default=str))

    def _configure_submit(self, settings: SparkSettings, request: JobRequest, job_archive: str) -> None:
        """Point SparkSubmitOperator at our job, with the catalog settings merged into the user's.

        The user's own ``conf`` wins over the connection's, except ``spark.sql.extensions``,
        which is merged so that other extensions (Delta, Sedona ...) keep working, and
        ``spark.redaction.regex``, which is merged so that it still hides every catalog secret
        (the user's pattern, or the secret keys, alone would leave some in clear), and what the
        deployment's own properties file redacts (a ``--conf`` replaces its pattern; see
        :mod:`.spark_defaults`). The table's
        catalog becomes ``spark.sql.defaultCatalog``, so queries can name tables as ``db.table``.
        ``job_archive`` (the job package as a zip) joins the user's ``py_files``.
        """
        user_conf = dict(self.conf or {})
        # Unqualified names in source queries resolve in the table's own catalog.
        conf = {**settings.conf, "spark.sql.defaultCatalog": settings.catalog_names[0], **user_conf}
        conf[EXTENSIONS_KEY] = merge_csv(user_conf.get(EXTENSIONS_KEY), settings.conf.get(EXTENSIONS_KEY))
        deployment = deployment_property(
            REDACTION_KEY,
            self.properties_file,
            spark_submit_environment(os.environ, self.env_vars),
            getattr(self, "spark_binary", None) or "spark-submit",
        )
        conf[REDACTION_KEY] = redaction_regex(settings.secret_conf, deployment, user_conf.get(REDACTION_KEY))
        self.conf = conf
        self.jars = merge_csv(self.jars, *settings.jars) or None
        self.packages = merge_csv(self.packages, *settings.packages) or None
        self.py_files = merge_csv(self.py_files, job_archive)
        self.application = str(ICEBERG_JOB_PATH)
        self.application_args = request.to_argv()


def _airflow_identity(context: Context) -> dict[str, str]:
    """Snapshot-summary tags that tie each Iceberg commit to the Airflow task that made it."""
    ti = context.get("ti")
    if ti is None:
        return {}
    return {
        "airflow.dag-id": str(ti.dag_id),
        "airflow.task-id": str(ti.task_id),
        "airflow.run-id": str(ti.run_id),
        "airflow.map-index": str(getattr(ti, "map_index", -1)),
        "airflow.try-number": str(getattr(ti, "try_number", 0)),
    }


def private_secret_file(workdir: str, values: Mapping[str, str], held: ExitStack) -> str | None:
    """The path of a file holding the catalog secrets, which dies with this process where it can.

    On Linux the secrets are in memory (``memfd_create``), reached by the driver as
    ``/proc/<this process>/fd/<n>``, which only processes of this user can open, and only while
    this process lives: a worker killed with SIGKILL (the OOM killer, a node drain) leaves
    nothing on disk, where a file would outlive it, readable by every later task of the user.
    The descriptor is closed when ``held`` closes (the task's ``execute`` ends). Elsewhere it is
    :func:`_write_private_json`'s file in the task's private directory.
    """
    if not values:
        return None
    proc_fds = f"/proc/{os.getpid()}/fd"
    if not (hasattr(os, "memfd_create") and os.path.isdir(proc_fds)):
        return _write_private_json(workdir, "secret-conf.json", values)
    descriptor = os.memfd_create("airflow-iceberg-secret-conf", os.MFD_CLOEXEC)
    held.callback(os.close, descriptor)
    os.fchmod(descriptor, 0o600)  # as a file's would be; /proc/<pid>/fd also needs this user
    data = json.dumps(dict(values)).encode("utf-8")
    while data:
        data = data[os.write(descriptor, data) :]
    return f"{proc_fds}/{descriptor}"


def _write_private_json(workdir: str, name: str, values: Mapping[str, str]) -> str | None:
    """Write ``values`` to a file only this user can read, in the task's private work directory.

    This is how catalog secrets reach the driver: only the file's path is on spark-submit's
    command line. Not ``env_vars`` (on YARN and Kubernetes the provider turns those into
    ``--conf spark.*Env.*`` arguments) and not this process's environment (the provider's
    ``post_submit_commands`` shells and every other child would inherit it). The directory is
    removed, with the file, when the task's ``execute`` ends.
    """
    if not values:
        return None
    path = os.path.join(workdir, name)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump(dict(values), handle)
    return path


def _raise_job_failure(spec: ActionSpec, result_file: str, error: BaseException | None) -> None:
    """Raise the job's own one-line error (Spark's analysis error, Iceberg's ...) if it reported one."""
    failure = _read_result(result_file)
    if failure and failure.get("error"):
        raise IcebergJobError(f"{spec.table}: {failure['error']}") from error


def _read_result(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None
    except ValueError as error:
        raise IcebergJobError(f"the job's result file {path} is not valid JSON: {error}") from error

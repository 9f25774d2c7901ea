"""The apache-spark provider's ``SparkSubmitOperator``, without importing it while a DAG file is parsed.

Importing ``airflow.providers.apache.spark.operators.spark_submit`` imports, at module level, the
cncf-kubernetes client (``kubernetes`` and ``kubernetes_asyncio``) and the OpenLineage listener:
about 1.4 s of a fresh interpreter's 2.5 s, paid again by every task process that loads the DAG
file, also for a Spark Connect task or a pyiceberg metadata step that never runs spark-submit.

:class:`LazySparkSubmitOperator` takes every ``SparkSubmitOperator`` argument, keeps it under the
attribute the provider's own ``__init__`` would give it, and has the same ``template_fields``,
``external_id_key`` and ``durable`` behaviour (it is a :class:`ResumableJobMixin` like the
provider's). Each method the provider's operator defines (``execute``, the ``durable`` hooks
``submit_job`` ... ``get_job_result``, ``on_kill``, ``_get_hook``, ``_backend``) is the provider's
own function, called with this operator: the provider module is imported on the first call, that
is, only when a task runs spark-submit. Nothing of the provider's logic is copied, so its deploy
modes, driver tracking, YARN and Kubernetes resumes and kill handling stay the provider's.

Why not composition (a ``SparkSubmitOperator`` built inside ``execute``): an operator created and
executed inside another's ``execute`` trips Airflow's ``ExecutorSafeguard`` (a warning in every
task log, an error under ``allow_nested_operators = False``), and the ``durable`` state, the hook
and the kill handling would live on a second object that ``on_kill`` and our overrides would
have to reach into. ``tests/unit/test_lazy_spark_submit.py`` pins the contract: the same
``__init__`` parameters and template fields as the installed provider's operator, and every
function in its class body delegated here.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.exceptions import AirflowProviderDeprecationWarning
from airflow.providers.common.compat.sdk import BaseOperator, ResumableJobMixin, conf

if TYPE_CHECKING:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.providers.common.compat.sdk import Context

#: ``SparkSubmitOperator.template_fields`` (the unit test compares them with the installed provider's).
SPARK_SUBMIT_TEMPLATE_FIELDS: tuple[str, ...] = (
    "application",
    "conf",
    "files",
    "py_files",
    "jars",
    "driver_class_path",
    "packages",
    "exclude_packages",
    "keytab",
    "principal",
    "proxy_user",
    "name",
    "application_args",
    "env_vars",
    "post_submit_commands",
    "properties_file",
)

#: Every function ``SparkSubmitOperator`` defines; each is called through :func:`_provider_operator`.
DELEGATED_METHODS: tuple[str, ...] = (
    "execute",
    "_backend",
    "submit_job",
    "get_job_status",
    "_parse_k8s_external_id",
    "_fetch_driver_status",
    "is_job_active",
    "is_job_succeeded",
    "poll_until_complete",
    "get_job_result",
    "on_kill",
    "_get_hook",
)


def _provider_operator() -> type[SparkSubmitOperator]:
    """The provider's operator class, imported on first use (a task that runs spark-submit)."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    return SparkSubmitOperator


def _openlineage_default(option: str) -> bool:
    """The provider's default for ``openlineage_inject_*``: Airflow's ``[openlineage]`` setting."""
    return conf.getboolean("openlineage", option, fallback=False)


class LazySparkSubmitOperator(ResumableJobMixin, BaseOperator):
    """``SparkSubmitOperator``'s arguments and behaviour; the provider is imported when a task runs it.

    Every argument is the provider's (see its ``SparkSubmitOperator``); ``openlineage_inject_*``
    default to Airflow's ``[openlineage] spark_inject_*`` settings, read when the task is created.
    """

    template_fields: Sequence[str] = SPARK_SUBMIT_TEMPLATE_FIELDS
    external_id_key = "spark_job_id"
    _K8S_DRIVER_STATUS_KEY = "k8s_driver_status"

    def __init__(
        self,
        *,
        application: str = "",
        conf: dict[Any, Any] | None = None,
        conn_id: str = "spark_default",
        files: str | None = None,
        py_files: str | None = None,
        archives: str | None = None,
        driver_class_path: str | None = None,
        jars: str | None = None,
        java_class: str | None = None,
        packages: str | None = None,
        exclude_packages: str | None = None,
        repositories: str | None = None,
        total_executor_cores: int | None = None,
        executor_cores: int | None = None,
        executor_memory: str | None = None,
        driver_memory: str | None = None,
        keytab: str | None = None,
        principal: str | None = None,
        proxy_user: str | None = None,
        name: str = "arrow-spark",
        num_executors: int | None = None,
        status_poll_interval: int = 1,
        application_args: list[Any] | None = None,
        env_vars: dict[str, Any] | None = None,
        verbose: bool = False,
        spark_binary: str | None = None,
        properties_file: str | None = None,
        yarn_queue: str | None = None,
        deploy_mode: str | None = None,
        use_krb5ccache: bool = False,
        post_submit_commands: list[str] | None = None,
        track_driver_via_k8s_api: bool = False,
        yarn_track_via_rm_api: bool = False,
        yarn_rm_auth: Any = None,
        openlineage_inject_parent_job_info: bool | None = None,
        openlineage_inject_transport_info: bool | None = None,
        reconnect_on_retry: bool | None = None,
        durable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        if reconnect_on_retry is not None:
            warnings.warn(
                "`reconnect_on_retry` is deprecated; use `durable` instead.",
                AirflowProviderDeprecationWarning,
                stacklevel=2,
            )
            if durable is None:
                durable = reconnect_on_retry
        if durable is not None:  # so that default_args={"durable": ...} reaches ResumableJobMixin
            kwargs["durable"] = durable
        super().__init__(**kwargs)
        # The attribute names are the provider's: its functions (DELEGATED_METHODS) read them.
        self.application = application
        self.conf = conf
        self.files = files
        self.py_files = py_files
        self._archives = archives
        self.driver_class_path = driver_class_path
        self.jars = jars
        self._java_class = java_class
        self.packages = packages
        self.exclude_packages = exclude_packages
        self._repositories = repositories
        self._total_executor_cores = total_executor_cores
        self._executor_cores = executor_cores
        self._executor_memory = executor_memory
        self._driver_memory = driver_memory
        self.keytab = keytab
        self.principal = principal
        self.proxy_user = proxy_user
        self.name = name
        self._num_executors = num_executors
        self._status_poll_interval = status_poll_interval
        self.application_args = application_args
        self.env_vars = env_vars
        self._verbose = verbose
        self._spark_binary = spark_binary
        self.properties_file = properties_file
        self._yarn_queue = yarn_queue
        self._deploy_mode = deploy_mode
        self._hook: SparkSubmitHook | None = None
        self._SparkSubmitOperator__backend = None  # the provider's name-mangled backend cache
        self.post_submit_commands = post_submit_commands
        self._conn_id = conn_id
        self._use_krb5ccache = use_krb5ccache
        self._yarn_track_via_rm_api = yarn_track_via_rm_api
        self._yarn_rm_auth = yarn_rm_auth
        self._track_driver_via_k8s_api = track_driver_via_k8s_api
        self._openlineage_inject_parent_job_info = (
            _openlineage_default("spark_inject_parent_job_info")
            if openlineage_inject_parent_job_info is None
            else openlineage_inject_parent_job_info
        )
        self._openlineage_inject_transport_info = (
            _openlineage_default("spark_inject_transport_info")
            if openlineage_inject_transport_info is None
            else openlineage_inject_transport_info
        )

    def execute(self, context: Context) -> Any:
        return _provider_operator().execute(self, context)

    @property
    def _backend(self) -> Any:
        return _provider_operator()._backend.fget(self)  # type: ignore[attr-defined]

    def submit_job(self, context: Context) -> Any:
        return _provider_operator().submit_job(self, context)

    def get_job_status(self, external_id: Any, context: Context) -> str:
        return _provider_operator().get_job_status(self, external_id, context)

    @staticmethod
    def _parse_k8s_external_id(external_id: str) -> tuple[str, str]:
        return _provider_operator()._parse_k8s_external_id(external_id)

    def _fetch_driver_status(self, url: str, external_id: str) -> str:
        return _provider_operator()._fetch_driver_status(self, url, external_id)

    def is_job_active(self, status: str) -> bool:
        return _provider_operator().is_job_active(self, status)

    def is_job_succeeded(self, status: str) -> bool:
        return _provider_operator().is_job_succeeded(self, status)

    def poll_until_complete(self, external_id: Any, context: Context) -> None:
        return _provider_operator().poll_until_complete(self, external_id, context)

    def get_job_result(self, external_id: Any, context: Context) -> Any:
        return _provider_operator().get_job_result(self, external_id, context)

    def on_kill(self) -> None:
        _provider_operator().on_kill(self)

    def _get_hook(self) -> SparkSubmitHook:
        return _provider_operator()._get_hook(self)

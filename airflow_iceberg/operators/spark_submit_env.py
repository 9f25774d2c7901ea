"""spark-submit without Airflow's secrets in its environment.

The apache-spark provider's ``SparkSubmitHook.submit`` starts spark-submit with a copy of the
worker's whole environment. A worker's environment holds Airflow's own secrets: connections as
``AIRFLOW_CONN_*`` (passwords included), variables as ``AIRFLOW_VAR_*``, and configuration as
``AIRFLOW__*`` (the metadata database URL, the Fernet and JWT keys, secrets-backend settings).
spark-submit's JVM, the PySpark driver, local executors and their Python workers would all
inherit them, readable in ``/proc/<pid>/environ`` and by any code the job runs.
:class:`CleanEnvironmentSparkSubmitHook` gives spark-submit everything else (what Spark, Hadoop,
YARN, Kerberos and cloud SDKs read: ``PATH``, ``JAVA_HOME``, ``SPARK_*``, ``HADOOP_*``,
``AWS_*``, ``KRB5CCNAME`` ...) and the task's own ``env_vars``, which win.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

#: Airflow's variables: connections, variables, configuration, and the runner's internal ones.
AIRFLOW_ENV_PREFIXES = ("AIRFLOW_", "_AIRFLOW")


def spark_submit_environment(
    environ: Mapping[str, str], env_vars: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """``environ`` without Airflow's variables, then ``env_vars`` (the task's own, kept as given)."""
    kept = {key: value for key, value in environ.items() if not key.startswith(AIRFLOW_ENV_PREFIXES)}
    return {**kept, **{str(key): str(value) for key, value in (env_vars or {}).items()}}


class CleanEnvironmentSparkSubmitHook(SparkSubmitHook):
    """``SparkSubmitHook`` whose spark-submit gets :func:`spark_submit_environment`.

    The provider's ``submit`` gives ``Popen`` the ``env`` it is passed, unless the hook's ``_env``
    is set (to the task's ``env_vars``, while it builds the command), in which case it replaces it
    with ``os.environ`` plus ``_env``. So ``submit`` here passes the clean environment with the
    ``env_vars`` already in it, and the command's build hands ``_env`` over to ``on_kill``, whose
    ``yarn application -kill`` still reads it.
    """

    def submit(self, application: str = "", **kwargs: Any) -> str | None:
        # The provider puts env_vars into spark-submit's environment except on Kubernetes, where
        # they become spark.kubernetes.driverEnv.* settings only.
        env_vars = None if self._is_kubernetes else self._env_vars
        kwargs["env"] = spark_submit_environment(os.environ, env_vars)
        return super().submit(application, **kwargs)

    def _build_spark_submit_command(self, application: str) -> list[str]:
        command = super()._build_spark_submit_command(application)
        self._kill_env, self._env = self._env, None  # see the class docstring
        return command

    def on_kill(self) -> None:
        self._env = self._env or getattr(self, "_kill_env", None)
        super().on_kill()


def with_clean_environment(hook: SparkSubmitHook) -> CleanEnvironmentSparkSubmitHook:
    """The provider's hook, made a :class:`CleanEnvironmentSparkSubmitHook`.

    ``SparkSubmitOperator._get_hook`` builds the hook from some thirty operator arguments; turning
    that instance into the subclass (which adds no state of its own) keeps every one of them
    without copying the list, which would drift from the provider's.
    """
    if type(hook) is not SparkSubmitHook:
        raise TypeError(f"expected the apache-spark provider's SparkSubmitHook, got {type(hook).__name__}")
    hook.__class__ = CleanEnvironmentSparkSubmitHook
    return hook  # type: ignore[return-value]

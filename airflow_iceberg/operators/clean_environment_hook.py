"""The apache-spark provider's hook, starting spark-submit with :func:`.spark_submit_environment`.

Its own module because it subclasses the provider's hook: only a task that runs spark-submit
imports it (and with it the provider and its Kubernetes client), never a DAG file's parse and
never a Spark Connect or pyiceberg task (docs/how-it-runs.md, "What a DAG file imports").
"""

from __future__ import annotations

import os
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_iceberg.operators.spark_submit_env import spark_submit_environment


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

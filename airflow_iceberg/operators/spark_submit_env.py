"""spark-submit without Airflow's secrets in its environment.

The apache-spark provider's ``SparkSubmitHook.submit`` starts spark-submit with a copy of the
worker's whole environment. A worker's environment holds Airflow's own secrets: connections as
``AIRFLOW_CONN_*`` (passwords included), variables as ``AIRFLOW_VAR_*``, and configuration as
``AIRFLOW__*`` (the metadata database URL, the Fernet and JWT keys, secrets-backend settings).
spark-submit's JVM, the PySpark driver, local executors and their Python workers would all
inherit them, readable in ``/proc/<pid>/environ`` and by any code the job runs.
:func:`spark_submit_environment` is everything else (what Spark, Hadoop,
YARN, Kerberos and cloud SDKs read: ``PATH``, ``JAVA_HOME``, ``SPARK_*``, ``HADOOP_*``,
``AWS_*``, ``KRB5CCNAME`` ...) and the task's own ``env_vars``, which win;
:mod:`.clean_environment_hook` gives it to spark-submit (and imports the provider only when a task
runs spark-submit, not when a DAG file is parsed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Airflow's variables: connections, variables, configuration, and the runner's internal ones.
AIRFLOW_ENV_PREFIXES = ("AIRFLOW_", "_AIRFLOW")


def spark_submit_environment(
    environ: Mapping[str, str], env_vars: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """``environ`` without Airflow's variables, then ``env_vars`` (the task's own, kept as given)."""
    kept = {key: value for key, value in environ.items() if not key.startswith(AIRFLOW_ENV_PREFIXES)}
    return {**kept, **{str(key): str(value) for key, value in (env_vars or {}).items()}}

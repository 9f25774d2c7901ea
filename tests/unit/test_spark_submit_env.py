"""spark-submit's environment: everything the worker has except Airflow's own variables.

The real proof, ``/proc/<pid>/environ`` of spark-submit's JVM and the PySpark driver during a real
task, is in tests/integration/test_secrets.py; these pin the rule and how the hook applies it.
"""

from __future__ import annotations

import io
from unittest import mock

import pytest
from airflow.providers.apache.spark.hooks import spark_submit as provider_hook
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_iceberg.operators import IcebergAppendOperator
from airflow_iceberg.operators.clean_environment_hook import (
    CleanEnvironmentSparkSubmitHook,
    with_clean_environment,
)
from airflow_iceberg.operators.spark_submit_env import spark_submit_environment

WORKER = {
    "PATH": "/usr/bin",
    "HOME": "/home/airflow",
    "LANG": "C.UTF-8",
    "JAVA_HOME": "/opt/java",
    "SPARK_HOME": "/opt/spark",
    "HADOOP_CONF_DIR": "/etc/hadoop",
    "YARN_CONF_DIR": "/etc/hadoop",
    "PYSPARK_PYTHON": "/opt/venv/bin/python",
    "AWS_PROFILE": "etl",
    "KRB5CCNAME": "/tmp/krb5cc",
    "AIRFLOW_CONN_WAREHOUSE": "postgresql://etl:SENTINEL@db/wh",
    "AIRFLOW_VAR_API_KEY": "SENTINEL",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://airflow:SENTINEL@db/airflow",
    "AIRFLOW__CORE__FERNET_KEY": "SENTINEL",
    "AIRFLOW_HOME": "/opt/airflow",
    "_AIRFLOW_PROCESS_CONTEXT": "client",
}


def test_airflows_variables_are_dropped_and_the_rest_kept_with_env_vars_winning():
    env = spark_submit_environment(WORKER, {"AWS_PROFILE": "reports", "MY_FLAG": 1})
    assert env == {
        "PATH": "/usr/bin",
        "HOME": "/home/airflow",
        "LANG": "C.UTF-8",
        "JAVA_HOME": "/opt/java",
        "SPARK_HOME": "/opt/spark",
        "HADOOP_CONF_DIR": "/etc/hadoop",
        "YARN_CONF_DIR": "/etc/hadoop",
        "PYSPARK_PYTHON": "/opt/venv/bin/python",
        "AWS_PROFILE": "reports",
        "KRB5CCNAME": "/tmp/krb5cc",
        "MY_FLAG": "1",
    }


def _popen_recorder(calls: list[dict]):
    def popen(command, **kwargs):
        calls.append({"command": command, **kwargs})
        process = mock.Mock()
        process.stdout = io.StringIO("")
        process.wait.return_value = 0
        process.poll.return_value = 0
        return process

    return popen


@pytest.mark.parametrize(("env_vars", "expected"), [(None, None), ({"MY_FLAG": "on"}, "on")])
def test_the_hook_gives_spark_submit_the_clean_environment(monkeypatch, spark_connection, env_vars, expected):
    for key, value in WORKER.items():
        monkeypatch.setenv(key, value)
    calls: list[dict] = []
    monkeypatch.setattr(provider_hook.subprocess, "Popen", _popen_recorder(calls))
    hook = with_clean_environment(SparkSubmitHook(conn_id="spark_default", env_vars=env_vars))
    hook.submit("job.py")
    (call,) = calls
    assert not [key for key in call["env"] if key.startswith(("AIRFLOW", "_AIRFLOW"))]
    assert "SENTINEL" not in str(call["env"]) and call["env"]["JAVA_HOME"] == "/opt/java"
    assert call["env"].get("MY_FLAG") == expected
    assert hook._kill_env == env_vars  # what on_kill's `yarn application -kill` still gets


def test_every_operator_uses_the_clean_hook_with_all_its_arguments(spark_connection, iceberg_connection):
    operator = IcebergAppendOperator(
        task_id="a",
        table="db.t",
        source_query="SELECT 1",
        env_vars={"MY_FLAG": "on"},
        executor_memory="3g",
        name="job",
    )
    hook = operator._get_hook()
    assert type(hook) is CleanEnvironmentSparkSubmitHook
    assert (hook._env_vars, hook._executor_memory, hook._name) == ({"MY_FLAG": "on"}, "3g", "job")


def test_only_the_providers_own_hook_is_converted():
    class Other(SparkSubmitHook):
        pass

    with pytest.raises(TypeError, match="expected the apache-spark provider's SparkSubmitHook, got Other"):
        with_clean_environment(Other.__new__(Other))

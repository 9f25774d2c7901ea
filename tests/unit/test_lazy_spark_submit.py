"""LazySparkSubmitOperator against the installed provider's SparkSubmitOperator.

It must stay the provider's operator in all but when the provider is imported: the same
parameters, template fields and keys, the same state after ``__init__`` (the provider's functions
read it), the same hook and spark-submit command, and every function of the provider's class
called, not copied. A provider upgrade that adds a parameter or a method fails here.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_iceberg.operators.lazy_spark_submit import (
    DELEGATED_METHODS,
    SPARK_SUBMIT_TEMPLATE_FIELDS,
    LazySparkSubmitOperator,
)
from tests.heavy_modules import HEAVY, loaded

REPO = Path(__file__).resolve().parents[2]

ARGUMENTS = {
    "application": "job.py",
    "conf": {"spark.sql.shuffle.partitions": "4"},
    "conn_id": "spark_default",
    "files": "a.txt",
    "py_files": "deps.zip",
    "archives": "env.tar.gz#env",
    "driver_class_path": "/opt/extra.jar",
    "jars": "/opt/iceberg.jar",
    "packages": "org.example:lib:1.0",
    "exclude_packages": "org.example:other",
    "repositories": "https://repo.example",
    "total_executor_cores": 4,
    "executor_cores": 2,
    "executor_memory": "2g",
    "driver_memory": "1g",
    "keytab": "/etc/etl.keytab",
    "principal": "etl@EXAMPLE",
    "proxy_user": "reports",
    "name": "nightly",
    "num_executors": 3,
    "status_poll_interval": 5,
    "application_args": ["--day", "2024-01-02"],
    "env_vars": {"TZ": "UTC"},
    "verbose": True,
    "properties_file": "/etc/spark/etl.conf",
    "yarn_queue": "etl",
    "deploy_mode": "client",
    "post_submit_commands": ["echo done"],
    "durable": False,
}


def _pair(**overrides):
    arguments = {**ARGUMENTS, **overrides}
    return (
        SparkSubmitOperator(task_id="t", **arguments),
        LazySparkSubmitOperator(task_id="t", **arguments),
    )


def test_the_parameters_are_the_providers_with_its_defaults():
    provider = inspect.signature(SparkSubmitOperator.__init__).parameters
    ours = inspect.signature(LazySparkSubmitOperator.__init__).parameters
    assert list(ours) == list(provider)
    # The provider's openlineage_inject_* defaults are read from the configuration when its module
    # is imported; ours when the task is created (None), with the same result (the next test).
    evaluated_late = {"openlineage_inject_parent_job_info", "openlineage_inject_transport_info"}
    for name in set(provider) - evaluated_late:
        assert ours[name].default == provider[name].default, name


def test_template_fields_and_state_keys_are_the_providers():
    assert tuple(SparkSubmitOperator.template_fields) == SPARK_SUBMIT_TEMPLATE_FIELDS
    assert LazySparkSubmitOperator.external_id_key == SparkSubmitOperator.external_id_key
    assert LazySparkSubmitOperator._K8S_DRIVER_STATUS_KEY == SparkSubmitOperator._K8S_DRIVER_STATUS_KEY


@pytest.mark.parametrize("overrides", [{}, {"durable": True}, {"reconnect_on_retry": True, "durable": None}])
def test_init_leaves_the_state_the_providers_init_leaves(overrides):
    provider, ours = _pair(**overrides)
    assert vars(ours) == vars(provider)


def test_every_function_of_the_providers_class_is_delegated():
    callables = (property, staticmethod, classmethod)
    defined = {
        name
        for name, value in vars(SparkSubmitOperator).items()
        if isinstance(value, callables) or inspect.isfunction(value)
    } - {"__init__"}
    assert defined == set(DELEGATED_METHODS)
    assert all(name in vars(LazySparkSubmitOperator) for name in DELEGATED_METHODS)


def test_the_hook_and_its_command_are_the_providers():
    provider, ours = _pair()
    provider_hook, our_hook = provider._get_hook(), ours._get_hook()
    assert type(our_hook) is type(provider_hook)
    assert our_hook._build_spark_submit_command("job.py") == provider_hook._build_spark_submit_command(
        "job.py"
    )
    ours._hook = our_hook
    assert type(ours._backend).__name__ == "_StandaloneSparkSubmitBackend"


def test_execute_and_on_kill_are_the_providers_functions_called_with_this_operator():
    _, ours = _pair()
    with (
        mock.patch.object(SparkSubmitOperator, "execute") as execute,
        mock.patch.object(SparkSubmitOperator, "on_kill") as on_kill,
    ):
        ours.execute({})
        ours.on_kill()
    execute.assert_called_once_with(ours, {})
    on_kill.assert_called_once_with(ours)


def test_durable_runs_the_providers_resume_through_this_operator():
    """A durable task finds its stored job still running and reconnects instead of submitting."""
    _, ours = _pair(durable=True, deploy_mode="client")
    store = {ours.external_id_key: "driver-20240102-0001"}
    context = {"task_state_store": mock.Mock(get=store.get, set=store.__setitem__)}
    ours._hook = mock.Mock(_should_track_driver_status=True, _track_driver_via_k8s_api=False)
    with (
        mock.patch.object(SparkSubmitOperator, "get_job_status", return_value="RUNNING") as status,
        mock.patch.object(SparkSubmitOperator, "poll_until_complete") as poll,
        mock.patch.object(SparkSubmitOperator, "submit_job") as submit,
    ):
        ours.execute_resumable(context)
    status.assert_called_once_with(ours, "driver-20240102-0001", context)
    poll.assert_called_once_with(ours, "driver-20240102-0001", context)
    submit.assert_not_called()


def test_importing_it_imports_nothing_heavy():
    code = (
        "import airflow.sdk; from tests.heavy_modules import loaded; before = loaded();"
        "import airflow_iceberg.operators.lazy_spark_submit, airflow_iceberg.operators;"
        "print(sorted(set(loaded()) - set(before)))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO, timeout=300
    )
    assert completed.stdout.strip().splitlines()[-1] == "[]"
    assert set(loaded(HEAVY)) >= {"airflow.providers.apache.spark.operators"}  # this process did import it

"""spark_master reads a ``spark`` connection's master and deploy mode exactly as the provider's hook does."""

from __future__ import annotations

import json

import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_iceberg.operators.spark_master import SparkMaster, spark_master

CONNECTIONS = {
    "form_local": {"conn_type": "spark", "host": "local[2]"},
    "form_url_with_port": {"conn_type": "spark", "host": "spark://master", "port": 7077},
    "form_k8s_url": {"conn_type": "spark", "host": "k8s://https://kube:6443"},
    "host_and_port": {"conn_type": "spark", "host": "master", "port": 7077},
    "yarn": {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster", "queue": "etl"}},
    "uri_scheme": {"conn_type": "spark", "host": "", "port": 7077},
    "mesos_type": {"conn_type": "mesos", "host": "zk", "port": 5050},
    "client_extra": {"conn_type": "spark", "host": "local", "extra": {"deploy-mode": "client"}},
}


@pytest.mark.parametrize("deploy_mode", [None, "client", "cluster"])
@pytest.mark.parametrize("name", [*CONNECTIONS, "missing"])
def test_the_master_and_deploy_mode_are_the_hooks(name, deploy_mode, monkeypatch):
    for conn_id, connection in CONNECTIONS.items():
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection))
    resolved = SparkSubmitHook(conn_id=name, deploy_mode=deploy_mode)._connection
    assert spark_master(name, deploy_mode) == SparkMaster(resolved["master"], resolved["deploy_mode"])

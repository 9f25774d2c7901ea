"""The Spark master and deploy mode a ``spark`` connection gives, without the provider's hook.

The checks every task makes before it runs (is the driver on the cluster? which secrets may
travel?) need only these two values. The provider's ``SparkSubmitHook`` resolves them in its
constructor, but importing its module imports the Kubernetes client (about 0.5 s) and
constructing it may write a keytab file: a pyiceberg ref step or a Spark Connect task, which
never runs spark-submit, should pay neither. This reads them the way the hook's
``_resolve_connection`` does (``tests/unit/test_spark_master.py`` compares the two on every
connection shape), and a task that runs spark-submit still builds the provider's hook for it.
"""

from __future__ import annotations

from typing import NamedTuple

from airflow.providers.common.compat.sdk import AirflowException, BaseHook


class SparkMaster(NamedTuple):
    master: str
    deploy_mode: str | None


def spark_master(conn_id: str, deploy_mode: str | None = None) -> SparkMaster:
    """``conn_id``'s master and deploy mode (the operator's ``deploy_mode`` wins), as the hook has them.

    A connection that cannot be loaded gives the provider's fallback: ``yarn``, no deploy mode.
    """
    try:
        connection = BaseHook.get_connection(conn_id)
    except AirflowException:
        return SparkMaster("yarn", None)
    host, port = connection.host, connection.port
    if connection.conn_type == "spark" and host and ("://" in host or not port):
        master = host  # a master URL typed into Host (the form's way)
    else:
        master = f"{connection.conn_type}://{host or ''}"  # a URI's scheme became the type
    if port:
        master = f"{master}:{port}"
    return SparkMaster(master, deploy_mode or connection.extra_dejson.get("deploy-mode"))

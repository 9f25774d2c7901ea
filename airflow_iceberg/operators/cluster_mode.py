"""Cluster deploy mode: what runs there, and the task's result read back from the catalog.

With ``deploy_mode="cluster"`` (YARN, Kubernetes) spark-submit starts the driver on the cluster,
so nothing the driver writes to its local disk comes back to the Airflow worker. The job is
told to write no result file at all (a path of the worker's means nothing on a cluster node,
and on a node that happens to share the worker's disk it would be another task's business).
Instead the operator finds the job's commit in the catalog by its commit id, with pyiceberg
(:mod:`airflow_iceberg.catalog.commit_lookup`), and builds the same XCom from it.

That works for every action whose outcome is one tagged commit: the writes, MERGE and DELETE,
and a read that copies into a sink table (its sink commit also names the snapshot it copied).
Actions whose result is something the catalog does not keep (rows read, files rewritten, an
audit's measurements, a publish or tag decided against the branch's state at that moment) are
refused in cluster mode before anything is submitted, as are catalogs pyiceberg cannot read and
per-partition asset events (their keys come from the job's manifest read).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_iceberg.catalog.pyiceberg_tables import PYICEBERG_KINDS, pyiceberg_properties
from airflow_iceberg.catalog.transient_errors import is_transient_error
from airflow_iceberg.exceptions import InvalidCatalogConfigError
from airflow_iceberg.jobs.secret_mounts import mount_path
from airflow_iceberg.jobs.spec.identifiers import split_identifier
from airflow_iceberg.jobs.spec.reads import ReadSpec
from airflow_iceberg.jobs.spec.request import SOURCE_SNAPSHOT_PROPERTY
from airflow_iceberg.jobs.spec.row_changes import DeleteSpec, MergeSpec
from airflow_iceberg.jobs.spec.writes import WriteSpec

if TYPE_CHECKING:
    from airflow_iceberg.catalog.config import CatalogConfig
    from airflow_iceberg.jobs.spec.action import ActionSpec

#: The actions a cluster-mode task can run: each makes one commit tagged with the task's commit id.
CLUSTER_MODE_ACTIONS = (WriteSpec, MergeSpec, DeleteSpec)
#: The task state store key holding the commit id the stored Spark job id was submitted for.
SUBMITTED_FOR_KEY = "airflow_iceberg_commit_id"
#: The task state store key holding the clear generation a non-idempotent task's stored commit id
#: belongs to (``idempotent=False``: every try has a new commit id, but a retry keeps its job's).
GENERATION_KEY = "airflow_iceberg_generation"
#: How often a catalog read that failed for a transient reason (a timeout, a 503) is tried.
CATALOG_READ_TRIES = 3
#: The Spark connection extra the apache-spark provider polls YARN's ResourceManager at.
RM_WEBAPP_ADDRESS_KEY = "yarn_resourcemanager_webapp_address"
#: The name the catalog secrets file has in a YARN application's containers (``--files path#name``).
YARN_SECRET_FILE = "airflow-iceberg-secret-conf.json"
#: The Spark setting that would keep a YARN application's staging directory, secrets file included.
PRESERVE_STAGING_KEY = "spark.yarn.preserve.staging.files"


def cluster_mode_refusal(
    spec: ActionSpec, configs: Mapping[str, CatalogConfig], partition_events: bool
) -> str | None:
    """Why this task cannot run with its driver on the cluster, or None when it can."""
    if isinstance(spec, ReadSpec):
        if refused := _read_refusal(spec):
            return refused
    elif not isinstance(spec, CLUSTER_MODE_ACTIONS):
        return (
            f"{type(spec).__name__.removesuffix('Spec').lower()} tasks cannot run in cluster deploy "
            "mode: their result (rows read, files rewritten, measurements) stays with the driver on "
            "the cluster, and only writes, MERGE, DELETE and a read into a sink table can be read "
            "back from the catalog; use client deploy mode for them (docs/cluster.md)"
        )
    config = configs[catalog_of(written_table(spec))]
    if config.kind not in PYICEBERG_KINDS:
        return (
            f"a {config.kind} catalog cannot run in cluster deploy mode: the task's result is read "
            f"back from the catalog with pyiceberg, which reads {', '.join(PYICEBERG_KINDS)} "
            "catalogs only; use client deploy mode (docs/cluster.md)"
        )
    try:  # what pyiceberg cannot read within a kind (a JDBC catalog on MySQL ...), known without a connection
        pyiceberg_properties(config)
    except InvalidCatalogConfigError as error:
        return (
            f"this {config.kind} catalog cannot run in cluster deploy mode: the task's result is read "
            f"back from the catalog with pyiceberg, and {error}; use client deploy mode (docs/cluster.md)"
        )
    if partition_events:
        return (
            "partition_events=True cannot run in cluster deploy mode: the partitions a commit "
            "changed are read by the driver, whose result stays on the cluster; use client deploy "
            "mode, or plain asset events (docs/cluster.md)"
        )
    return None


def _read_refusal(spec: ReadSpec) -> str | None:
    """A read runs in cluster mode only as a copy into a table: the sink commit is what is read back."""
    if spec.sink_table and not (spec.is_stream or spec.start_snapshot_id is not None):
        return None
    return (
        "a read runs in cluster deploy mode only as a batch copy into a sink_table: the sink's "
        "commit is read back from the catalog, with the snapshot it copied; rows, files, "
        "incremental ranges and streams stay with the driver on the cluster; use client deploy "
        "mode (docs/cluster.md)"
    )


def written_table(spec: ActionSpec) -> str:
    """The table whose commit a cluster-mode task's result is: a read's sink, or the task's table."""
    return str(spec.sink_table) if isinstance(spec, ReadSpec) else spec.table


def catalog_of(table: str) -> str:
    """The catalog part of a qualified table name."""
    return split_identifier(table)[0]


def secret_shipping_refusal(master: str, conf: dict[str, Any] | None) -> str | None:
    """Why the catalog's secrets cannot reach a driver on the cluster of ``master``, or None when they can.

    On YARN they travel as the keytab and ``--files`` do: spark-submit copies the file into the
    application's staging directory (``.sparkStaging/<application id>``, readable by the
    submitting user only), the NodeManager localises it into the application's containers, and
    Spark deletes the staging directory when the application ends. Nowhere else is there such a
    private channel from the worker to the driver, so elsewhere the cluster must hold them.
    """
    if "yarn" not in master:
        return (
            "the catalog's secrets reach a driver on the cluster only on YARN (in the application's "
            "private staging directory); on Kubernetes keep them in a Kubernetes secret that the "
            "connection names (kubernetes_credentials) and leave them out of the connection, or use "
            "client deploy mode (docs/cluster.md)"
        )
    if str((conf or {}).get(PRESERVE_STAGING_KEY, "")).strip().lower() == "true":
        return (
            f"{PRESERVE_STAGING_KEY}=true would keep the catalog's secrets file in the application's "
            "staging directory after it ends; leave it unset for tasks whose catalog has secrets"
        )
    return None


def kubernetes_secret_mounts(configs: Iterable[CatalogConfig]) -> dict[str, tuple[str, str]]:
    """Catalog name -> (its ``kubernetes_credentials`` Secret, the folder it is mounted at in the driver)."""
    return {
        config.catalog_name: (config.kubernetes_credentials, mount_path(config.catalog_name))
        for config in configs
        if config.kubernetes_credentials
    }


def kubernetes_mount_conf(mounts: Mapping[str, tuple[str, str]]) -> dict[str, str]:
    """The Spark settings that mount each secret into the driver pod (names and paths, no values)."""
    return {f"spark.kubernetes.driver.secrets.{secret}": path for secret, path in mounts.values()}


def ship_secret_file(files: str | None, secret_file: str) -> str:
    """``files`` (spark-submit's ``--files``) with the secrets file added under :data:`YARN_SECRET_FILE`.

    A secrets file an earlier ``execute`` of the same operator object added is replaced, not kept.
    """
    alias = f"#{YARN_SECRET_FILE}"
    kept = [entry for entry in (files or "").split(",") if entry and not entry.endswith(alias)]
    return ",".join([*kept, f"{secret_file}{alias}"])


def result_from_catalog(
    configs: Mapping[str, CatalogConfig],
    spec: ActionSpec,
    commit_id: str,
    load_table: Callable[..., Any] | None = None,
) -> dict[str, Any]:
    """The job's result, as the job would have written it, built from its commit in the catalog."""
    from airflow_iceberg.catalog.commit_lookup import committed_by

    if load_table is None:
        from airflow_iceberg.catalog.pyiceberg_tables import load_table
    if isinstance(spec, ReadSpec):  # a batch copy into a sink table (the only read cluster mode runs)
        sink_name = written_table(spec)
        sink_table = _read_with_retries(lambda: load_table(configs[catalog_of(sink_name)], sink_name))
        sink = committed_by(sink_table, commit_id, "main")
        source = sink.get("summary", {}).get(SOURCE_SNAPSHOT_PROPERTY)
        return {
            "status": "success",
            "table": spec.table,
            "selector": spec.selector,
            "snapshot_id": int(source) if source is not None else None,
            "row_count": sink.get("added_records", 0),
            "sink": {"table": sink_name, "mode": spec.sink_mode, **sink},
        }
    ref = getattr(spec, "branch", None) or "main"
    table = _read_with_retries(lambda: load_table(configs[catalog_of(spec.table)], spec.table))
    found = committed_by(table, commit_id, ref)
    if isinstance(spec, WriteSpec):
        result = {"status": "success", "table": spec.table, "mode": spec.mode, **found}
        return {**result, "branch": spec.branch} if spec.branch else result
    return {"status": "success", "table": spec.table, "branch": ref, **found}


def _read_with_retries(read: Callable[[], Any]) -> Any:
    for attempt in range(1, CATALOG_READ_TRIES + 1):
        try:
            return read()
        except Exception as error:
            if attempt == CATALOG_READ_TRIES or not is_transient_error(error):
                raise
            time.sleep(2 * attempt)
    raise AssertionError("unreachable")


def forget_another_commits_job(store: Any, commit_id: str, job_keys: tuple[str, ...]) -> bool:
    """Drop the stored Spark job of another commit id from the task state store; True if one was dropped.

    The apache-spark provider's ``durable`` execution stores the submitted job's id (a YARN
    application, a driver pod) so that a retry reconnects to it, and finding it succeeded, submits
    nothing. Airflow keeps task state across a clear (``[state_store] clear_on_success`` is off
    by default), so a cleared task, which must write again under a new commit id, would find the
    earlier run's succeeded job and submit nothing. The job is stored beside the commit id it ran
    for; a different commit id means a clear, and the stored job is not this one's. A retry keeps
    its commit id, and so its job.
    """
    if store.get(SUBMITTED_FOR_KEY) == commit_id:
        return False
    stored = [key for key in job_keys if store.get(key) is not None]
    for key in job_keys:
        store.delete(key)
    store.set(SUBMITTED_FOR_KEY, commit_id)
    return bool(stored)

"""What each commit carries, and how a retry finds the commit its earlier try already made.

Every commit is stamped, in its snapshot summary, with the user's ``snapshot-property.*`` values,
the Airflow task's identity and a commit id. That stamp is what makes retries exactly-once
(:func:`earlier_commit`) and what ties a snapshot back to the task run that made it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_iceberg.jobs.connect import is_connect
from airflow_iceberg.jobs.jvm_callbacks import JavaCallable
from airflow_iceberg.jobs.session_commit_tags import session_snapshot_properties
from airflow_iceberg.jobs.spec.request import COMMIT_ID_PROPERTY
from airflow_iceberg.jobs.spec.writes import SNAPSHOT_PROPERTY_PREFIX
from airflow_iceberg.jobs.table_state import branch_heads, find_commit, find_commit_in_branches, table_exists

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def snapshot_properties_for(
    write_options: Mapping[str, str], commit_id: str | None, commit_properties: Mapping[str, str] | None
) -> dict[str, str]:
    """The snapshot-summary entries of a write: the user's ``snapshot-property.*``, Airflow's tags, the id."""
    prefix = SNAPSHOT_PROPERTY_PREFIX
    properties = {
        key[len(prefix) :]: value for key, value in write_options.items() if key.lower().startswith(prefix)
    }
    properties.update(commit_properties or {})
    if commit_id:
        properties[COMMIT_ID_PROPERTY] = commit_id
    return properties


def write_options_for(
    write_options: Mapping[str, str],
    commit_id: str | None,
    commit_properties: Mapping[str, str] | None,
    merge_schema: bool = False,
) -> dict[str, str]:
    """The DataFrameWriterV2 options: the user's, merge-schema, and the snapshot-summary tags.

    A read's or stream's sink write passes no options of its own and gets only the tags.
    """
    prefix = SNAPSHOT_PROPERTY_PREFIX
    options = {key: value for key, value in write_options.items() if not key.lower().startswith(prefix)}
    if merge_schema:
        options["merge-schema"] = "true"
    for key, value in snapshot_properties_for(write_options, commit_id, commit_properties).items():
        options[f"{prefix}{key}"] = value
    return options


def new_commit_id() -> str:
    """A commit id no other write has: for writes that have no task identity to derive one from."""
    return uuid.uuid4().hex


def earlier_commit(
    spark: SparkSession, table: str, commit_id: str | None, ref: str = "main"
) -> dict[str, Any] | None:
    """The snapshot an earlier try of the same task committed to ``ref`` of ``table``, if there is one.

    This is what makes retries exactly-once: a try that committed and then died (killed worker,
    lost heartbeat) left its commit id in the snapshot summary, so the retry finds it and
    reports that commit instead of writing the rows a second time. A write to ``main`` searches
    main's history only (:func:`~airflow_iceberg.jobs.table_state.find_commit`): after a
    rollback, the rolled-back commit is not "found", and the task writes again.

    A branch write searches further, because its commit can leave the branch without being
    undone: once the audit passed and the branch was published (``main`` fast-forwarded to it)
    and dropped, or the branch was dropped and made again, the commit is in main's history (or
    another branch's). So after ``ref`` come ``main`` and then the other branches, by name; the
    result then says where it was found (``found_on_branch``).
    """
    if not commit_id or not table_exists(spark, table):
        return None
    branches = [ref]
    if ref != "main":
        branches += ["main", *sorted(set(branch_heads(spark, table)) - {ref, "main"})]
    found = find_commit_in_branches(spark, table, commit_id, branches)
    if found is None:
        return None
    branch, earlier = found
    where = "" if branch == ref else f", now in the history of branch {branch}"
    print(
        f"airflow-iceberg: {table} already has snapshot {earlier['snapshot_id']} committed by an "
        f"earlier try ({COMMIT_ID_PROPERTY}={commit_id}){where}; not writing again",
        flush=True,
    )
    return earlier if branch == ref else {**earlier, "found_on_branch": branch}


def with_commit_properties(
    spark: SparkSession, properties: Mapping[str, str], action: Callable[[], object]
) -> None:
    """Run ``action`` (SQL) with Iceberg snapshot-summary properties, as write options do for the writer API.

    Iceberg's documented way for SQL is ``CommitMetadata.withCommitProperties``: it keeps the
    properties in a JVM thread-local while the callable runs. PySpark pins each Python thread to
    one JVM thread, and py4j runs the callback's own JVM calls on that same thread, so the
    commit made by ``action`` sees them. A Spark Connect client has no JVM: there they are the
    session's snapshot properties while ``action`` runs
    (:func:`~airflow_iceberg.jobs.session_commit_tags.session_snapshot_properties`, Iceberg 1.11+,
    which the job checked the server runs before anything ran).
    """
    if not properties:
        action()
        return
    if is_connect(spark):
        with session_snapshot_properties(spark, properties):
            action()
        return
    from pyspark.java_gateway import ensure_callback_server_started  # py4j: absent from pyspark-client

    context = spark.sparkContext
    ensure_callback_server_started(context._gateway)
    java_properties = context._jvm.java.util.HashMap()
    for key, value in properties.items():
        java_properties.put(key, value)
    callable_ = JavaCallable(action)
    runtime_exception = context._jvm.java.lang.RuntimeException._java_lang_class
    try:
        context._jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(
            java_properties, callable_, runtime_exception
        )
    except Exception:
        if callable_.error is not None:
            raise callable_.error from None
        raise


def result_of_write(
    spark: SparkSession, table: str, mode: str, commit_id: str, ref: str = "main"
) -> dict[str, Any]:
    """Describe the snapshot this write committed to ``ref``, found by its commit id.

    When no snapshot carries the id, the write committed nothing: Iceberg skips the commit of
    an empty dynamic overwrite, for one. The result then says so (``committed: false``,
    ``snapshot_id: null``), rather than describe whatever snapshot is current, which may be an
    earlier write's or a concurrent writer's.
    """
    found = find_commit(spark, table, commit_id, ref)
    if found is None:
        return {"table": table, "mode": mode, "committed": False, "snapshot_id": None}
    return {"table": table, "mode": mode, "committed": True, **found}

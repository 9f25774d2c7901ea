"""The PySpark application every airflow-iceberg operator submits.

spark-submit runs this file on the driver, with the rest of ``airflow_iceberg.jobs`` shipped
beside it as a zip (``--py-files``). It parses its arguments with ``job_spec.parse_argv`` (the
same module the operators used to build them), applies the catalog secrets it receives through
the environment, runs one write (:mod:`.writes`), batch read (:mod:`.reads`), bounded stream
(:mod:`.streams`) or maintenance action (:mod:`.maintenance`), and writes a small JSON result
(snapshot id, operation, counts) for the operator to return as XCom.

Every function takes a SparkSession it does not own, so tests drive them against one shared
local session. ``main`` is the only place that creates (and stops) a session; the work itself is
:func:`run_job`. Nothing in this package imports Airflow.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pyspark.sql import SparkSession

from airflow_iceberg.jobs import action_specs, connect, job_spec, upkeep
from airflow_iceberg.jobs.branches import tag_snapshot
from airflow_iceberg.jobs.lineage import describe_tables, tables_of
from airflow_iceberg.jobs.maintenance import remove_orphan_files
from airflow_iceberg.jobs.merges import delete_from, merge_into
from airflow_iceberg.jobs.publish import publish_branch
from airflow_iceberg.jobs.reads import read_table
from airflow_iceberg.jobs.rollback import rollback
from airflow_iceberg.jobs.table_state import TableStateError
from airflow_iceberg.jobs.writes import write_table


def apply_secret_conf(spark: SparkSession, path: str | None) -> list[str]:
    """Set the catalog secrets from the operator's private secrets file on the session.

    The secrets never travel in argv (visible in ``ps`` and task logs) nor in any process's
    environment: the operator writes them to a file only its user can read, and only the file's
    path is an argument. They are set as session SQL configuration before any catalog is used:
    Spark creates catalogs lazily from that configuration, and session settings are not shipped
    to executors. Returns the keys set; error messages never include the values.
    """
    if not path:
        return []
    try:
        with open(path, encoding="utf-8") as handle:
            secrets = json.load(handle)
    except FileNotFoundError:
        raise job_spec.InvalidSpecError(
            f"the secrets file {path} does not exist on the driver: in cluster deploy mode the driver "
            "runs elsewhere; give it its catalog secrets by the cluster's own means"
        ) from None
    except ValueError:
        secrets = None
    if not isinstance(secrets, dict):
        raise job_spec.InvalidSpecError(f"the secrets file {path} must be a JSON object of Spark settings")
    for key, value in secrets.items():
        spark.conf.set(str(key), str(value))
    return sorted(secrets)


#: The functions of the actions that change a table's rows, and so take a commit id.
COMMITTING_ACTIONS: dict[type, Callable[..., dict[str, Any]]] = {
    job_spec.WriteSpec: write_table,
    job_spec.ReadSpec: read_table,  # its sink
    action_specs.MergeSpec: merge_into,
    action_specs.DeleteSpec: delete_from,
}
#: The functions of the actions that move refs and make no snapshot: they take the commit id to
#: recognise their earlier try by other means (ancestry, a marker tag), not by a snapshot summary.
REF_ACTIONS: dict[type, Callable[..., dict[str, Any]]] = {
    action_specs.PublishSpec: publish_branch,
    action_specs.TagSpec: tag_snapshot,
    action_specs.RollbackSpec: rollback,
}
#: The functions of the actions that take their spec alone.
OTHER_ACTIONS: dict[type, Callable[..., dict[str, Any]]] = {
    job_spec.OrphanFilesSpec: remove_orphan_files,
    action_specs.ExpireSnapshotsSpec: upkeep.expire_snapshots,
    action_specs.RewriteDataFilesSpec: upkeep.rewrite_data_files,
    action_specs.RewriteManifestsSpec: upkeep.rewrite_manifests,
    action_specs.RewritePositionDeletesSpec: upkeep.rewrite_position_deletes,
}


def run(spark: SparkSession, request: job_spec.JobRequest) -> dict[str, Any]:
    """Dispatch one parsed request to the function of its action."""
    kind = type(request.spec)
    if kind in OTHER_ACTIONS:
        return OTHER_ACTIONS[kind](spark, request.spec)
    if kind in REF_ACTIONS:
        return REF_ACTIONS[kind](spark, request.spec, request.commit_id, reuse_commit=request.reuse_commit)
    action = COMMITTING_ACTIONS[kind]
    return action(
        spark,
        request.spec,
        request.commit_id,
        request.commit_properties,  # type: ignore[arg-type]
        reuse_commit=request.reuse_commit,
    )


def describe_error(error: BaseException) -> str:
    """One line that says what went wrong, for the result file and the operator's exception.

    A Py4JJavaError's own text is only "An error occurred while calling o123.append"; the Java
    exception it carries (e.g. Iceberg's ValidationException) says what actually happened.
    """
    java = getattr(error, "java_exception", None)
    if java is None:
        return _first_line(f"{type(error).__name__}: {error}")
    text = _java_summary(java)
    root = java
    while root.getCause() is not None and not root.getCause().equals(root):
        root = root.getCause()
    if not root.equals(java):  # e.g. "Failed to connect" caused by "password authentication failed"
        text += f" (caused by {_java_summary(root)})"
    return text


def _java_summary(throwable: Any) -> str:
    message = throwable.getMessage()
    text = f"{throwable.getClass().getSimpleName()}: {message}" if message else str(throwable.toString())
    return _first_line(text)


def _first_line(text: str) -> str:
    """The message's first line, and the next one if the first ends with a colon.

    Spark 4 breaks some messages right after the colon that introduces what they are about
    ("NULL value appeared in non-nullable field: \nid"), which the first line alone would lose.
    """
    lines = [line.strip() for line in text.strip().splitlines()] or [""]
    if lines[0].endswith(":") and len(lines) > 1:
        return f"{lines[0]} {lines[1]}"
    return lines[0]


def run_job(spark: SparkSession, request: job_spec.JobRequest) -> int:
    """Run one request on a session the caller owns; report the result; return the exit code.

    Expected failures (invalid request, table in the wrong state) are reported and return 1.
    Anything else is reported too, then re-raised so spark-submit shows the full traceback.
    """
    try:
        refused = connect.unsupported_reason(request.spec) if connect.is_connect(spark) else None
        if refused:
            raise job_spec.InvalidSpecError(refused)
        apply_secret_conf(spark, request.secret_conf_file)
        result = {"status": "success", **run(spark, request)}
        result["lineage"] = describe_tables(spark, tables_of(request.spec))
    except (job_spec.InvalidSpecError, TableStateError) as error:
        message = describe_error(error)
        print(f"airflow-iceberg error: {message}", file=sys.stderr, flush=True)
        _write_result(request.result_file, {"status": "failed", "error": message})
        return 1
    except Exception as error:  # Spark's AnalysisException, Iceberg's ValidationException ...
        _write_result(request.result_file, {"status": "failed", "error": describe_error(error)})
        raise
    print("airflow-iceberg result: " + job_spec.dump_result(loggable(result)), flush=True)
    _write_result(request.result_file, result)
    return 0


def loggable(result: Mapping[str, Any]) -> dict[str, Any]:
    """The result without row data, for stdout, which spark-submit's caller logs line by line.

    Preview rows may hold personal data: they go to the result file (and so the XCom) only.
    """
    if "preview" not in result:
        return dict(result)
    return {**result, "preview": f"{len(result['preview'])} rows, in the result only"}


def _write_result(path: str | None, result: Mapping[str, Any]) -> None:
    """Write the result atomically: the operator must never read half a file."""
    if not path:
        return
    partial = f"{path}.partial"
    with open(partial, "w", encoding="utf-8") as handle:
        handle.write(job_spec.dump_result(result))
    os.replace(partial, path)


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry point: parse, get a session, run, and stop the session if we started it.

    A session that already exists (an embedding process, a test) belongs to its creator and is
    left running. The builder sets no application name: spark-submit's ``--name`` (the
    operator's templated ``name``) is what the Spark UI, History Server and YARN must show.
    """
    request = job_spec.parse_argv(sys.argv[1:] if argv is None else argv)
    owned = SparkSession.getActiveSession() is None
    spark = SparkSession.builder.getOrCreate()
    context = spark.sparkContext
    print(f"airflow-iceberg: Spark application {context.applicationId} ({context.appName})", flush=True)
    try:
        return run_job(spark, request)
    finally:
        if owned:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())

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
from airflow_iceberg.jobs.branches import publish_branch, tag_snapshot
from airflow_iceberg.jobs.lineage import describe_tables, tables_of
from airflow_iceberg.jobs.maintenance import remove_orphan_files
from airflow_iceberg.jobs.merges import delete_from, merge_into
from airflow_iceberg.jobs.reads import read_table
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
#: The functions of the actions that take their spec alone.
OTHER_ACTIONS: dict[type, Callable[..., dict[str, Any]]] = {
    job_spec.OrphanFilesSpec: remove_orphan_files,
    action_specs.PublishSpec: publish_branch,
    action_specs.TagSpec: tag_snapshot,
    action_specs.ExpireSnapshotsSpec: upkeep.expire_snapshots,
    action_specs.RewriteDataFilesSpec: upkeep.rewrite_data_files,
    action_specs.RewriteManifestsSpec: upkeep.rewrite_manifests,
    action_specs.RewritePositionDeletesSpec: upkeep.rewrite_position_deletes,
    action_specs.RollbackSpec: upkeep.rollback,
}


def run(spark: SparkSession, request: job_spec.JobRequest) -> dict[str, Any]:
    """Dispatch one parsed request to the function of its action."""
    kind = type(request.spec)
    if kind in OTHER_ACTIONS:
        return OTHER_ACTIONS[kind](spark, request.spec)
    action = COMMITTING_ACTIONS[kind]
    return action(
        spark,
        request.spec,
        request.commit_id,
        request.commit_properties,  # type: ignore[arg-type]
        reuse_commit=request.reuse_commit,
    )


#: Spark Connect error classes that mean the server no longer has the task's session.
SESSION_LOST = (
    "INVALID_HANDLE.SESSION_NOT_FOUND",
    "INVALID_HANDLE.SESSION_CLOSED",
    "INVALID_HANDLE.SESSION_CHANGED",
    "INVALID_HANDLE.OPERATION_ABANDONED",
)


def describe_error(error: BaseException) -> str:
    """One line that says what went wrong, for the result file and the operator's exception.

    A Py4JJavaError's own text is only "An error occurred while calling o123.append"; the Java
    exception it carries (e.g. Iceberg's ValidationException) says what actually happened. A
    Spark Connect error carries the server's chain of causes as text: its root is named too
    ("Failed to close current writer" caused by S3's 403). A session the server lost (a restart,
    a release) gets a sentence that says so, and what to do.
    """
    java = getattr(error, "java_exception", None)
    if java is None:
        return session_lost(error) or _with_connect_cause(error)
    text = _java_summary(java)
    root = java
    while root.getCause() is not None and not root.getCause().equals(root):
        root = root.getCause()
    if not root.equals(java):  # e.g. "Failed to connect" caused by "password authentication failed"
        text += f" (caused by {_java_summary(root)})"
    return text


def session_lost(error: BaseException) -> str | None:
    """What to tell the user when a Spark Connect error says the task's session is gone, else None.

    The server's message names the session's id, which grants access to it: it is left out.
    """
    condition = _error_condition(error)
    if condition == "RESPONSE_ALREADY_RECEIVED":  # the client's word for a reattach that found nothing
        condition = str((_message_parameters(error) or {}).get("error_type", condition))
    if condition not in SESSION_LOST:
        return None
    return (
        f"the Spark Connect server no longer has this task's session ({condition}): it restarted, or "
        "the session was released or expired, while the task ran. What the job had not committed "
        "is dropped with it. Retrying is safe: the retry waits until no earlier try can commit, then "
        "finds a commit that did land by its commit id and writes only if there is none"
    )


def _error_condition(error: BaseException) -> str | None:
    for name in ("getCondition", "getErrorClass"):  # Spark 4, Spark 3.5
        method = getattr(error, name, None)
        if callable(method):
            try:
                return method()
            except Exception:  # an error class the client does not know
                return None
    return None


def _message_parameters(error: BaseException) -> dict[str, Any] | None:
    method = getattr(error, "getMessageParameters", None)
    try:
        return method() if callable(method) else None
    except Exception:
        return None


def _with_connect_cause(error: BaseException) -> str:
    """The error's first line, and its root cause when the server sent the chain (Spark Connect)."""
    text = _first_line(f"{type(error).__name__}: {error}")
    trace_of = getattr(error, "getStackTrace", None)
    trace = trace_of() if callable(trace_of) else None
    if not isinstance(trace, str):
        return text
    causes = [line[len("Caused by: ") :] for line in trace.splitlines() if line.startswith("Caused by: ")]
    if not causes:
        return text
    name, colon, message = causes[-1].partition(": ")
    root = _first_line(f"{name.rsplit('.', 1)[-1]}: {message}" if colon else name.rsplit(".", 1)[-1])
    return text if root in text else f"{text} (caused by {root})"


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

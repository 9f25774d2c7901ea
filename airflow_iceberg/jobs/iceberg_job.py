"""The PySpark application every airflow-iceberg operator submits.

spark-submit runs this file on the driver, with the rest of ``airflow_iceberg.jobs`` shipped
beside it as a zip (``--py-files``). It parses its arguments with ``spec.request.parse_argv`` (the
same contract package the operators used to build them), gives the SparkContext it creates the catalog
secrets it reads from the operator's private file, runs one write (:mod:`.writes`), batch read
(:mod:`.reads`), bounded stream (:mod:`.streams`) or maintenance action (:mod:`.maintenance`),
and writes a small JSON result (snapshot id, operation, counts) for the operator to return as
XCom.

Every function takes a SparkSession it does not own, so tests drive them against one shared
local session. ``main`` is the only place that creates (and stops) a session; the work itself is
:func:`run_job`. Nothing in this package imports Airflow.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pyspark.sql import SparkSession

from airflow_iceberg.jobs import connect, upkeep
from airflow_iceberg.jobs.audits import audit_table
from airflow_iceberg.jobs.branches import tag_snapshot
from airflow_iceberg.jobs.error_text import describe_error, session_lost_under
from airflow_iceberg.jobs.lineage import describe_lineage
from airflow_iceberg.jobs.maintenance import remove_orphan_files
from airflow_iceberg.jobs.merges import delete_from, merge_into
from airflow_iceberg.jobs.partitions import add_partition_keys
from airflow_iceberg.jobs.publish import publish_branch
from airflow_iceberg.jobs.reads import read_table
from airflow_iceberg.jobs.rollback import rollback
from airflow_iceberg.jobs.secret_mounts import REDACTION_KEY, read_secret_mounts, redacting
from airflow_iceberg.jobs.session_commit_tags import require_session_tags
from airflow_iceberg.jobs.spec.audits import AuditSpec
from airflow_iceberg.jobs.spec.branches import PublishSpec, RollbackSpec, TagSpec
from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.reads import ReadSpec
from airflow_iceberg.jobs.spec.request import JobRequest, dump_result, parse_argv
from airflow_iceberg.jobs.spec.row_changes import DeleteSpec, MergeSpec
from airflow_iceberg.jobs.spec.upkeep import (
    ExpireSnapshotsSpec,
    OrphanFilesSpec,
    RewriteDataFilesSpec,
    RewriteManifestsSpec,
    RewritePositionDeletesSpec,
)
from airflow_iceberg.jobs.spec.writes import WriteSpec
from airflow_iceberg.jobs.table_state import TableStateError
from airflow_iceberg.jobs.writes import write_table


def read_secret_conf(path: str | None) -> dict[str, str]:
    """The catalog secrets in the operator's private secrets file (``{}`` without one).

    The secrets never travel in argv (visible in ``ps`` and task logs) nor in any process's
    environment: the operator writes them to a file only its user can read, and only the file's
    path is an argument. Error messages never include the values.
    """
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            secrets = json.load(handle)
    except FileNotFoundError:
        raise InvalidSpecError(
            f"the secrets file {path} does not exist on the driver: in cluster deploy mode the driver "
            "runs elsewhere; give it its catalog secrets by the cluster's own means"
        ) from None
    except ValueError:
        secrets = None
    if not isinstance(secrets, dict):
        raise InvalidSpecError(f"the secrets file {path} must be a JSON object of Spark settings")
    return {str(key): str(value) for key, value in secrets.items()}


def read_secrets(request: JobRequest) -> dict[str, str]:
    """Every catalog secret of the request: its secrets file's, and the cluster's mounted secrets'."""
    return {**read_secret_conf(request.secret_conf_file), **read_secret_mounts(request.secret_mounts)}


def apply_secret_conf(
    spark: SparkSession, path: str | None, mounts: Mapping[str, str] | None = None
) -> list[str]:
    """Set the catalog secrets of the secrets file (and mounted secrets) on a session the job did not create.

    :func:`main` gives them to the SparkContext it creates instead (see there); this is for a
    session that already exists (an embedding process, a test). Session settings are not shipped
    to executors, and Spark creates catalogs lazily from them, but Spark copies them into every
    job's properties, which its event log writes out unredacted. Returns the keys set.
    """
    secrets = {**read_secret_conf(path), **read_secret_mounts(mounts or {})}
    for key, value in secrets.items():
        spark.conf.set(key, value)
    return sorted(secrets)


#: The functions of the actions that change a table's rows, and so take a commit id.
COMMITTING_ACTIONS: dict[type, Callable[..., dict[str, Any]]] = {
    WriteSpec: write_table,
    ReadSpec: read_table,  # its sink
    MergeSpec: merge_into,
    DeleteSpec: delete_from,
}
#: The functions of the actions that move refs and make no snapshot: they take the commit id to
#: recognise their earlier try by other means (ancestry, a marker tag), not by a snapshot summary.
REF_ACTIONS: dict[type, Callable[..., dict[str, Any]]] = {
    PublishSpec: publish_branch,
    TagSpec: tag_snapshot,
    RollbackSpec: rollback,
}
#: The functions of the actions that take their spec alone.
OTHER_ACTIONS: dict[type, Callable[..., dict[str, Any]]] = {
    OrphanFilesSpec: remove_orphan_files,
    ExpireSnapshotsSpec: upkeep.expire_snapshots,
    RewriteDataFilesSpec: upkeep.rewrite_data_files,
    RewriteManifestsSpec: upkeep.rewrite_manifests,
    RewritePositionDeletesSpec: upkeep.rewrite_position_deletes,
    AuditSpec: audit_table,  # reads only: no commit, no ref moved
}


def run(spark: SparkSession, request: JobRequest) -> dict[str, Any]:
    """Dispatch one parsed request to the function of its action."""
    kind = type(request.spec)
    if kind in OTHER_ACTIONS:
        return OTHER_ACTIONS[kind](spark, request.spec)
    if kind in REF_ACTIONS:
        return REF_ACTIONS[kind](spark, request.spec, request.commit_id, reuse_commit=request.reuse_commit)
    action = COMMITTING_ACTIONS[kind]
    result = action(
        spark,
        request.spec,
        request.commit_id,
        request.commit_properties,  # type: ignore[arg-type]
        reuse_commit=request.reuse_commit,
    )
    if request.partition_keys:  # a read's own snapshot is what it read; its sink's is its commit
        add_partition_keys(spark, [result.get("sink") if kind is ReadSpec else result])
    return result


def run_job(spark: SparkSession, request: JobRequest) -> int:
    """Run one request on a session the caller owns; report the result; return the exit code.

    Expected failures (invalid request, table in the wrong state) are reported and return 1.
    Anything else is reported too, then re-raised so spark-submit shows the full traceback.
    """
    try:
        refused = connect.unsupported_reason(request.spec) if connect.is_connect(spark) else None
        if refused:
            raise InvalidSpecError(refused)
        apply_secret_conf(spark, request.secret_conf_file, request.secret_mounts)
        require_session_tags(spark, request.spec)  # a SQL commit over Connect: is the server new enough?
        result = {"status": "success", **run(spark, request)}
        result["lineage"] = describe_lineage(spark, request.spec)
    except (InvalidSpecError, TableStateError) as error:
        return report_failure(request, describe_error(error))
    except Exception as error:  # Spark's AnalysisException, Iceberg's ValidationException ...
        message = session_lost_under(spark, error) or describe_error(error)
        _write_result(request.result_file, {"status": "failed", "error": message})
        raise
    print("airflow-iceberg result: " + dump_result(loggable(result)), flush=True)
    _write_result(request.result_file, result)
    return 0


def report_failure(request: JobRequest, message: str) -> int:
    """Report an expected failure on stderr and in the result file; return the exit code, 1."""
    print(f"airflow-iceberg error: {message}", file=sys.stderr, flush=True)
    _write_result(request.result_file, {"status": "failed", "error": message})
    return 1


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
        handle.write(dump_result(result))
    os.replace(partial, path)


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry point: parse, get a session, run, and stop the session if we started it.

    A session that already exists (an embedding process, a test) belongs to its creator and is
    left running. The builder sets no application name: spark-submit's ``--name`` (the
    operator's templated ``name``) is what the Spark UI, History Server and YARN must show.

    The catalog secrets go to the builder, so they are in the new SparkContext's SparkConf: Spark
    redacts a setting in its event log and UI only when it is in SparkConf and
    ``spark.redaction.regex`` (which the operator extends to every secret key) matches it. Set on
    the session alone, Spark would copy them unredacted into every job's properties.
    """
    request = parse_argv(sys.argv[1:] if argv is None else argv)
    owned = SparkSession.getActiveSession() is None
    try:
        secrets = read_secrets(request) if owned else {}
    except InvalidSpecError as error:
        return report_failure(request, describe_error(error))
    builder = SparkSession.builder
    for key, value in secrets.items():
        builder = builder.config(key, value)
    if owned and request.secret_mounts:  # keys the operator could not know: redacted from here
        from pyspark import SparkConf  # spark-submit's settings, as the new context will have them

        mounted = read_secret_mounts(request.secret_mounts)
        builder = builder.config(REDACTION_KEY, redacting(SparkConf().get(REDACTION_KEY, None), mounted))
    spark = builder.getOrCreate()
    if owned:  # the secrets are in SparkConf already; a borrowed session gets them in run_job
        request = dataclasses.replace(request, secret_conf_file=None, secret_mounts={})
    context = spark.sparkContext
    print(f"airflow-iceberg: Spark application {context.applicationId} ({context.appName})", flush=True)
    try:
        return run_job(spark, request)
    finally:
        if owned:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())

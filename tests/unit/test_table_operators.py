"""Merge, delete, branch, tag and upkeep operators: exact argv, templates, validation before Spark."""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import pendulum
import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.common.compat.sdk import AirflowSkipException
from airflow.sdk import DAG, task

from airflow_iceberg.exceptions import InvalidSpecError
from airflow_iceberg.operators import (
    IcebergAppendOperator,
    IcebergAuditOperator,
    IcebergDeleteOperator,
    IcebergExpireSnapshotsOperator,
    IcebergMergeOperator,
    IcebergPublishOperator,
    IcebergRemoveOrphanFilesOperator,
    IcebergRewriteDataFilesOperator,
    IcebergRewriteManifestsOperator,
    IcebergRewritePositionDeleteFilesOperator,
    IcebergRollbackOperator,
    IcebergTagOperator,
    IcebergTimeTravelReadOperator,
)


@pytest.fixture
def catalog(iceberg_connection, spark_connection):
    return iceberg_connection(
        "wh", extra={"catalog_name": "demo", "catalog_type": "hadoop", "warehouse": "file:///wh"}
    )


class _TaskInstance:
    dag_id, task_id, run_id, map_index, try_number = "d", "t", "manual__1", -1, 1

    def xcom_pull(self, task_ids: str, key: str = "return_value"):
        return {"snapshot_id": 42}


def _job_argv(op) -> list[str]:
    """Run ``execute`` with spark-submit replaced; return the job's argv after the commit properties."""
    seen: dict = {}

    def execute(self, context):
        seen["argv"] = list(self.application_args)
        result_file = seen["argv"][seen["argv"].index("--result-file") + 1]
        # "passed": what an audit reports when its rules hold (the other operators ignore it)
        Path(result_file).write_text(json.dumps({"status": "success", "table": "demo.db.t", "passed": True}))

    with mock.patch.object(SparkSubmitOperator, "execute", execute):
        op.execute({"ti": _TaskInstance()})
    argv = seen["argv"]
    action = next(i for i, arg in enumerate(argv) if not arg.startswith("-") and argv[i - 1] not in _VALUED)
    return argv[action:]


_VALUED = {"--result-file", "--commit-id", "--commit-property"}


@pytest.mark.parametrize(
    ("op", "argv"),
    [
        (
            IcebergMergeOperator(
                task_id="t", table="db.t", source_table="db.changes", keys="id", branch="b1"
            ),
            [
                "merge",
                "--table",
                "demo.db.t",
                "--source-table",
                "demo.db.changes",
                "--key",
                "id",
                "--clause",
                '{"assignments": {}, "condition": null, "then": "update", "when": "matched"}',
                "--clause",
                '{"assignments": {}, "condition": null, "then": "insert", "when": "not_matched"}',
                "--branch",
                "b1",
            ],
        ),
        (
            IcebergDeleteOperator(task_id="t", table="db.t", condition="id = 1"),
            ["delete", "--table", "demo.db.t", "--condition", "id = 1"],
        ),
        (
            IcebergDeleteOperator(
                task_id="t", table="db.t", condition="id = 1", branch="b", reset_branch=True
            ),
            ["delete", "--table", "demo.db.t", "--condition", "id = 1", "--branch", "b", "--reset-branch"],
        ),
        (
            IcebergAppendOperator(
                task_id="t", table="db.t", source_query="SELECT 1 AS id", branch="audit", reset_branch=True
            ),
            [
                "write",
                "--table",
                "demo.db.t",
                "--mode",
                "append",
                "--source-query",
                "SELECT 1 AS id",
                "--branch",
                "audit",
                "--reset-branch",
            ],
        ),
        (
            IcebergAppendOperator(task_id="t", table="db.t", source_query="SELECT 1 AS id", branch="audit"),
            [
                "write",
                "--table",
                "demo.db.t",
                "--mode",
                "append",
                "--source-query",
                "SELECT 1 AS id",
                "--branch",
                "audit",
            ],
        ),
        (
            IcebergPublishOperator(task_id="t", table="db.t", branch="audit", drop_branch=True),
            [
                "publish",
                "--table",
                "demo.db.t",
                "--branch",
                "audit",
                "--target-branch",
                "main",
                "--drop-branch",
            ],
        ),
        (
            IcebergPublishOperator(
                task_id="t",
                table="db.t",
                branch="audit",
                target_branch="release",
                expected_snapshot_id="42",  # what a rendered XCom template gives
                create_target_branch=True,
            ),
            [
                "publish",
                "--table",
                "demo.db.t",
                "--branch",
                "audit",
                "--target-branch",
                "release",
                "--expected-snapshot-id",
                "42",
                "--create-target-branch",
            ],
        ),
        (
            IcebergTagOperator(task_id="t", table="db.t", tag="eod", snapshot_id="7", retain_days=3),
            ["tag", "--table", "demo.db.t", "--tag", "eod", "--snapshot-id", "7", "--retain-days", "3"],
        ),
        (
            IcebergExpireSnapshotsOperator(
                task_id="t", table="db.t", older_than="2024-01-01", retain_last="5"
            ),
            [
                "expire-snapshots",
                "--table",
                "demo.db.t",
                "--older-than",
                "1704067200000",
                "--retain-last",
                "5",
            ],
        ),
        (
            IcebergRewriteDataFilesOperator(
                task_id="t", table="db.t", where="day = '2024-01-01'", options={"min-input-files": 2}
            ),
            [
                "rewrite-data-files",
                "--table",
                "demo.db.t",
                "--strategy",
                "binpack",
                "--where",
                "day = '2024-01-01'",
                "--option",
                "min-input-files=2",
            ],
        ),
        (
            IcebergRewriteManifestsOperator(task_id="t", table="db.t"),
            ["rewrite-manifests", "--table", "demo.db.t"],
        ),
        (
            IcebergRewriteManifestsOperator(
                task_id="t", table="db.t", wait_for_branches=["audit_*", "stage"]
            ),
            [
                "rewrite-manifests",
                "--table",
                "demo.db.t",
                "--wait-for-branch",
                "audit_*",
                "--wait-for-branch",
                "stage",
            ],
        ),
        (
            IcebergRewriteDataFilesOperator(task_id="t", table="db.t", wait_for_branches="audit_*"),
            [
                "rewrite-data-files",
                "--table",
                "demo.db.t",
                "--strategy",
                "binpack",
                "--wait-for-branch",
                "audit_*",
            ],
        ),
        (
            IcebergRewriteDataFilesOperator(
                task_id="t", table="db.t", branch="audit_20240102", options={"min-input-files": 2}
            ),
            [
                "rewrite-data-files",
                "--table",
                "demo.db.t",
                "--strategy",
                "binpack",
                "--branch",
                "audit_20240102",
                "--option",
                "min-input-files=2",
            ],
        ),
        (
            IcebergRewritePositionDeleteFilesOperator(
                task_id="t", table="db.t", options={"rewrite-all": True}
            ),
            ["rewrite-position-deletes", "--table", "demo.db.t", "--option", "rewrite-all=true"],
        ),
        (
            IcebergRollbackOperator(task_id="t", table="db.t", snapshot_id=9),
            ["rollback", "--table", "demo.db.t", "--snapshot-id", "9"],
        ),
        (
            IcebergRemoveOrphanFilesOperator(task_id="t", table="db.t"),  # default: report only
            ["remove-orphan-files", "--table", "demo.db.t"],
        ),
        (
            IcebergRemoveOrphanFilesOperator(
                task_id="t", table="db.t", older_than="2024-01-01", dry_run=False
            ),
            ["remove-orphan-files", "--table", "demo.db.t", "--older-than", "1704067200000", "--delete"],
        ),
        (
            IcebergAuditOperator(
                task_id="t",
                table="db.t",
                branch="audit",
                min_rows="1",  # what a rendered template gives
                max_rows=100,
                not_null=["id", "customer_id"],
                unique=["id", ["customer_id", "day"]],
                accepted_values={"status": ["open", "shipped"]},
                row_conditions={"positive": "amount > 0"},
                aggregate_conditions={"few_bad": "count_if(amount <= 0) <= 3"},
            ),
            [
                "audit",
                "--table",
                "demo.db.t",
                "--branch",
                "audit",
                "--min-rows",
                "1",
                "--max-rows",
                "100",
                "--not-null",
                "id",
                "--not-null",
                "customer_id",
                "--unique",
                '["id"]',
                "--unique",
                '["customer_id", "day"]',
                "--accepted-values",
                '["status", ["open", "shipped"]]',
                "--row-condition",
                "positive=amount > 0",
                "--aggregate-condition",
                "few_bad=count_if(amount <= 0) <= 3",
            ],
        ),
    ],
    ids=lambda value: getattr(value, "task_type", None) or "",
)
def test_exact_job_argv(catalog, op, argv):
    op.iceberg_conn_id = catalog
    assert _job_argv(op) == argv


def test_merge_and_delete_carry_the_commit_id_and_airflow_identity(catalog):
    seen: dict = {}

    def execute(self, context):
        seen["argv"] = list(self.application_args)
        Path(seen["argv"][1]).write_text(json.dumps({"status": "success"}))

    op = IcebergDeleteOperator(task_id="t", table="db.t", condition="id = 1", iceberg_conn_id=catalog)
    with mock.patch.object(SparkSubmitOperator, "execute", execute):
        op.execute({"ti": _TaskInstance()})
    argv = seen["argv"]
    assert argv[argv.index("--commit-id") + 1] == "d:t:manual__1:-1:1:"
    assert "--reuse-commit" in argv and "airflow.task-id=t" in argv


@pytest.mark.parametrize(
    ("op", "message"),
    [
        (IcebergMergeOperator(task_id="t", table="db.t", source_query="SELECT 1"), "exactly one of keys"),
        (
            IcebergMergeOperator(
                task_id="t",
                table="db.t",
                source_query="SELECT 1",
                keys=["id"],
                clauses=[{"when": "matched", "then": "update", "set": {"a": "1; DROP TABLE x"}}],
            ),
            "without ';'",
        ),
        (IcebergMergeOperator(task_id="t", table="db.t", source_query="DELETE FROM x", keys=["id"]), "query"),
        (IcebergDeleteOperator(task_id="t", table="db.t", condition="id = 1 -- all"), "SQL comments"),
        (IcebergPublishOperator(task_id="t", table="db.t", branch="main"), "nothing to publish"),
        (
            IcebergPublishOperator(task_id="t", table="db.t", branch="audit", expected_snapshot_id="None"),
            r"expected_snapshot_id must be an integer snapshot id, got 'None' \(did the upstream XCom exist",
        ),
        (IcebergRollbackOperator(task_id="t", table="db.t"), "give one of"),
        (IcebergRewriteDataFilesOperator(task_id="t", table="db.t", options="min-input-files=2"), "mapping"),
        (
            IcebergRewriteDataFilesOperator(task_id="t", table="db.t", branch="main"),
            "branch 'main' is the table",
        ),
        (
            IcebergRewriteDataFilesOperator(
                task_id="t", table="db.t", branch="a", wait_for_branches="audit_*"
            ),
            "give branch or wait_for_branches",
        ),
        # a branch template that rendered nothing must not compact main, breaking the pending publish
        (IcebergRewriteDataFilesOperator(task_id="t", table="db.t", branch=""), "branch is empty"),
        (IcebergRewriteDataFilesOperator(task_id="t", table="db.t", branch="  "), "branch is empty"),
        (IcebergExpireSnapshotsOperator(task_id="t", table="db.t", retain_last="five"), "integer"),
        (IcebergRemoveOrphanFilesOperator(task_id="t", table="db.t", older_than="2999-01-01"), "24 hours"),
        (IcebergAppendOperator(task_id="t", table="db.t", source_query="SELECT 1", branch="main"), "main"),
        # a branch template that rendered nothing must not write to main unaudited, nor audit main
        (
            IcebergAppendOperator(task_id="t", table="db.t", source_query="SELECT 1", branch=""),
            "branch is empty",
        ),
        (
            IcebergMergeOperator(task_id="t", table="db.t", source_table="db.s", keys=["id"], branch=" "),
            "branch is empty",
        ),
        (IcebergDeleteOperator(task_id="t", table="db.t", condition="id = 1", branch=""), "branch is empty"),
        (IcebergTimeTravelReadOperator(task_id="t", table="db.t", branch=""), "branch is empty"),
        (IcebergAuditOperator(task_id="t", table="db.t", branch="audit"), "an audit needs at least one rule"),
        (IcebergAuditOperator(task_id="t", table="db.t", unique="id"), "unique must be a list of keys"),
        (IcebergAuditOperator(task_id="t", table="db.t", min_rows=3, max_rows="2"), "3 is more than"),
        (IcebergAuditOperator(task_id="t", table="db.t", branch="", min_rows=1), "branch is empty"),
        (
            IcebergAuditOperator(task_id="t", table="db.t", row_conditions={"r": "1 = 1; DROP TABLE db.t"}),
            "without ';'",
        ),
        # session settings Iceberg copies into every commit's summary, or that redirect every write
        (
            IcebergAppendOperator(
                task_id="t",
                table="db.t",
                source_query="SELECT 1",
                conf={"spark.sql.iceberg.snapshot-property.airflow-iceberg.commit-id": "forged"},
            ),
            "would stamp the snapshot-summary key 'airflow-iceberg.commit-id'",
        ),
        (
            IcebergMergeOperator(
                task_id="t",
                table="db.t",
                source_table="db.s",
                keys=["id"],
                conf={"spark.sql.iceberg.snapshot-property.airflow.task-id": "other"},
            ),
            "'airflow.task-id'",
        ),
        (
            IcebergDeleteOperator(
                task_id="t", table="db.t", condition="id = 1", conf={"spark.wap.branch": "b"}
            ),
            "conf 'spark.wap.branch' redirects every write",
        ),
        (
            IcebergRewriteDataFilesOperator(task_id="t", table="db.t", conf={"spark.wap.id": "x"}),
            "conf 'spark.wap.id' redirects",
        ),
    ],
)
def test_bad_input_fails_before_spark_submit(catalog, op, message):
    op.iceberg_conn_id = catalog
    with (
        mock.patch.object(SparkSubmitOperator, "execute", side_effect=AssertionError("spark-submit ran")),
        pytest.raises(InvalidSpecError, match=message),
    ):
        op.execute({"ti": _TaskInstance()})


@pytest.mark.parametrize("rendered", [None, "None", "", "  "])
def test_a_pin_whose_template_renders_to_nothing_is_refused_before_spark_submit(catalog, rendered):
    """A missing XCom renders to None (native), "None" or "": unpinned, the branch's head would publish."""
    op = IcebergPublishOperator(
        task_id="t",
        table="db.t",
        branch="audit",
        expected_snapshot_id="{{ ti.xcom_pull(task_ids='check')['audited_snapshot_id'] }}",
        iceberg_conn_id=catalog,
    )
    op.expected_snapshot_id = rendered  # what Airflow's rendering leaves when the XCom is missing
    with (
        mock.patch.object(SparkSubmitOperator, "execute", side_effect=AssertionError("spark-submit ran")),
        pytest.raises(InvalidSpecError, match=r"expected_snapshot_id .*did the upstream XCom exist\?; "),
    ):
        op.execute({"ti": _TaskInstance()})


@pytest.mark.parametrize(
    ("selector", "template", "rendered"),
    [
        ("tag", "{{ params.tag }}", ""),
        ("tag", "{{ params.tag }}", None),
        ("snapshot_id", "{{ ti.xcom_pull(task_ids='merge', key='snapshot_id') }}", ""),
        ("snapshot_id", "{{ ti.xcom_pull(task_ids='merge', key='snapshot_id') }}", None),
    ],
)
def test_an_audit_selector_that_renders_to_nothing_is_refused_not_read_as_main(
    catalog, selector, template, rendered
):
    """With no tag and no snapshot_id the audit checks main: a blank render would pass main's data off
    as the tag's (or the snapshot's), and report main's snapshot as the audited one."""
    op = IcebergAuditOperator(
        task_id="t", table="db.t", min_rows=1, iceberg_conn_id=catalog, **{selector: template}
    )
    setattr(op, selector, rendered)  # what rendering leaves: "" (a blank param), None (native rendering)
    with (
        mock.patch.object(SparkSubmitOperator, "execute", side_effect=AssertionError("spark-submit ran")),
        pytest.raises(InvalidSpecError, match=rf"{selector} is empty .*leave {selector} unset to audit main"),
    ):
        op.execute({"ti": _TaskInstance()})


def _run_with_result(op, result: dict):
    """Run ``execute`` with spark-submit replaced by a job that reports ``result``."""

    def execute(self, context):
        argv = list(self.application_args)
        Path(argv[argv.index("--result-file") + 1]).write_text(json.dumps({"status": "success", **result}))

    with mock.patch.object(SparkSubmitOperator, "execute", execute):
        return op.execute({"ti": _TaskInstance()})


@pytest.mark.parametrize(
    "op",
    [
        IcebergRewriteDataFilesOperator(task_id="t", table="db.t", wait_for_branches="audit_*"),
        IcebergRewritePositionDeleteFilesOperator(task_id="t", table="db.t", wait_for_branches="audit_*"),
        IcebergRewriteManifestsOperator(task_id="t", table="db.t", wait_for_branches="audit_*"),
    ],
    ids=lambda op: op.task_type,
)
def test_a_rewrite_that_waited_for_a_branch_is_skipped_with_the_jobs_reason(catalog, op):
    op.iceberg_conn_id = catalog
    waited = {"table": "demo.db.t", "skipped": True, "reason": "branch audit_1 (snapshot 7) is waiting"}
    with pytest.raises(AirflowSkipException, match=r"branch audit_1 \(snapshot 7\) is waiting"):
        _run_with_result(op, waited)
    done = {"table": "demo.db.t", "rewritten_data_files_count": 2, "snapshot_id": 8}
    assert _run_with_result(op, done)["snapshot_id"] == 8


@pytest.mark.parametrize(
    "runtime",
    [{"iceberg_version": "1.10.2"}, {"runtime_jar": "/jars/iceberg-spark-runtime-3.5_2.12-1.10.2.jar"}],
    ids=["iceberg_version", "runtime_jar"],
)
def test_a_branch_compaction_on_a_runtime_before_1_11_is_refused_before_spark_submit(
    iceberg_connection, spark_connection, runtime
):
    extra = {"catalog_name": "demo", "catalog_type": "hadoop", "warehouse": "file:///wh", **runtime}
    op = IcebergRewriteDataFilesOperator(
        task_id="t", table="db.t", branch="audit_1", iceberg_conn_id=iceberg_connection("old", extra=extra)
    )
    refusal = r"needs Iceberg 1.11 or later, and connection 'old' loads Iceberg 1.10.2 .*for Spark 3.5\)"
    with (
        mock.patch.object(SparkSubmitOperator, "execute", side_effect=AssertionError("spark-submit ran")),
        pytest.raises(InvalidSpecError, match=refusal),
    ):
        op.execute({"ti": _TaskInstance()})
    # The same connection compacts main; a runtime jar named otherwise is left to the job to ask.
    op.branch = None
    assert _job_argv(op)[:3] == ["rewrite-data-files", "--table", "demo.db.t"]
    jar = {**extra, "runtime_jar": "/jars/iceberg.jar"}
    op = IcebergRewriteDataFilesOperator(
        task_id="t", table="db.t", branch="audit_1", iceberg_conn_id=iceberg_connection("jar", extra=jar)
    )
    assert "--branch" in _job_argv(op)


def test_template_fields():
    assert {"source_query", "source_table", "keys", "on", "clauses", "branch"} <= set(
        IcebergMergeOperator.template_fields
    )
    assert {"condition", "branch"} <= set(IcebergDeleteOperator.template_fields)
    assert "branch" in IcebergAppendOperator.template_fields
    assert {"branch", "target_branch", "expected_snapshot_id"} <= set(IcebergPublishOperator.template_fields)
    assert {"tag", "snapshot_id"} <= set(IcebergTagOperator.template_fields)
    assert {"older_than", "retain_last"} <= set(IcebergExpireSnapshotsOperator.template_fields)
    assert {"where", "options", "sort_order", "wait_for_branches", "branch"} <= set(
        IcebergRewriteDataFilesOperator.template_fields
    )
    assert "wait_for_branches" in IcebergRewriteManifestsOperator.template_fields
    assert {"where", "options", "wait_for_branches"} <= set(
        IcebergRewritePositionDeleteFilesOperator.template_fields
    )
    assert {"snapshot_id", "timestamp"} <= set(IcebergRollbackOperator.template_fields)


def test_templated_lists_and_dicts_are_stored_unchanged_and_normalised_after_rendering(catalog):
    with DAG(
        "d",
        schedule=None,
        start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
        render_template_as_native_obj=True,
    ):

        @task
        def clauses():
            return [{"when": "matched", "then": "delete"}]

        upstream = clauses()
        merge = IcebergMergeOperator(
            task_id="merge",
            table="db.t",
            source_table="db.{{ params.src }}",
            keys="{{ params.key_columns }}",
            clauses=upstream,
            branch="audit_{{ ds_nodash }}",
            params={"src": "changes", "key_columns": ["id", "day"]},
        )
        rewrite = IcebergRewriteDataFilesOperator(
            task_id="rewrite",
            table="db.t",
            options="{{ params.opts }}",
            where="day = DATE'{{ macros.ds_add(ds, -1) }}'",
            params={"opts": {"min-input-files": 2}},
        )
    assert merge.clauses is upstream and merge.keys == "{{ params.key_columns }}"  # unchanged until rendered
    assert rewrite.options == "{{ params.opts }}"

    merge.clauses = [{"when": "matched", "then": "delete"}]  # what the XComArg resolves to at run time
    context = {
        "ti": _TaskInstance(),
        "ds": "2024-01-02",
        "ds_nodash": "20240102",
        "macros": __import__("airflow.sdk").sdk.macros,
    }
    params = {"src": "changes", "key_columns": ["id", "day"]}
    merge.render_template_fields(context={**context, "params": params})
    rewrite.render_template_fields(context={**context, "params": {"opts": {"min-input-files": 2}}})

    spec = merge.build_spec().validated()
    assert (spec.source.table, spec.keys, spec.branch) == ("db.changes", ("id", "day"), "audit_20240102")
    assert [clause.sql() for clause in spec.clauses] == ["WHEN MATCHED THEN DELETE"]
    rewrite_spec = rewrite.build_spec().validated()
    assert (rewrite_spec.options, rewrite_spec.where) == ({"min-input-files": "2"}, "day = DATE'2024-01-01'")


def test_connections_loading_different_runtimes_are_refused_for_spark_submit_not_over_connect(
    iceberg_connection, spark_connection, monkeypatch
):
    """The old form's stored 1.10.2 beside a connection following 3.5's 1.12.0: spark-submit would get
    both coordinates and Ivy keep one; over Spark Connect neither is loaded, the server's runs."""
    from airflow_iceberg.exceptions import CatalogSettingsConflictError
    from airflow_iceberg.operators.base import IcebergSparkSubmitOperator

    old = {"catalog_name": "old", "catalog_type": "hadoop", "warehouse": "file:///a"}
    old["iceberg_version"] = "1.10.2"
    new = {"catalog_name": "new", "catalog_type": "hadoop", "warehouse": "file:///b"}
    op = IcebergRewriteDataFilesOperator(
        task_id="t",
        table="db.t",
        iceberg_conn_id=iceberg_connection("old", extra=old),
        extra_iceberg_conn_ids=[iceberg_connection("new", extra=new)],
    )
    with (
        mock.patch.object(SparkSubmitOperator, "execute", side_effect=AssertionError("spark-submit ran")),
        pytest.raises(CatalogSettingsConflictError, match=r"old.db.t: the catalogs load different Iceberg"),
    ):
        op.execute({"ti": _TaskInstance()})

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark_connect", "host": "h"}))

    class ReachedTheServer(BaseException):
        """Raised where the task would open its Connect session: past every refusal."""

    def run_over_connect(self, *args):
        raise ReachedTheServer

    monkeypatch.setattr(IcebergSparkSubmitOperator, "_run_over_connect", run_over_connect)
    op = IcebergRewriteDataFilesOperator(
        task_id="t", table="db.t", iceberg_conn_id="old", extra_iceberg_conn_ids=["new"]
    )
    with pytest.raises(ReachedTheServer):
        op.execute({"ti": _TaskInstance()})


class _RecordingTaskInstance(_TaskInstance):
    def __init__(self) -> None:
        self.pushed: dict = {}

    def xcom_push(self, key: str, value) -> None:
        self.pushed[key] = value


def _run_audit(op, report: dict, ti: _RecordingTaskInstance):
    """Run the audit operator with spark-submit replaced by a job that reports ``report``."""

    def execute(self, context):
        argv = list(self.application_args)
        Path(argv[argv.index("--result-file") + 1]).write_text(json.dumps({"status": "success", **report}))

    with mock.patch.object(SparkSubmitOperator, "execute", execute):
        return op.execute({"ti": ti})


def test_a_failed_audit_pushes_its_report_then_fails_without_retry_listing_every_broken_rule(catalog):
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_iceberg.operators.audit import IcebergAuditFailedError

    report = {
        "table": "demo.db.t",
        "ref": "audit",
        "snapshot_id": 7,
        "passed": False,
        "rules": [{"rule": "min_rows"}, {"rule": "not_null"}, {"rule": "unique"}],
        "failures": ["not_null customer_id: 1 rows are NULL", "unique (id): 2 rows repeat a key"],
    }
    op = IcebergAuditOperator(task_id="t", table="db.t", branch="audit", not_null=["customer_id"], retries=3)
    op.iceberg_conn_id = catalog
    ti = _RecordingTaskInstance()
    with pytest.raises(IcebergAuditFailedError) as failed:
        _run_audit(op, report, ti)
    assert isinstance(failed.value, AirflowFailException)  # Airflow fails it at once, retries or not
    message = str(failed.value)
    assert "audit of demo.db.t at snapshot 7 (audit) failed 2 of 3 rules" in message
    assert "  - not_null customer_id: 1 rows are NULL\n  - unique (id): 2 rows repeat a key" in message
    assert ti.pushed["return_value"] == {"status": "success", **report}  # pushed before it failed


def test_a_passed_audit_returns_its_report_and_pushes_nothing_itself(catalog):
    op = IcebergAuditOperator(task_id="t", table="db.t", min_rows=1)
    op.iceberg_conn_id = catalog
    ti = _RecordingTaskInstance()
    report = {"table": "demo.db.t", "snapshot_id": 7, "passed": True, "rules": [], "failures": []}
    assert _run_audit(op, report, ti)["snapshot_id"] == 7
    assert ti.pushed == {}


def test_audit_rules_render_from_params():
    op = IcebergAuditOperator(
        task_id="t",
        table="db.t",
        branch="audit_{{ ds_nodash }}",
        max_rows="{{ params.max_rows }}",
        aggregate_conditions={"few_bad": "count_if(amount <= 0) <= {{ params.max_bad_rows }}"},
    )
    params = {"max_rows": 10, "max_bad_rows": 2}
    op.render_template_fields(context={"ti": _TaskInstance(), "ds_nodash": "20240102", "params": params})
    spec = op.build_spec().validated()
    assert (spec.branch, spec.max_rows) == ("audit_20240102", 10)
    assert spec.aggregate_conditions == {"few_bad": "count_if(amount <= 0) <= 2"}


def test_a_snapshot_property_of_the_users_own_is_kept(catalog):
    """Only the keys the provider writes are refused: a team's own summary tag still reaches Spark."""
    op = IcebergAppendOperator(
        task_id="t",
        table="db.t",
        source_query="SELECT 1",
        iceberg_conn_id=catalog,
        conf={"spark.sql.iceberg.snapshot-property.team": "finance"},
    )
    with (
        mock.patch.object(SparkSubmitOperator, "execute", side_effect=AssertionError("spark-submit ran")),
        pytest.raises(AssertionError, match="spark-submit ran"),
    ):
        op.execute({"ti": _TaskInstance()})

"""Specs of merges, deletes, branches, tags and upkeep: validation before Spark, and the argv contract."""

from __future__ import annotations

import subprocess
import time

import pytest

from airflow_iceberg.jobs.spec.audits import AuditSpec
from airflow_iceberg.jobs.spec.branches import PublishSpec, RollbackSpec, TagSpec
from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.request import JobRequest, parse_argv
from airflow_iceberg.jobs.spec.row_changes import DeleteSpec, MergeClause, MergeSpec
from airflow_iceberg.jobs.spec.sources import Source
from airflow_iceberg.jobs.spec.upkeep import (
    ExpireSnapshotsSpec,
    OrphanFilesSpec,
    RewriteDataFilesSpec,
    RewriteManifestsSpec,
    RewritePositionDeletesSpec,
    check_orphan_floor,
    quoted_sort_order,
)
from airflow_iceberg.jobs.spec.writes import WriteSpec

SOURCE = Source(query="SELECT * FROM db.changes")
DAY_MS = 24 * 3600 * 1000


def _merge(**fields) -> MergeSpec:
    return MergeSpec("cat.db.t", source=fields.pop("source", SOURCE), **fields)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (_merge(), "exactly one of keys"),
        (_merge(keys=("id",), on="t.id = s.id"), "exactly one of keys"),
        (_merge(keys=("id; drop",)), "merge key column"),
        (_merge(on="t.id = s.id; DELETE FROM db.x"), "without ';'"),
        (_merge(on="t.id = s.id -- WHEN MATCHED THEN DELETE"), "SQL comments"),
        (_merge(keys=("id",), source=Source(query="WITH x AS (SELECT 1) SELECT 1; DROP TABLE t")), "single"),
        (_merge(keys=("id",), clauses=({"when": "always", "then": "update"},)), "'when' must be one of"),
        (_merge(keys=("id",), clauses=({"when": "not_matched", "then": "delete"},)), "allows then=insert"),
        (_merge(keys=("id",), clauses=({"when": "matched", "then": "update", "sett": {}},)), "keys sett"),
        (
            _merge(keys=("id",), clauses=({"when": "matched", "then": "delete", "set": {"a": "1"}},)),
            "no 'set'",
        ),
        (
            _merge(keys=("id",), clauses=({"when": "not_matched_by_source", "then": "update"},)),
            "needs 'set'",
        ),
        (
            _merge(keys=("id",), clauses=({"when": "matched", "then": "update", "set": {"a b": "1"}},)),
            "merge clause column",
        ),
        (
            _merge(keys=("id",), clauses=({"when": "matched", "then": "update", "set": {"a": "1; DROP"}},)),
            "without ';'",
        ),
        (
            _merge(
                keys=("id",),
                clauses=(
                    {"when": "matched", "then": "delete"},
                    {"when": "matched", "condition": "s.x", "then": "update"},
                ),
            ),
            "only the last one may omit",
        ),
        (_merge(keys=("id",), branch="main"), "leave branch unset"),
        (_merge(keys=("id",), branch="audit-1"), "branch"),
        (DeleteSpec("cat.db.t", condition=""), "non-empty"),
        (DeleteSpec("cat.db.t", condition="1=1; DROP TABLE t"), "without ';'"),
        (DeleteSpec("cat.db.t", condition="id = 1 /* x */"), "SQL comments"),
        (PublishSpec("cat.db.t", branch="main"), "nothing to publish"),
        (PublishSpec("cat.db.t", branch="a b"), "branch"),
        (PublishSpec("cat.db.t", branch="audit", expected_snapshot_id=-3), "expected_snapshot_id must be"),
        (TagSpec("cat.db.t", tag="eod", retain_days=0), "retain_days must be a positive"),
        (TagSpec("cat.db.t", tag="x'y"), "tag"),
        (ExpireSnapshotsSpec("cat.db.t", retain_last=0), "retain_last"),
        (RewriteDataFilesSpec("cat.db.t", strategy="zorder"), "strategy must be one of"),
        (RewriteDataFilesSpec("cat.db.t", sort_order="id"), "only to strategy 'sort'"),
        (RewriteDataFilesSpec("cat.db.t", strategy="sort", sort_order="id; DROP"), "sort_order"),
        (RewriteDataFilesSpec("cat.db.t", where="day = 1; DROP TABLE t"), "without ';'"),
        (RewriteDataFilesSpec("cat.db.t", options={"min-input-files": "two"}), "non-negative integer"),
        (RewritePositionDeletesSpec("cat.db.t", options={"rewrite-all": "yes"}), "'true' or 'false'"),
        (RollbackSpec("cat.db.t"), "give one of snapshot_id, timestamp"),
        (RollbackSpec("cat.db.t", snapshot_id=1, timestamp=2), "exactly one of"),
        (RewriteManifestsSpec("cat.db.t`"), "invalid part"),
        (WriteSpec("cat.db.t", "create", Source(query="SELECT 1"), branch="audit"), "not to mode 'create'"),
        (_merge(keys=("id",), reset_branch=True), "reset_branch needs branch"),
        (DeleteSpec("cat.db.t", condition="id = 1", reset_branch=True), "reset_branch needs branch"),
        (WriteSpec("cat.db.t", "append", Source(query="SELECT 1"), reset_branch=True), "reset_branch needs"),
        (RewriteDataFilesSpec("cat.db.t", wait_for_branches=("audit_*; DROP",)), "not a branch name pattern"),
        (RewriteDataFilesSpec("cat.db.t", branch="audit-1;x"), "branch"),
        (RewriteDataFilesSpec("cat.db.t", branch="main"), "leave branch unset"),
        (RewriteDataFilesSpec("cat.db.t", branch="a", wait_for_branches=("a*",)), "branch or wait_for"),
        (RewriteManifestsSpec("cat.db.t", wait_for_branches=("a b",)), "not a branch name pattern"),
        (RewritePositionDeletesSpec("cat.db.t", wait_for_branches=("",)), "not a branch name pattern"),
        (AuditSpec("cat.db.t"), "an audit needs at least one rule: give min_rows, max_rows, not_null"),
        (AuditSpec("cat.db.t", branch="audit", not_null=(), accepted_values={}), "needs at least one rule"),
        (AuditSpec("cat.db.t", min_rows=5, max_rows=2), "min_rows 5 is more than max_rows 2"),
        (AuditSpec("cat.db.t", min_rows=-1), "min_rows must be a non-negative integer"),
        (AuditSpec("cat.db.t", max_rows="ten"), "max_rows must be a non-negative integer"),
        (AuditSpec("cat.db.t", branch="audit", tag="t", min_rows=1), "exactly one of branch, tag"),
        (AuditSpec("cat.db.t", branch="a b", min_rows=1), "branch 'a b' is not a valid name"),
        (AuditSpec("cat.db.t", not_null="order_id"), "not_null must be a list of column names, got str"),
        (AuditSpec("cat.db.t", not_null=("a", "a")), "not_null names a column twice"),
        (AuditSpec("cat.db.t", not_null=("a.b",)), "a column name is one part"),
        (AuditSpec("cat.db.t", unique="order_id"), "unique must be a list of keys, each a column name or"),
        (AuditSpec("cat.db.t", unique=([],)), "unique: a key needs at least one column"),
        (AuditSpec("cat.db.t", unique=((1, 2),)), "unique: a column name is a string, got int 1"),
        (AuditSpec("cat.db.t", accepted_values=["a"]), "accepted_values must map a column to the values"),
        (AuditSpec("cat.db.t", accepted_values={"s": "open"}), r"\['s'\] must be a non-empty list"),
        (AuditSpec("cat.db.t", accepted_values={"s": ()}), r"\['s'\] must be a non-empty list"),
        (AuditSpec("cat.db.t", accepted_values={"s": (None,)}), "NULLs are the not_null rule's"),
        (AuditSpec("cat.db.t", row_conditions=["a > 0"]), "row_conditions must map a rule name to"),
        (AuditSpec("cat.db.t", row_conditions={"bad name": "a > 0"}), "row_conditions rule name 'bad name'"),
        (AuditSpec("cat.db.t", row_conditions={"r": ""}), r"row_conditions\['r'\] must be a non-empty SQL"),
        (AuditSpec("cat.db.t", row_conditions={"r": "a > 0; DROP TABLE t"}), "without ';' or SQL comments"),
        (AuditSpec("cat.db.t", row_conditions={"r": "a > 0 -- and more"}), "without ';' or SQL comments"),
        (AuditSpec("cat.db.t", row_conditions={"r": "a > 0 /* x */"}), "without ';' or SQL comments"),
        (
            AuditSpec("cat.db.t", aggregate_conditions={"a": "(WITH x AS (SELECT 1) DELETE FROM t)"}),
            r"aggregate_conditions\['a'\] must only read, but it holds 'DELETE FROM'",
        ),
        (
            AuditSpec("cat.db.t", aggregate_conditions={"a": "(FROM s INSERT INTO t SELECT *)"}),
            "must only read, but it holds 'INSERT INTO'",
        ),
    ],
)
def test_invalid_specs_name_the_problem(spec, message):
    with pytest.raises(InvalidSpecError, match=message):
        spec.validated()


def test_accepted_values_too_long_for_one_launch_argument_are_refused_before_spark_starts():
    """Each column's values are one argv item, and Linux refuses to start a process with one over
    128 KiB (E2BIG): refused naming the rule, not an ``OSError`` from launching spark-submit."""
    many = tuple(f"status_{i:05d}" for i in range(20_000))
    with pytest.raises(InvalidSpecError, match=r"accepted_values\['status'\] holds 20000 values, \d+ bytes"):
        AuditSpec("cat.db.t", accepted_values={"status": many}).validated()
    fits = AuditSpec("cat.db.t", accepted_values={"status": many[:5_000]}).validated()
    subprocess.run(["true", *fits.to_argv()], check=True)  # a list within the limit launches


def test_a_merge_without_clauses_is_an_upsert_and_its_sql_uses_the_aliases():
    spec = _merge(keys=("id", "day")).validated()
    assert spec.match_condition == "t.`id` = s.`id` AND t.`day` = s.`day`"
    assert [c.sql() for c in spec.clauses] == [
        "WHEN MATCHED THEN UPDATE SET *",
        "WHEN NOT MATCHED THEN INSERT *",
    ]
    clause = MergeClause.from_mapping(
        {"when": "not_matched", "condition": "s.op <> 'D'", "then": "insert", "values": {"id": "s.id"}}
    )
    assert clause.validated().sql() == "WHEN NOT MATCHED AND (s.op <> 'D') THEN INSERT (`id`) VALUES (s.id)"
    update = MergeClause.from_mapping(
        {"when": "not_matched_by_source", "then": "update", "set": {"gone": "true"}}
    )
    assert update.validated().sql() == "WHEN NOT MATCHED BY SOURCE THEN UPDATE SET t.`gone` = true"


def test_merge_keys_and_assigned_columns_take_real_world_names_quoted():
    spec = _merge(keys=("order-date", "`Région`", "`a``b`")).validated()
    assert spec.match_condition == (
        "t.`order-date` = s.`order-date` AND t.`Région` = s.`Région` AND t.`a``b` = s.`a``b`"
    )
    clause = MergeClause.from_mapping({"when": "matched", "then": "update", "set": {"`x; y`": "s.v"}})
    assert clause.validated().sql() == "WHEN MATCHED THEN UPDATE SET t.`x; y` = s.v"
    for bad in ("a b", "a;b", "t.id", "x--"):
        with pytest.raises(InvalidSpecError, match="merge key column"):
            _merge(keys=(bad,)).validated()
        with pytest.raises(InvalidSpecError, match="merge clause column"):
            MergeClause.from_mapping({"when": "matched", "then": "update", "set": {bad: "1"}}).validated()


@pytest.mark.parametrize(
    ("sort_order", "quoted"),
    [
        ("id DESC NULLS LAST", "`id` DESC NULLS LAST"),
        ("order-date desc,  Région", "`order-date` desc, `Région`"),
        ("`a,b` ASC, `c``d`", "`a,b` ASC, `c``d`"),
        ("zorder(id, `order date`)", "zorder(`id`, `order date`)"),
    ],
)
def test_sort_orders_take_real_world_column_names_and_quote_them(sort_order, quoted):
    RewriteDataFilesSpec("cat.db.t", strategy="sort", sort_order=sort_order).validated()
    assert quoted_sort_order(sort_order) == quoted


@pytest.mark.parametrize("sort_order", ["id; DROP", "id,,x", "a.b", "id -- x", "`id", "id\n", "zorder(a b)"])
def test_bad_sort_orders_are_refused(sort_order):
    with pytest.raises(InvalidSpecError, match="sort_order"):
        RewriteDataFilesSpec("cat.db.t", strategy="sort", sort_order=sort_order).validated()


def test_merge_argv_is_exact_and_round_trips():
    clauses = ({"when": "matched", "condition": "s.op = 'D'", "then": "delete"},)
    spec = _merge(on="t.id = s.id", clauses=clauses, branch="audit_1").validated()
    request = JobRequest(spec=spec, commit_id="d:t:r:-1")
    assert request.to_argv() == [
        "--commit-id", "d:t:r:-1", "merge", "--table", "cat.db.t",
        "--source-query", "SELECT * FROM db.changes",
        "--on", "t.id = s.id",
        "--clause", '{"assignments": {}, "condition": "s.op = \'D\'", "then": "delete", "when": "matched"}',
        "--branch", "audit_1",
    ]  # fmt: skip
    assert parse_argv(request.to_argv()) == request


@pytest.mark.parametrize(
    "spec",
    [
        DeleteSpec("cat.db.t", condition="id = 'a;b'", branch="b1"),
        DeleteSpec("cat.db.t", condition="id = 1", branch="b1", reset_branch=True),
        MergeSpec("cat.db.t", source=SOURCE, keys=("id",), branch="audit_1", reset_branch=True),
        PublishSpec("cat.db.t", branch="audit", target_branch="release", drop_branch=True),
        PublishSpec("cat.db.t", branch="audit", expected_snapshot_id=77, create_target_branch=True),
        TagSpec("cat.db.t", tag="eod", snapshot_id=12, retain_days=7, replace=False),
        ExpireSnapshotsSpec("cat.db.t", older_than=1704067200000, retain_last=3),
        RewriteDataFilesSpec(
            "cat.db.t",
            strategy="sort",
            sort_order="zorder(a, b)",
            where="d >= '2024'",
            options={"target-file-size-bytes": "1048576", "min-input-files": "2"},
            wait_for_branches=("audit_*", "release_[0-9]?"),
        ),
        RewriteDataFilesSpec("cat.db.t", branch="audit_20240102", options={"min-input-files": "2"}),
        RewriteManifestsSpec("cat.db.t"),
        RewriteManifestsSpec("cat.db.t", wait_for_branches=("audit_*",)),
        RewritePositionDeletesSpec(
            "cat.db.t", where="d = 1", options={"rewrite-all": "true"}, wait_for_branches=("audit_*",)
        ),
        RollbackSpec("cat.db.t", snapshot_id=5),
        RollbackSpec("cat.db.t", timestamp=1704067200000),
        WriteSpec("cat.db.t", "append", Source(query="SELECT 1"), branch="audit_20240102"),
        WriteSpec("cat.db.t", "append", Source(query="SELECT 1"), branch="audit_1", reset_branch=True),
        OrphanFilesSpec("cat.db.t", older_than=5, dry_run=False, allow_recent_files=True),
        AuditSpec("cat.db.t", min_rows=0),
        AuditSpec(
            "cat.db.t",
            branch="audit",
            min_rows=1,
            max_rows=10,
            not_null=("id", "`odd,name`"),
            unique=(("id",), ("`odd,name`", "day")),
            accepted_values={"status": ("open", "it's", 'say "x"'), "n": (1, 2.5, True)},
            row_conditions={"positive": "amount > 0", "has_eq": "note = 'a=b'"},
            aggregate_conditions={"few_bad": "count_if(amount <= 0) <= 3"},
        ),
        AuditSpec("cat.db.t", tag="eod", not_null=("id",)),
        AuditSpec("cat.db.t", snapshot_id=42, max_rows=0),
    ],
)
def test_every_action_round_trips_through_argv(spec):
    request = JobRequest(spec=spec.validated())
    assert parse_argv(request.to_argv()) == request


def test_orphan_removal_is_a_dry_run_by_default_and_deletes_only_when_asked():
    default = OrphanFilesSpec("cat.db.t").validated()
    assert default.dry_run is True
    assert default.to_argv() == ["remove-orphan-files", "--table", "cat.db.t"]
    deleting = OrphanFilesSpec("cat.db.t", dry_run=False).validated()
    assert deleting.to_argv() == ["remove-orphan-files", "--table", "cat.db.t", "--delete"]
    assert parse_argv(default.to_argv()).spec.dry_run is True
    assert parse_argv(deleting.to_argv()).spec.dry_run is False


def test_orphan_removal_keeps_the_24_hour_floor_unless_the_user_opts_in():
    now = int(time.time() * 1000)
    with pytest.raises(InvalidSpecError, match=r"less than 24 hours ago.*allow_recent_files=True"):
        OrphanFilesSpec("cat.db.t", older_than=now - DAY_MS + 60_000).validated()
    OrphanFilesSpec("cat.db.t", older_than=now - DAY_MS - 60_000).validated()  # older than the floor: fine
    OrphanFilesSpec("cat.db.t", older_than=now, allow_recent_files=True).validated()  # explicit opt-in
    check_orphan_floor(None, allow_recent_files=False)  # Iceberg's default, three days ago
    with pytest.raises(InvalidSpecError):
        check_orphan_floor(1000 + DAY_MS, allow_recent_files=False, now_ms=1000 + DAY_MS + 5)


def test_one_branch_pattern_given_as_text_is_one_pattern():
    assert RewriteManifestsSpec("cat.db.t", wait_for_branches="audit_*").validated().wait_for_branches == (
        "audit_*",
    )

"""The audit action against the shared SparkSession: every rule kind passing and failing, measured
on exactly one snapshot, with pyiceberg (reading the table's metadata, not Spark) as the witness of
what that snapshot holds and that the audit committed nothing.
"""

from __future__ import annotations

import re

import pytest

from airflow_iceberg.jobs import audits
from airflow_iceberg.jobs.audits import audit_table
from airflow_iceberg.jobs.iceberg_job import run
from airflow_iceberg.jobs.merges import merge_into
from airflow_iceberg.jobs.spec.audits import AuditSpec
from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.request import JobRequest
from airflow_iceberg.jobs.spec.row_changes import MergeSpec
from airflow_iceberg.jobs.spec.sources import Source
from airflow_iceberg.jobs.writes import write_table
from tests.jobs.helpers import values_query, write_spec

COLUMNS = "id, customer_id, amount, status"
MAIN = [(1, 11, 5.0, "open"), (2, 12, 7.5, "shipped")]
#: What a bad load stages on the branch: a repeated id, a NULL customer, a negative amount, a
#: status no one accepts.
BAD_LOAD = [(3, None, -1.0, "lost"), (3, 13, 2.0, "open")]
#: Every rule kind, each one true of MAIN and false of MAIN + BAD_LOAD.
RULES = {
    "min_rows": 1,
    "max_rows": 2,
    "not_null": ("id", "customer_id"),
    "unique": (("id",), ("customer_id", "status")),
    "accepted_values": {"status": ("open", "shipped")},
    "row_conditions": {"positive_amount": "amount > 0"},
    "aggregate_conditions": {"has_revenue": "sum(amount) > 12", "few_rows": "count(*) <= 2"},
}


def _audited(spark, table) -> int:
    """Main holds MAIN; branch ``audit`` holds MAIN plus BAD_LOAD. Returns the branch's snapshot."""
    write_table(spark, write_spec(table, "create", values_query(MAIN, COLUMNS)))
    staged = write_spec(table, "append", values_query(BAD_LOAD, COLUMNS), branch="audit")
    return write_table(spark, staged)["snapshot_id"]


def _by_rule(report) -> dict[str, dict]:
    return {
        rule.get("name") or rule.get("column") or str(rule.get("columns") or rule["rule"]): rule
        for rule in report["rules"]
    }


def test_every_rule_kind_passes_on_good_data_measured_on_mains_snapshot(spark, lake, table):
    _audited(spark, table)
    before = lake.state(table)
    report = run(spark, JobRequest(spec=AuditSpec(table=table, **RULES).validated()))
    main = lake.current_snapshot_id(table)
    rows = lake.rows(table, main)
    assert (report["snapshot_id"], report["ref"], report["selector"]) == (main, "main", None)
    assert report["row_count"] == len(rows) == 2
    assert report["passed"] is True and report["failures"] == []
    assert [(rule["rule"], rule["passed"]) for rule in report["rules"]] == [
        ("min_rows", True),
        ("max_rows", True),
        ("not_null", True),
        ("not_null", True),
        ("unique", True),
        ("unique", True),
        ("accepted_values", True),
        ("row_condition", True),
        ("aggregate_condition", True),
        ("aggregate_condition", True),
    ]
    assert [rule["measured"] for rule in report["rules"]] == [2, 2, 0, 0, 0, 0, 0, 0, True, True]
    assert lake.state(table) == before  # an audit commits nothing, not even metadata


def test_every_rule_kind_fails_on_the_bad_branch_with_what_it_measured(spark, lake, table):
    head = _audited(spark, table)
    before = lake.state(table)
    report = audit_table(spark, AuditSpec(table=table, branch="audit", **RULES).validated())
    rows = lake.rows(table, head)  # pyiceberg's reading of the branch's snapshot
    ids = [row["id"] for row in rows]
    assert (report["snapshot_id"], report["ref"], report["selector"]) == (head, "audit", "branch")
    assert report["passed"] is False and report["row_count"] == len(rows) == 4
    rules = _by_rule(report)
    assert rules["min_rows"]["passed"] is True  # 4 >= 1
    assert (rules["max_rows"]["measured"], rules["max_rows"]["passed"]) == (len(rows), False)
    assert rules["id"]["passed"] is True
    assert rules["customer_id"]["measured"] == sum(row["customer_id"] is None for row in rows) == 1
    assert rules["['id']"]["measured"] == len(ids) - len(set(ids)) == 1
    assert rules["['customer_id', 'status']"]["passed"] is True  # (NULL, lost) and (13, open) are new keys
    assert rules["status"]["measured"] == sum(row["status"] not in ("open", "shipped") for row in rows) == 1
    assert rules["positive_amount"]["measured"] == sum(row["amount"] <= 0 for row in rows) == 1
    assert rules["has_revenue"]["measured"] is (sum(row["amount"] for row in rows) > 12) is True
    assert rules["few_rows"]["measured"] is False
    assert report["failures"] == [
        "max_rows: 4 rows, more than 2",
        "not_null customer_id: 1 rows are NULL",
        "unique (id): 1 rows repeat a key",
        "accepted_values status: 1 rows hold a value outside ['open', 'shipped']",
        "row_conditions positive_amount: 1 rows do not satisfy 'amount > 0'",
        "aggregate_conditions few_rows: 'count(*) <= 2' is False, not true",
    ]
    assert [rule["rule"] for rule in report["rules"] if not rule["passed"]] == [
        "max_rows",
        "not_null",
        "unique",
        "accepted_values",
        "row_condition",
        "aggregate_condition",
    ]
    assert lake.state(table) == before


def test_a_merge_on_read_branch_with_delete_files_is_measured_as_pyiceberg_reads_it(spark, lake, table):
    """The example DAG merges with merge-on-read: the audit must see the rows the position deletes
    leave (pyiceberg applies them independently), not the data files' raw contents."""
    modes = {f"write.{kind}.mode": "merge-on-read" for kind in ("merge", "delete", "update")}
    start = [(1, 11, 5.0, "open"), (2, 12, 7.5, "open"), (3, 13, 1.0, "lost"), (4, None, 2.0, "open")]
    write_table(
        spark,
        write_spec(
            table, "create", values_query(start, COLUMNS), table_properties={"format-version": "2", **modes}
        ),
    )
    # On the branch: delete 3 (the only 'lost'), give 4 a customer, update 1 to an unknown status,
    # insert 5 (a negative amount), and 6 and 7 without a customer, so the NULL customer repeats.
    changes = [
        (3, 13, 1.0, "lost", "D"),
        (4, 14, 2.0, "shipped", "U"),
        (1, 16, 5.0, "x", "U"),
        (5, 15, -1.0, "open", "I"),
        (6, None, 3.0, "open", "I"),
        (7, None, 3.0, "open", "I"),
    ]
    clauses = (
        {"when": "matched", "condition": "s.op = 'D'", "then": "delete"},
        {"when": "matched", "then": "update", "set": {"customer_id": "s.customer_id", "status": "s.status"}},
        {"when": "not_matched", "then": "insert", "values": {c: f"s.{c}" for c in COLUMNS.split(", ")}},
    )
    source = Source(query=values_query(changes, f"{COLUMNS}, op"))
    merge_into(
        spark, MergeSpec(table, source=source, keys=("id",), clauses=clauses, branch="audit").validated()
    )
    head = lake.branch_head(table, "audit")
    assert int(lake.summary(table, head)["total-position-deletes"]) >= 1  # deletes are in delete files
    spec = AuditSpec(
        table=table,
        branch="audit",
        not_null=("customer_id",),
        unique=(("id",), ("customer_id",), ("status",)),
        accepted_values={"status": ("open", "shipped")},
        row_conditions={"positive": "amount > 0"},
        aggregate_conditions={"revenue": "sum(amount) > 19"},
    )
    report = audit_table(spark, spec.validated())
    rows = lake.rows(table, head)  # pyiceberg, with the delete files applied
    column = {name: [row[name] for row in rows] for name in ("id", "customer_id", "status")}
    assert report["snapshot_id"] == head and report["row_count"] == len(rows) == 6
    assert (
        [rule["measured"] for rule in report["rules"]]
        == [
            column["customer_id"].count(None),  # 6 and 7
            len(rows) - len(set(column["id"])),
            len(rows) - len(set(column["customer_id"])),  # the two NULLs count as one key, as in GROUP BY
            len(rows) - len(set(column["status"])),
            sum(status not in ("open", "shipped") for status in column["status"]),
            sum(not row["amount"] > 0 for row in rows),
            sum(row["amount"] for row in rows) > 19,  # 19.5
        ]
        == [2, 0, 1, 3, 1, 1, True]
    )


def test_min_rows_and_a_null_condition_fail(spark, lake, table):
    """Too few rows fails; a row whose condition is NULL (not true) does not satisfy it."""
    _audited(spark, table)
    spec = AuditSpec(table=table, min_rows=3, row_conditions={"known_customer": "customer_id > 0"})
    report = audit_table(spark, spec.validated())
    assert report["failures"] == ["min_rows: 2 rows, fewer than 3"]
    on_branch = audit_table(
        spark,
        AuditSpec(
            table=table, branch="audit", **{"row_conditions": {"known_customer": "customer_id > 0"}}
        ).validated(),
    )
    assert on_branch["failures"] == ["row_conditions known_customer: 1 rows do not satisfy 'customer_id > 0'"]


def test_a_commit_on_the_branch_after_resolution_is_not_audited(spark, lake, table, monkeypatch):
    """The scan reads the resolved id, not the branch: a bad commit landing mid-audit is not seen."""
    head = _audited(spark, table)
    spark.sql(f"DELETE FROM {table}.branch_audit WHERE customer_id IS NULL OR status = 'lost'")
    resolved_head = lake.branch_head(table, "audit")
    resolve = audits.resolve_audited_snapshot

    def resolve_then_another_writer_commits(spark_, spec):
        snapshot_id = resolve(spark_, spec)
        write_table(
            spark_,
            write_spec(table, "append", values_query([(9, None, -5.0, "lost")], COLUMNS), branch="audit"),
        )
        return snapshot_id

    monkeypatch.setattr(audits, "resolve_audited_snapshot", resolve_then_another_writer_commits)
    spec = AuditSpec(
        table=table, branch="audit", not_null=("customer_id",), row_conditions={"p": "amount > 0"}
    )
    report = audit_table(spark, spec.validated())
    now = lake.branch_head(table, "audit")
    assert head != resolved_head != now  # the branch moved twice: the clean-up, then the bad commit
    assert lake.snapshot(table, now).parent_snapshot_id == resolved_head
    assert report["snapshot_id"] == resolved_head and report["passed"] is True
    assert report["row_count"] == len(lake.rows(table, resolved_head)) == 3
    assert any(row["customer_id"] is None for row in lake.rows(table, now))  # the unaudited commit


def test_a_tag_or_a_snapshot_id_is_audited_as_named(spark, lake, table):
    head = _audited(spark, table)
    main = lake.current_snapshot_id(table)
    spark.sql(f"ALTER TABLE {table} CREATE TAG staged AS OF VERSION {head}")
    by_tag = audit_table(spark, AuditSpec(table=table, tag="staged", max_rows=2).validated())
    by_id = audit_table(spark, AuditSpec(table=table, snapshot_id=main, max_rows=2).validated())
    assert (by_tag["snapshot_id"], by_tag["ref"], by_tag["passed"]) == (head, "staged", False)
    assert (by_id["snapshot_id"], by_id["ref"], by_id["passed"]) == (main, None, True)


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({"not_null": ("nope",)}, "not_null: 'nope' is not a column of the audited snapshot"),
        ({"unique": (("id", "nope"),)}, "unique: 'nope' is not a column"),
        ({"accepted_values": {"nope": ("a",)}}, "accepted_values: 'nope' is not a column"),
        # a value not of the column's type: refused before the scan, not coerced by Spark (4.0's
        # ANSI mode fails the scan on the first row it cannot cast, or fails optimising)
        (
            {"accepted_values": {"status": ("open", True)}},
            "accepted_values['status']: True is not a value of the column, a string: give strings",
        ),
        ({"accepted_values": {"status": (1,)}}, "1 is not a value of the column, a string"),
        ({"accepted_values": {"id": ("1",)}}, "'1' is not a value of the column, a int: give numbers"),
        ({"row_conditions": {"r": "nope > 0"}}, "row_conditions['r'] 'nope > 0' does not fit"),
        ({"row_conditions": {"r": "amount + 1"}}, "must be true or false, but it is decimal(3,1)"),
        ({"aggregate_conditions": {"a": "amount > 0"}}, "an aggregate condition is over aggregates"),
        ({"row_conditions": {"r": "sum(amount) > 0"}}, "a row condition is about each row"),
    ],
)
def test_rules_that_do_not_fit_the_table_fail_naming_the_rule(spark, lake, table, rules, message):
    _audited(spark, table)
    with pytest.raises(InvalidSpecError, match=re.escape(message)):
        audit_table(spark, AuditSpec(table=table, **rules).validated())


def test_accepted_dates_are_compared_as_dates_and_a_malformed_one_is_refused(spark, lake, table):
    """A date given as text becomes a date literal (checked first: Spark 4.0's ANSI cast would fail
    the scan), so ``'2024-01-02'`` accepts that day, and a malformed date is refused, naming it."""
    days = "SELECT * FROM VALUES (1, DATE'2024-01-02'), (2, DATE'2024-01-03'), (3, NULL) AS v(id, day)"
    write_table(spark, write_spec(table, "create", days))
    report = audit_table(spark, AuditSpec(table=table, accepted_values={"day": ("2024-01-02",)}).validated())
    rows = lake.rows(table)
    assert (
        report["rules"][0]["measured"]
        == sum(str(row["day"]) not in ("2024-01-02", "None") for row in rows)
        == 1
    )
    with pytest.raises(
        InvalidSpecError, match=r"accepted_values\['day'\]: '2024-13-45' is not a value of the column, a date"
    ):
        audit_table(
            spark, AuditSpec(table=table, accepted_values={"day": ("2024-01-02", "2024-13-45")}).validated()
        )


@pytest.mark.parametrize(
    "condition",
    [
        "amount > 0 OR",  # the parser would read the last word as an alias
        "id = 1 WHEN MATCHED THEN DELETE",  # a clause, to splice into a MERGE
        "amount > 0) OR (1 = 1",  # balanced only inside the audit's own parentheses
    ],
)
def test_sql_that_is_not_one_expression_is_refused_by_sparks_parser(spark, lake, table, condition):
    """Text the cheap check lets through is refused by Spark's expression parser, before any scan."""
    _audited(spark, table)
    before = lake.state(table)
    for field in ("row_conditions", "aggregate_conditions"):
        spec = AuditSpec(table=table, **{field: {"hostile": condition}}).validated()  # passes the text check
        with pytest.raises(InvalidSpecError, match=rf"{field}\['hostile'\] .* is not one SQL expression"):
            audit_table(spark, spec)
    assert lake.state(table) == before

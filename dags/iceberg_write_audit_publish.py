"""Write-audit-publish: merge a day's order changes on a branch, audit them, then publish to main.

The story: an orders table that analysts query all day must never show a bad load. Each run
merges the day's changes (new orders, corrections, cancellations) into a branch
``audit_<date>`` created from ``main``: readers of the table see nothing yet. The audit checks
the branch against declarative rules (at least one row, no NULL key or date, unique order ids,
no order dated after the run's day, and at most ``max_bad_rows`` rows with a non-positive amount
or no customer) on the one snapshot the branch points at, and names that snapshot. Only then is
``main`` fast-forwarded to exactly the audited snapshot (one atomic commit; a commit that landed
on the branch after the audit is refused, not published unaudited) and the branch dropped. The
published snapshot is tagged ``eod_<date>`` for 30 days, so expiry keeps it for time travel.

A person can stand between audit and publish: trigger the run with ``require_approval`` true
and it waits, after the audit passed, for someone to approve the audited snapshot (Airflow's
Required Actions page, or the REST API's ``hitlDetails``). Approve, and it publishes; reject,
and publish is skipped, ``main`` untouched; no answer in 12 hours fails the wait, and nothing
is published. The default is false, so scheduled runs publish unattended: ``approval_required``
then skips the approval task alone, and publish (``none_failed``) follows the audit.

If the audit fails, it lists every broken rule, its report stays in XCom, and publishing never
runs: ``main`` is untouched, and the branch stays for inspection. The audit is not retried (the
same snapshot would fail again). To repair, fix the source and clear the run: the merge starts
the branch afresh from ``main`` (``reset_branch``), so the audit sees ``main`` plus the new merge
only, never the failed one.

Connections (see README): ``iceberg_catalog_default`` and ``spark_default``.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import DAG, Param, task

from airflow_iceberg.operators import (
    IcebergAuditOperator,
    IcebergCreateTableOperator,
    IcebergMergeOperator,
    IcebergPublishOperator,
    IcebergTagOperator,
)

ORDERS = "wap_demo.orders"
BRANCH = "audit_{{ ds_nodash }}"
#: At most ``max_bad_rows`` rows no published table should hold: the audit counts them on the branch.
FEW_BAD_ROWS = "count_if(amount <= 0 OR customer_id IS NULL) <= {{ params.max_bad_rows }}"
#: The audit's snapshot, from its XCom report: what approval shows and publish pins.
AUDITED_SNAPSHOT = "{{ ti.xcom_pull(task_ids='audit')['snapshot_id'] }}"

#: The day's change feed (stands in for a CDC extract): corrections to orders 1 and 2, a
#: cancellation of order 3 (op 'D'), and two new orders of the day.
CHANGES = """
SELECT * FROM VALUES
    (1, 11, 19.50, DATE'{{ macros.ds_add(ds, -1) }}', 'U'),
    (2, 12, 7.25,  DATE'{{ macros.ds_add(ds, -1) }}', 'U'),
    (3, 13, 0.00,  DATE'{{ macros.ds_add(ds, -1) }}', 'D'),
    (10, 14, 42.00, DATE'{{ ds }}', 'I'),
    (11, 15, 8.00,  DATE'{{ ds }}', 'I')
AS changes(order_id, customer_id, amount, order_date, op)
"""

with DAG(
    dag_id="iceberg_write_audit_publish",
    description="Merge a day's changes on a branch, audit the branch, publish it to main",
    schedule="@daily",
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    params={
        "max_bad_rows": Param(0, type="integer", description="bad rows the audit tolerates"),
        "require_approval": Param(
            False, type="boolean", description="wait for a person to approve the audited snapshot"
        ),
    },
    tags=["iceberg", "example"],
) as dag:
    # Stands in for the table you already have: yesterday's five orders, on main.
    create_orders = IcebergCreateTableOperator(
        task_id="create_orders",
        table=ORDERS,
        mode="create_or_replace",
        source_query=(
            "SELECT CAST(id AS INT) AS order_id, CAST(10 + id AS INT) AS customer_id, "
            "CAST(id * 5 AS DECIMAL(10, 2)) AS amount, DATE'{{ macros.ds_add(ds, -1) }}' AS order_date "
            "FROM range(1, 6)"
        ),
        partition_by=["days(order_date)"],
        table_properties={"format-version": "2", "write.merge.mode": "merge-on-read"},
    )
    merge_changes = IcebergMergeOperator(
        task_id="merge_changes",
        table=ORDERS,
        branch=BRANCH,
        reset_branch=True,  # a cleared re-run after a failed audit starts again from main
        source_query=CHANGES,
        keys=["order_id"],
        clauses=[
            {"when": "matched", "condition": "s.op = 'D'", "then": "delete"},
            {"when": "matched", "then": "update", "set": {c: f"s.{c}" for c in ("amount", "customer_id")}},
            {
                "when": "not_matched",
                "condition": "s.op <> 'D'",
                "then": "insert",
                "values": {c: f"s.{c}" for c in ("order_id", "customer_id", "amount", "order_date")},
            },
        ],
    )
    audit = IcebergAuditOperator(
        task_id="audit",
        table=ORDERS,
        branch=BRANCH,
        min_rows=1,
        not_null=["order_id", "order_date"],
        unique=["order_id"],
        row_conditions={"no_future_orders": "order_date <= DATE'{{ ds }}'"},
        aggregate_conditions={"few_bad_rows": FEW_BAD_ROWS},
    )

    @task.short_circuit(ignore_downstream_trigger_rules=False)
    def approval_required(params: dict | None = None) -> bool:
        """Skip only the approval task unless the run asks for one; publish still follows the audit."""
        return bool((params or {}).get("require_approval"))

    approve_publish = ApprovalOperator(
        task_id="approve_publish",
        subject="Publish the audited orders of {{ ds }} to main?",
        body=(
            f"The audit of `{ORDERS}` branch `{BRANCH}` passed on snapshot {AUDITED_SNAPSHOT} "
            "({{ ti.xcom_pull(task_ids='audit')['row_count'] }} rows). Approve to publish exactly "
            "that snapshot; reject to leave main as it is (the branch stays for inspection)."
        ),
        response_timeout=timedelta(hours=12),
    )
    # Publish exactly the audited snapshot: a commit that lands on the branch after the audit is
    # refused, not published unaudited. After an approval, or straight after the audit when none
    # was asked for (the skipped approval does not stop it); never after a failed audit.
    publish = IcebergPublishOperator(
        task_id="publish",
        table=ORDERS,
        branch=BRANCH,
        expected_snapshot_id=AUDITED_SNAPSHOT,
        drop_branch=True,
        trigger_rule="none_failed",
    )
    # Tag the snapshot published, not whatever main points at by then (another writer's commit).
    tag_end_of_day = IcebergTagOperator(
        task_id="tag_end_of_day",
        table=ORDERS,
        tag="eod_{{ ds_nodash }}",
        snapshot_id="{{ ti.xcom_pull(task_ids='publish')['snapshot_id'] }}",
        retain_days=30,
    )

    create_orders >> merge_changes >> audit >> approval_required() >> approve_publish >> publish
    audit >> publish >> tag_end_of_day

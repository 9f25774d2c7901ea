"""Write-audit-publish: merge a day's order changes on a branch, audit them, then publish to main.

The story: an orders table that analysts query all day must never show a bad load. Each run
merges the day's changes (new orders, corrections, cancellations) into a branch
``audit_<date>`` created from ``main``: readers of the table see nothing yet. An audit read of
the branch counts the rows that break the rules, a plain Python task checks that count, and only
then is ``main`` fast-forwarded to the audited snapshot (one atomic commit) and the branch
dropped. The published snapshot is tagged ``eod_<date>`` for 30 days, so expiry keeps it for
time travel.
If the check fails, publishing never runs: ``main`` is untouched, and the branch stays for
inspection. To repair, fix the source and clear the run: the merge starts the branch afresh
from ``main`` (``reset_branch``), so the audit sees ``main`` plus the new merge only, never the
failed one.

Connections (see README): ``iceberg_catalog_default`` and ``spark_default``.
"""

from __future__ import annotations

import pendulum
from airflow.exceptions import AirflowFailException
from airflow.sdk import DAG, Param, task

from airflow_iceberg.operators import (
    IcebergCreateTableOperator,
    IcebergMergeOperator,
    IcebergPublishOperator,
    IcebergTagOperator,
    IcebergTimeTravelReadOperator,
)

ORDERS = "wap_demo.orders"
BRANCH = "audit_{{ ds_nodash }}"
#: Rows no published table may hold: the audit counts them on the branch.
BAD_ROWS = "amount <= 0 OR customer_id IS NULL"

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
    params={"max_bad_rows": Param(0, type="integer", description="bad rows the audit tolerates")},
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
    audit = IcebergTimeTravelReadOperator(task_id="audit", table=ORDERS, branch=BRANCH, filter=BAD_ROWS)

    @task
    def check_audit(audit_result: dict, merge_result: dict, params: dict | None = None) -> dict:
        """Fail the run, so nothing is published, unless the audit read the merge and found no bad rows."""
        max_bad_rows = int((params or {}).get("max_bad_rows", 0))
        if audit_result["snapshot_id"] != merge_result["snapshot_id"]:
            raise AirflowFailException(
                f"audit read snapshot {audit_result['snapshot_id']}, "
                f"not the merge's {merge_result['snapshot_id']}"
            )
        if audit_result["row_count"] > max_bad_rows:
            raise AirflowFailException(
                f"audit failed: {audit_result['row_count']} rows match {BAD_ROWS!r} on snapshot "
                f"{audit_result['snapshot_id']} (at most {max_bad_rows} allowed); main is unchanged"
            )
        return {"audited_snapshot_id": audit_result["snapshot_id"], "bad_rows": audit_result["row_count"]}

    checked = check_audit(audit.output, merge_changes.output)
    # Publish exactly the audited snapshot: a commit that lands on the branch after the audit is
    # refused, not published unaudited.
    publish = IcebergPublishOperator(
        task_id="publish",
        table=ORDERS,
        branch=BRANCH,
        expected_snapshot_id="{{ ti.xcom_pull(task_ids='check_audit')['audited_snapshot_id'] }}",
        drop_branch=True,
    )
    # Tag the snapshot published, not whatever main points at by then (another writer's commit).
    tag_end_of_day = IcebergTagOperator(
        task_id="tag_end_of_day",
        table=ORDERS,
        tag="eod_{{ ds_nodash }}",
        snapshot_id="{{ ti.xcom_pull(task_ids='publish')['snapshot_id'] }}",
        retain_days=30,
    )

    create_orders >> merge_changes >> audit >> checked >> publish >> tag_end_of_day

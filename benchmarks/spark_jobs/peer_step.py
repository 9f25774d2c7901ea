"""The peer of the story comparisons: each step of the example DAGs as a user would hand-write it.

    spark-submit peer_step.py create TABLE QUERY [--partition-by days(col)] [--property K=V ...]
    spark-submit peer_step.py append|overwrite_partitions TABLE QUERY
    spark-submit peer_step.py read TABLE [SNAPSHOT_ID | previous] [--sink TABLE] [--preview N]
    spark-submit peer_step.py merge_branch TABLE BRANCH CHANGES_QUERY
    spark-submit peer_step.py audit TABLE BRANCH DAY MAX_BAD_ROWS
    spark-submit peer_step.py fast_forward TABLE BRANCH
    spark-submit peer_step.py tag TABLE TAG RETAIN_DAYS

One DataFrameWriterV2 call, one read or a few plain Spark SQL statements, then one query of the
``snapshots`` metadata table for what the step committed or read: the few lines a plain
SparkSubmitOperator would run. It prints what the operator's XCom holds (snapshot, counts,
preview), so both sides produce the same facts; it checks nothing beyond the audit's rules,
retries nothing, and tags no commit. The write-audit-publish steps are written for that DAG's
orders table (its key, columns and rules), as a user's job for one table would be.

``read ... previous`` reads the snapshot before the current one (a plain SparkSubmitOperator
pushes no XCom, so the peer cannot be handed the append's snapshot id); ``fast_forward``
publishes whatever the branch points at (nothing pins the audited snapshot).
"""

from __future__ import annotations

import argparse
import json
import re
import sys

LATEST = "SELECT snapshot_id, operation, summary FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1"
_TRANSFORM = re.compile(r"^(\w+)\((\w+)\)$")


def parse_arguments(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="peer_step.py")
    parser.add_argument("step")
    parser.add_argument("table")
    parser.add_argument("arguments", nargs="*")
    parser.add_argument("--partition-by", default=None, help="one transform, e.g. days(order_date)")
    parser.add_argument("--property", action="append", default=[], help="table property K=V")
    parser.add_argument("--sink", default=None, help="read: copy the rows read into this table")
    parser.add_argument("--preview", type=int, default=10, help="read: preview rows")
    return parser.parse_args(args)


def latest(spark, table: str) -> dict:
    return spark.sql(LATEST.format(table=table)).first().asDict()


def write(spark, step: str, table: str, query: str, options: argparse.Namespace) -> dict:
    writer = spark.sql(query).writeTo(table)
    if step == "create":
        if options.partition_by:
            from pyspark.sql import functions

            transform, column = _TRANSFORM.match(options.partition_by).groups()
            writer = writer.partitionedBy(getattr(functions, transform)(functions.col(column)))
        for item in options.property:
            key, _, value = item.partition("=")
            writer = writer.tableProperty(key, value)
        writer.createOrReplace()
    elif step == "append":
        writer.append()
    else:
        writer.overwritePartitions()
    return latest(spark, table)


def read(spark, table: str, snapshot: str | None, options: argparse.Namespace) -> dict:
    if snapshot == "previous":
        current = latest(spark, table)["snapshot_id"]
        parent = spark.sql(f"SELECT parent_id FROM {table}.snapshots WHERE snapshot_id = {current}").first()
        snapshot = str(parent.parent_id)
    # VERSION AS OF, as a user writes time travel in Spark SQL (DataFrameReader.table ignores
    # a versionAsOf option on Spark 3.5: it read the current snapshot)
    df = spark.sql(f"SELECT * FROM {table} VERSION AS OF {int(snapshot)}") if snapshot else spark.table(table)
    preview = [row.asDict() for row in df.limit(options.preview).collect()]
    if options.sink:
        df.writeTo(options.sink).createOrReplace()
    snapshot = snapshot or latest(spark, table)["snapshot_id"]
    return {"snapshot_id": snapshot, "row_count": df.count(), "sink": options.sink, "preview": preview}


def merge_branch(spark, table: str, branch: str, changes: str) -> dict:
    """The day's changes merged into a branch started afresh from main (main untouched)."""
    spark.sql(f"ALTER TABLE {table} CREATE OR REPLACE BRANCH {branch}")
    spark.sql(changes).createOrReplaceTempView("changes")
    spark.sql(
        f"""
        MERGE INTO {table}.branch_{branch} t USING changes s ON t.order_id = s.order_id
        WHEN MATCHED AND s.op = 'D' THEN DELETE
        WHEN MATCHED THEN UPDATE SET amount = s.amount, customer_id = s.customer_id
        WHEN NOT MATCHED AND s.op <> 'D' THEN
            INSERT (order_id, customer_id, amount, order_date)
            VALUES (s.order_id, s.customer_id, s.amount, s.order_date)
        """
    )
    return {"branch": branch, **_branch_head(spark, table, branch)}


def _branch_head(spark, table: str, branch: str) -> dict:
    row = spark.sql(f"SELECT snapshot_id FROM {table}.refs WHERE name = '{branch}'").first()
    return {"snapshot_id": row.snapshot_id}


def audit(spark, table: str, branch: str, day: str, max_bad_rows: int) -> dict:
    """The example DAG's rules, in one aggregate query over the branch; raise when one is broken."""
    row = spark.sql(
        f"""
        SELECT count(*) AS row_count,
               count_if(order_id IS NULL) AS null_order_id,
               count_if(order_date IS NULL) AS null_order_date,
               count(*) - count(DISTINCT order_id) AS duplicate_order_ids,
               count_if(order_date > DATE'{day}') AS future_orders,
               count_if(amount <= 0 OR customer_id IS NULL) AS bad_rows
        FROM {table}.branch_{branch}
        """
    ).first()
    report = row.asDict()
    broken = [name for name in report if name != "row_count" and name != "bad_rows" and report[name]]
    if report["row_count"] < 1:
        broken.append("row_count")
    if report["bad_rows"] > max_bad_rows:
        broken.append("bad_rows")
    result = {"branch": branch, "passed": not broken, **report, **_branch_head(spark, table, branch)}
    if broken:
        raise SystemExit(f"audit failed: {broken}: {json.dumps(result)}")
    return result


def fast_forward(spark, table: str, branch: str) -> dict:
    """Publish the branch: main fast-forwarded to it, then the branch dropped."""
    catalog, identifier = table.split(".", 1)
    spark.sql(f"CALL {catalog}.system.fast_forward('{identifier}', 'main', '{branch}')")
    spark.sql(f"ALTER TABLE {table} DROP BRANCH {branch}")
    return latest(spark, table)


def tag(spark, table: str, name: str, retain_days: int) -> dict:
    spark.sql(f"ALTER TABLE {table} CREATE TAG {name} RETAIN {int(retain_days)} DAYS")
    row = spark.sql(f"SELECT snapshot_id FROM {table}.refs WHERE name = '{name}'").first()
    return {"tag": name, "snapshot_id": row.snapshot_id}


def run(spark, options: argparse.Namespace) -> dict:
    step, table, arguments = options.step, options.table, options.arguments
    if step in ("create", "append", "overwrite_partitions"):
        return write(spark, step, table, arguments[0], options)
    if step == "read":
        return read(spark, table, arguments[0] if arguments else None, options)
    if step == "merge_branch":
        return merge_branch(spark, table, arguments[0], arguments[1])
    if step == "audit":
        return audit(spark, table, arguments[0], arguments[1], int(arguments[2]))
    if step == "fast_forward":
        return fast_forward(spark, table, arguments[0])
    if step == "tag":
        return tag(spark, table, arguments[0], int(arguments[1]))
    raise SystemExit(f"unknown step {step!r}")


def main(args: list[str]) -> None:
    from pyspark.sql import SparkSession

    options = parse_arguments(args)
    spark = SparkSession.builder.getOrCreate()
    try:
        print(json.dumps(run(spark, options), default=str))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])

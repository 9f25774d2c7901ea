"""The peer of the story comparison: each step of the EMR story as a user would hand-write it.

    spark-submit peer_step.py create|append TABLE QUERY
    spark-submit peer_step.py read TABLE [SNAPSHOT_ID]

One DataFrameWriterV2 call (or one read), then one query of the ``snapshots`` metadata table
for what the step committed or read: the few lines a plain SparkSubmitOperator would run. It
prints what the operator's XCom holds (snapshot, counts, preview), so both sides produce the
same facts; it checks nothing, retries nothing, and tags no commit.
"""

from __future__ import annotations

import json
import sys

LATEST = "SELECT snapshot_id, operation, summary FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1"


def main(step: str, table: str, argument: str | None = None) -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    try:
        if step in ("create", "append"):
            writer = spark.sql(str(argument)).writeTo(table)
            writer.createOrReplace() if step == "create" else writer.append()
            print(json.dumps(spark.sql(LATEST.format(table=table)).first().asDict(), default=str))
        else:
            reader = spark.read.option("snapshot-id", argument) if argument else spark.read
            df = reader.table(table)
            preview = [row.asDict() for row in df.limit(10).collect()]
            snapshot = argument or spark.sql(LATEST.format(table=table)).first().snapshot_id
            print(json.dumps({"snapshot_id": snapshot, "row_count": df.count(), "preview": preview}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])

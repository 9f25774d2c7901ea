"""Give Iceberg tables long histories fast: one SparkSession, one tiny INSERT per snapshot.

    spark-submit build_history.py '{"tables": {"demo.bench.history_10": 10, ...}, "nth": 5, "repetitions": 5}'

Starting one spark-submit per snapshot would take hours for 1,000 snapshots; one session makes
each snapshot a ~0.1 s commit. Old ``vN.metadata.json`` files are deleted as it goes (only the
last few are kept), which the time-travel reads never need.

Afterwards it times, inside the same session with the catalog cache off (so every read loads
the table's metadata again, as a new job would), loading each table as of its ``nth`` snapshot
and then ``count()``-ing it, interleaved across tables. Prints one JSON line: build seconds per
table, and the load and read samples.
"""

from __future__ import annotations

import json
import sys
import time

TABLE_PROPERTIES = {
    "format-version": "2",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "5",
}


def build(spark, table: str, snapshots: int) -> float:
    properties = ", ".join(f"'{key}'='{value}'" for key, value in TABLE_PROPERTIES.items())
    started = time.perf_counter()
    spark.sql(f"CREATE TABLE {table} (id BIGINT, note STRING) USING iceberg TBLPROPERTIES ({properties})")
    for index in range(snapshots):
        spark.sql(f"INSERT INTO {table} VALUES ({index}, 'append {index}')")
    return time.perf_counter() - started


def nth_snapshot(spark, table: str, nth: int) -> int:
    rows = spark.sql(
        f"SELECT snapshot_id FROM {table}.history ORDER BY made_current_at LIMIT {nth}"
    ).collect()
    return int(rows[-1].snapshot_id)


def timed_read(spark, table: str, snapshot_id: int) -> tuple[float, float]:
    """Seconds to load the table as of the snapshot (DataFrame creation), and for the whole count."""
    started = time.perf_counter()
    frame = spark.read.option("snapshot-id", str(snapshot_id)).table(table)
    loaded = time.perf_counter() - started
    frame.count()
    return loaded, time.perf_counter() - started


def main(spec: dict) -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("airflow-iceberg-bench history").getOrCreate()
    try:
        build_seconds = {table: build(spark, table, count) for table, count in spec["tables"].items()}
        targets = {table: nth_snapshot(spark, table, spec["nth"]) for table in spec["tables"]}
        for table, snapshot_id in targets.items():  # one unrecorded round: JIT and caches warm up
            timed_read(spark, table, snapshot_id)
        loads: dict[str, list[float]] = {table: [] for table in spec["tables"]}
        reads: dict[str, list[float]] = {table: [] for table in spec["tables"]}
        for _ in range(spec["repetitions"]):
            for table, snapshot_id in targets.items():
                loaded, total = timed_read(spark, table, snapshot_id)
                loads[table].append(loaded)
                reads[table].append(total)
    finally:
        spark.stop()
    print(
        json.dumps(
            {
                "build_seconds": build_seconds,
                "snapshot_ids": targets,
                "load_seconds": loads,
                "read_seconds": reads,
            }
        )
    )


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))

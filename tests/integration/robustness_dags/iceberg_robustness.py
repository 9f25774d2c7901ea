"""Test DAGs for the robustness suite: retries, kills, concurrency and bad input on real Spark.

Used by ``tests/integration/test_retries_and_kills.py``, ``test_concurrency.py`` and
``test_bad_input.py`` through ``airflow tasks test`` with ``AIRFLOW__CORE__DAGS_FOLDER`` pointing
here. Each DAG is a plain story a data engineer would recognise; the tests decide which task runs
when, and how it is interrupted. Sizes are deliberately small except ``big_append``, which must
run long enough to be killed while it writes.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg.operators import (
    IcebergAppendOperator,
    IcebergCreateTableOperator,
    IcebergOverwriteOperator,
    IcebergOverwritePartitionsOperator,
    IcebergRemoveOrphanFilesOperator,
)

START = pendulum.datetime(2024, 1, 1, tz="UTC")
#: Rows of the long-running append; several seconds of writing on local[2].
BIG_APPEND_ROWS = 2_000_000
#: Test-only JVM flags: small jobs on a busy 2-core machine start about 40% faster with the C1
#: JIT alone and the serial collector. Passed as the operators' own ``conf``, as a user would.
QUICK_START = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
#: The mapped appends of the concurrency DAG: one query per map index, disjoint ids.
BATCH_ROWS = 250
BATCHES = 4


def orders_for(day: str, count: int, amount_factor: float) -> str:
    """``count`` deterministic orders for ``day`` (the example DAG's source)."""
    return (
        f"SELECT id AS order_id, CAST(id % 17 AS INT) AS customer_id, "
        f"CAST(ROUND((id % 50 + 1) * {amount_factor}, 2) AS DECIMAL(10, 2)) AS amount, "
        f"DATE'{day}' AS order_date FROM range({count})"
    )


def events(first_id: int, count: int) -> str:
    """Events ``first_id ..`` with a payload wide enough that writing many of them takes a while."""
    return (
        "SELECT id AS event_id, CAST(id % 97 AS INT) AS kind, "
        f"sha2(CAST(id AS STRING), 256) AS payload FROM range({first_id}, {first_id + count})"
    )


def sales(first_id: int, count: int, region: str, factor: int = 1) -> str:
    return (
        f"SELECT id AS sale_id, '{region}' AS region, CAST(id * {factor} AS BIGINT) AS amount "
        f"FROM range({first_id}, {first_id + count})"
    )


# ----------------------------------------------------------------- retries after a commit

with DAG(
    "robust_retry",
    schedule=None,
    start_date=START,
    catchup=False,
    tags=["iceberg", "test"],
    default_args={"conf": QUICK_START},
):
    create = IcebergCreateTableOperator(
        task_id="create_orders",
        table="db.orders",
        mode="create_or_replace",
        source_query=orders_for("2024-01-01", 100, 1.0),
        partition_by=["days(order_date)"],
        table_properties={"format-version": "2"},
    )
    append = IcebergAppendOperator(
        task_id="append_day_two", table="db.orders", source_query=orders_for("2024-01-02", 80, 1.0)
    )
    correct = IcebergOverwritePartitionsOperator(
        task_id="correct_day_one", table="db.orders", source_query=orders_for("2024-01-01", 90, 1.1)
    )
    create >> append >> correct

# ----------------------------------------------------------------- a long write, killed

with DAG(
    "robust_kill",
    schedule=None,
    start_date=START,
    catchup=False,
    tags=["iceberg", "test"],
    params={"older_than": None},
    default_args={"conf": QUICK_START},
):
    create_events = IcebergCreateTableOperator(
        task_id="create_events",
        table="db.events",
        source_query=events(0, 1000),
        # Small row groups and files: a writer's files appear on disk (and roll) while it writes,
        # so a kill mid-write leaves finished and half-written files behind.
        table_properties={
            "write.parquet.row-group-size-bytes": str(1 << 20),
            "write.target-file-size-bytes": str(16 << 20),
        },
    )
    big_append = IcebergAppendOperator(
        task_id="big_append", table="db.events", source_query=events(1000, BIG_APPEND_ROWS)
    )
    find_orphans = IcebergRemoveOrphanFilesOperator(
        task_id="find_orphans", table="db.events", older_than="{{ params.older_than }}",
        allow_recent_files=True,  # the test knows the killed writes are dead: it killed them
    )
    remove_orphans = IcebergRemoveOrphanFilesOperator(
        task_id="remove_orphans", table="db.events", older_than="{{ params.older_than }}", dry_run=False,
        allow_recent_files=True,
    )
    create_events >> big_append >> find_orphans >> remove_orphans

# ----------------------------------------------------------------- concurrent writers

#: Both corrections validate from this snapshot: the one current before either of them ran.
SERIALIZABLE = {"isolation-level": "serializable", "validate-from-snapshot-id": "{{ params.validate_from }}"}

with DAG(
    "robust_concurrency",
    schedule=None,
    start_date=START,
    catchup=False,
    tags=["iceberg", "test"],
    params={"validate_from": None},
    default_args={"conf": QUICK_START, "driver_memory": "512m"},
):
    create_sales = IcebergCreateTableOperator(
        task_id="create_sales",
        table="db.sales",
        source_query=sales(0, 10, "seed"),
        partition_by=["region"],
        table_properties={"format-version": "2"},
    )
    # One append per batch, all into the same table at the same time.
    append_batch = IcebergAppendOperator.partial(task_id="append_batch", table="db.sales").expand(
        source_query=[sales(BATCH_ROWS * (i + 1), BATCH_ROWS, f"batch{i}") for i in range(BATCHES)]
    )
    # Two late deliveries, each replacing its own partition.
    replace_batch0 = IcebergOverwritePartitionsOperator(
        task_id="replace_batch0", table="db.sales", source_query=sales(10_000, 7, "batch0")
    )
    replace_batch1 = IcebergOverwritePartitionsOperator(
        task_id="replace_batch1", table="db.sales", source_query=sales(20_000, 5, "batch1")
    )
    # Two corrections of the same rows that both started from the same snapshot: one must lose.
    correct_batch0_a = IcebergOverwriteOperator(
        task_id="correct_batch0_a",
        table="db.sales",
        condition="region = 'batch0'",
        source_query=sales(10_000, 7, "batch0", factor=2),
        write_options=SERIALIZABLE,
    )
    correct_batch0_b = IcebergOverwriteOperator(
        task_id="correct_batch0_b",
        table="db.sales",
        condition="region = 'batch0'",
        source_query=sales(10_000, 7, "batch0", factor=3),
        write_options=SERIALIZABLE,
    )
    create_sales >> append_batch >> [replace_batch0, replace_batch1]
    [replace_batch0, replace_batch1] >> correct_batch0_a >> correct_batch0_b

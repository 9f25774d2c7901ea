"""Feed a downstream table with only what is new: incremental and bounded streaming reads.

Events land in an Iceberg table in batches. One consumer copies exactly the rows appended
between two snapshots (an incremental read, bounds from XComs); another keeps a mirror of the
events since batch one up to date with a bounded Structured Streaming read whose checkpoint
remembers what it already took, so running it again after the next batch appends only that batch.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg.operators import (
    IcebergAppendOperator,
    IcebergCreateTableOperator,
    IcebergIncrementalReadOperator,
    IcebergStreamReadOperator,
)

EVENTS = "feed.events"


def batch(first_id: int, count: int) -> str:
    return f"SELECT id, concat('event-', id) AS payload FROM range({first_id}, {first_id + count})"


with DAG(
    dag_id="iceberg_incremental_feed",
    description="Incremental (snapshot range) and bounded streaming reads of an events table",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["iceberg", "example"],
    params={"checkpoints": "/tmp/airflow-iceberg-checkpoints"},
) as dag:
    create_events = IcebergCreateTableOperator(
        task_id="create_events", table=EVENTS, mode="create_or_replace", source_query=batch(0, 10)
    )
    batch_one = IcebergAppendOperator(task_id="batch_one", table=EVENTS, source_query=batch(10, 5))
    batch_two = IcebergAppendOperator(task_id="batch_two", table=EVENTS, source_query=batch(15, 5))
    new_since_create = IcebergIncrementalReadOperator(
        task_id="new_since_create",
        table=EVENTS,
        start_snapshot_id="{{ ti.xcom_pull(task_ids='create_events')['snapshot_id'] }}",
        end_snapshot_id="{{ ti.xcom_pull(task_ids='batch_two')['snapshot_id'] }}",
        sink_table="feed.new_events",
    )
    # One stream, run twice: the second run continues from the first one's checkpoint, so it
    # appends only batch_three (stream_from_timestamp matters only on the very first run).
    mirror_stream = {
        "table": EVENTS,
        "stream_from_timestamp": "{{ ti.xcom_pull(task_ids='batch_one')['committed_at'] }}",
        "checkpoint_location": "{{ params.checkpoints }}/{{ run_id | replace(':', '_') }}/mirror",
        "sink_table": "feed.events_mirror",
    }
    mirror = IcebergStreamReadOperator(task_id="mirror", **mirror_stream)
    batch_three = IcebergAppendOperator(task_id="batch_three", table=EVENTS, source_query=batch(20, 5))
    mirror_again = IcebergStreamReadOperator(task_id="mirror_again", **mirror_stream)

    create_events >> batch_one >> batch_two >> [new_since_create, mirror]
    mirror >> batch_three >> mirror_again

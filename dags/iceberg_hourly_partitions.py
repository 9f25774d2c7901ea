"""Hourly page views into an Iceberg table, and a daily report that runs once per day they touched.

The story: page views land every hour. The hourly producer is a partitioned DAG
(``CronPartitionTimetable``): each run replaces exactly its own hour of ``db.page_views``,
partitioned by ``hours(viewed_at)``, and its commit is announced as one asset event per hour it
changed, with that hour as the event's ``partition_key`` (``2024-01-02T05``). The daily report
is scheduled on those events through a partition mapper from hours to days, so each of its runs
has a day as its ``partition_key`` and reads exactly that day's hourly partitions.

Create the table once with ``iceberg_page_views_setup``. Connections (see README):
``iceberg_catalog_default`` and ``spark_default``; ``PAGE_VIEWS_ASSET`` is the table's asset
URI in that catalog (docs/assets-and-lineage.md shows each catalog type's).
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, CronPartitionTimetable, PartitionedAssetTimetable, StartOfDayMapper

from airflow_iceberg.assets import iceberg_asset
from airflow_iceberg.operators import (
    IcebergCreateTableOperator,
    IcebergOverwriteOperator,
    IcebergTimeTravelReadOperator,
)

PAGE_VIEWS = "db.page_views"
# The README's demo catalog keeps its warehouse in /data/warehouse.
WAREHOUSE = os.environ.get("ICEBERG_DEMO_WAREHOUSE", "file:///data/warehouse")
PAGE_VIEWS_ASSET = iceberg_asset(f"iceberg://hadoop/db/page_views?warehouse={WAREHOUSE}")
# One view every five minutes of the run's hour ("2024-01-02T05" -> 05:00, 05:05, ... UTC).
VIEWS_OF_THE_HOUR = (
    "SELECT id AS view_id, CAST(id % 3 AS INT) AS page_id, "
    "timestamp_seconds(unix_seconds(TIMESTAMP'{{ partition_key | replace('T', ' ') }}:00:00+00:00') "
    "+ id * 300) AS viewed_at FROM range(12)"
)

with DAG(
    dag_id="iceberg_page_views_setup",
    description="Create the hourly-partitioned page views table (once)",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["iceberg", "example", "partitions"],
):
    IcebergCreateTableOperator(
        task_id="create_page_views",
        table=PAGE_VIEWS,
        source_query="SELECT 0 AS view_id, 0 AS page_id, CAST(NULL AS TIMESTAMP) AS viewed_at WHERE false",
        partition_by=["hours(viewed_at)"],
    )

with DAG(
    dag_id="iceberg_hourly_page_views",
    description="Replace one hour of page views; announce the hour as the asset event's partition",
    # Keys say their grain ("2024-01-02T05"): the format Airflow's hourly mapper writes.
    schedule=CronPartitionTimetable("0 * * * *", timezone="UTC", key_format="%Y-%m-%dT%H"),
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["iceberg", "example", "partitions"],
):
    IcebergOverwriteOperator(
        task_id="load_hour",
        table=PAGE_VIEWS,
        source_query=VIEWS_OF_THE_HOUR,
        partition_key="{{ partition_key }}",  # replace exactly this hour
        partition_column="viewed_at",
        partition_events=True,  # one asset event per hour the commit changed
    )

with DAG(
    dag_id="iceberg_daily_page_view_report",
    description="Read exactly the day whose hours changed",
    schedule=PartitionedAssetTimetable(
        assets=PAGE_VIEWS_ASSET,
        default_partition_mapper=StartOfDayMapper(input_format="%Y-%m-%dT%H"),  # hour -> its day
    ),
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["iceberg", "example", "partitions"],
):
    IcebergTimeTravelReadOperator(
        task_id="read_day",
        table=PAGE_VIEWS,
        partition_key="{{ partition_key }}",  # "2024-01-02": its 24 hourly partitions
        partition_column="viewed_at",
        preview_rows=1000,
    )

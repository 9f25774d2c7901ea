"""The plain-Spark side of the throughput comparison: ``spark.sql(query).write.parquet(path)``.

    spark-submit write_parquet.py QUERY PATH

No Iceberg, no Airflow: the same rows written the way a Spark job without this provider would.
"""

from __future__ import annotations

import sys


def main(query: str, path: str) -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("airflow-iceberg-bench plain parquet").getOrCreate()
    try:
        spark.sql(query).write.mode("overwrite").parquet(path)
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

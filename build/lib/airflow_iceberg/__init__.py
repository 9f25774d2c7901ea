"""airflow-iceberg: Apache Iceberg tables as first-class citizens of Spark ETL in Apache Airflow.

Importing this package is cheap: it never imports pyspark or pyiceberg, so DAG parsing stays fast.
"""

__version__ = "0.1.0"

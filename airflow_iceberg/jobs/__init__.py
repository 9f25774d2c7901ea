"""The PySpark side of airflow-iceberg: files that spark-submit ships to the cluster.

Nothing in this package may import Airflow: it runs where only pyspark is installed.
"""

from pathlib import Path

#: The application file the operators submit.
ICEBERG_JOB_PATH = Path(__file__).with_name("iceberg_job.py")
#: Shipped beside the application with ``--py-files``: the argv contract both sides share.
JOB_SPEC_PATH = Path(__file__).with_name("job_spec.py")

#!/usr/bin/env bash
# `make test`: every suite, with the PySpark job suites running beside the Airflow-side ones.
#
# The Airflow-side suites (unit, integration with real Airflow, spark-submit and catalog servers)
# run in two pytest-xdist workers; they spend part of their time waiting on JVMs, servers and the
# Airflow CLI. Meanwhile, in the background and into their own log (printed when they end): the
# job suite (one shared local SparkSession) on Spark 3.5, then on Spark 4.0, then the example DAG
# end to end on Spark 4.0's spark-submit (the Airflow side runs it on Spark 3.5, and over Spark
# Connect on a Spark 4.1 server). Any failure fails the whole run.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/local_env.sh

AIRFLOW_SIDE=${AIRFLOW_SIDE:-"tests/unit tests/integration tests/servers"}
JOB_TESTS=${JOB_TESTS:-tests/jobs}
# The example DAG's run on a Hadoop catalog; the client-deploy-mode run and the README quickstart
# (whose connection names no Spark line, so it is Spark 3.5's) stay on the Airflow side.
SPARK4_EXAMPLE_DAG=(tests/integration/test_example_dag.py -k "not client_deploy_mode and not readme")
job_log=$(mktemp -t airflow-iceberg-job-tests.XXXXXX)

spark_lines() {
  local status=0
  for line in 3.5 4.0; do
    echo "==> job suite on Spark $line"
    (SPARK_LINE=$line source scripts/local_env.sh &&
       "$SPARK_VENV/bin/python" -m pytest -q -p no:cacheprovider $JOB_TESTS) || status=1
  done
  echo "==> the example DAG on Spark 4.0's spark-submit"
  (SPARK_LINE=4.0 source scripts/local_env.sh && pytest -q "${SPARK4_EXAMPLE_DAG[@]}") || status=1
  return $status
}

spark_lines > "$job_log" 2>&1 &
job_pid=$!

# (files in the order tests/integration/conftest.py gives them: the longest first)
pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=60 $AIRFLOW_SIDE
airflow_side=$?

wait "$job_pid"
lines_status=$?
cat "$job_log"
rm -f "$job_log"

echo "==> Airflow-side suites: exit $airflow_side; job suites and the Spark 4.0 example DAG: exit $lines_status"
[ "$airflow_side" = 0 ] && [ "$lines_status" = 0 ]

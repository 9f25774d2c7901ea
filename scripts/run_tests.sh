#!/usr/bin/env bash
# `make test`: every suite, with the PySpark job suites running beside the Airflow-side ones.
#
# The Airflow-side suites (unit, integration with real Airflow, spark-submit and catalog servers)
# run in two pytest-xdist workers; they spend much of their time waiting on JVMs, servers and the
# Airflow CLI. The job suites (one shared local SparkSession each, Spark 3.5 then Spark 4.0) run in
# the background meanwhile, into their own log, which is printed when they end. Then the example
# DAG runs end to end on Spark 4.0's spark-submit. Any failure fails the whole run.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/local_env.sh

AIRFLOW_SIDE=${AIRFLOW_SIDE:-"tests/unit tests/integration tests/servers"}
JOB_TESTS=${JOB_TESTS:-tests/jobs}
job_log=$(mktemp -t airflow-iceberg-job-tests.XXXXXX)

job_suites() {
  local status=0
  for line in 3.5 4.0; do
    echo "==> job suite on Spark $line"
    (SPARK_LINE=$line source scripts/local_env.sh &&
       "$SPARK_VENV/bin/python" -m pytest -q -p no:cacheprovider $JOB_TESTS) || status=1
  done
  return $status
}

job_suites > "$job_log" 2>&1 &
job_pid=$!

pytest -q -n 2 --dist loadfile --durations=25 $AIRFLOW_SIDE
airflow_side=$?

wait "$job_pid"
jobs_status=$?
cat "$job_log"
rm -f "$job_log"

echo "==> the example DAG on Spark 4.0"
(SPARK_LINE=4.0 source scripts/local_env.sh &&
   pytest -q tests/integration/test_example_dag.py -k "not client_deploy_mode")
spark4_dag=$?

echo "==> Airflow side: exit $airflow_side; job suites: exit $jobs_status; Spark 4.0 example DAG: exit $spark4_dag"
[ "$airflow_side" = 0 ] && [ "$jobs_status" = 0 ] && [ "$spark4_dag" = 0 ]

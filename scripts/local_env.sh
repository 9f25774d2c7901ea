# Source this file to work with the checkout's local Airflow and Spark:  source scripts/local_env.sh
# It only exports variables; scripts/setup.sh creates what they point at.
# SPARK_LINE picks the Spark runtime, as the Spark installed on an Airflow worker would:
#   3.5 (default)  .spark-venv   pyspark 3.5, Scala 2.12, iceberg-spark-runtime-3.5_2.12 (1.12.0)
#   4.0            .spark4-venv  pyspark 4.0, Scala 2.13, iceberg-spark-runtime-4.0_2.13 (1.11.0)
#   4.1            .spark41-venv pyspark 4.1, Scala 2.13, iceberg-spark-runtime-4.1_2.13 (1.12.0)
# Each line's runtime is the one a connection without iceberg_version gets (DEFAULT_ICEBERG_VERSIONS
# in airflow_iceberg/catalog/iceberg_runtimes.py): Iceberg publishes no 1.12.0 for Spark 4.0.
#   e.g.  SPARK_LINE=4.0 source scripts/local_env.sh
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export AIRFLOW_HOME="$_root/.airflow"
export AIRFLOW__CORE__DAGS_FOLDER="$_root/dags"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__UNIT_TEST_MODE=False
# Spark's machine-level settings (loopback only, no UI port) live in spark-defaults.conf, not in DAGs.
export SPARK_CONF_DIR="$_root/.spark-conf"
export SPARK_LOCAL_IP=127.0.0.1
export SPARK_LINE="${SPARK_LINE:-3.5}"
case "$SPARK_LINE" in
  3.5) _venv=.spark-venv;  _scala=2.12; _iceberg=1.12.0 ;;
  4.0) _venv=.spark4-venv; _scala=2.13; _iceberg=1.11.0 ;;
  4.1) _venv=.spark41-venv; _scala=2.13; _iceberg=1.12.0 ;;
  *) echo "local_env.sh: SPARK_LINE=$SPARK_LINE is not one of 3.5, 4.0, 4.1" >&2; return 1 2>/dev/null || exit 1 ;;
esac
export SPARK_VENV="$_root/$_venv"
_artifact="iceberg-spark-runtime-${SPARK_LINE}_$_scala"
export ICEBERG_RUNTIME_COORDINATE="org.apache.iceberg:$_artifact:$_iceberg"
export ICEBERG_RUNTIME_JAR="$_root/.cache/jars/$_artifact-$_iceberg.jar"
# S3 support, from Maven Central like the runtime (scripts/setup.sh fetches them into .cache/jars):
# S3FileIO's AWS SDK v2 in the iceberg-aws-bundle of the runtime's own release, and S3A's hadoop-aws
# for pyspark 3.5.9's Hadoop 3.3.4 with the AWS SDK v1 bundle that hadoop-aws 3.3.4 was built against.
export ICEBERG_AWS_BUNDLE_COORDINATE="org.apache.iceberg:iceberg-aws-bundle:$_iceberg"
export ICEBERG_AWS_BUNDLE_JAR="$_root/.cache/jars/iceberg-aws-bundle-$_iceberg.jar"
export HADOOP_AWS_JARS="$_root/.cache/jars/hadoop-aws-3.3.4.jar,$_root/.cache/jars/aws-java-sdk-bundle-1.12.262.jar"
# openlineage-spark, the peer OpenLineage producer tests/jobs/test_openlineage_spark.py compares with.
export OPENLINEAGE_SPARK_COORDINATE="io.openlineage:openlineage-spark_$_scala:1.53.0"
export OPENLINEAGE_SPARK_JAR="$_root/.cache/jars/openlineage-spark_$_scala-1.53.0.jar"
# Nessie's server for the Nessie catalog tests (its Quarkus runner jar, Java 21+).
export NESSIE_RUNNER_JAR="$_root/.cache/jars/nessie-quarkus-0.99.0-runner.jar"
# The YARN test cluster's classpath (Hadoop 3.3.4's ResourceManager and NodeManager, from .cache/m2).
export YARN_SERVER_CLASSPATH="$_root/.cache/yarn-server.classpath"
# spark-submit's --packages resolves through Ivy, whose cache lives in the checkout (setup warms it).
export SPARK_IVY_CACHE="$_root/.cache/ivy"
export ICEBERG_DEMO_WAREHOUSE="$_root/warehouse"
# Airflow workers find spark-submit on PATH; here it comes from the separate Spark runtime.
# SPARK_HOME and PYSPARK_PYTHON pin that runtime: otherwise spark-submit's find-spark-home asks
# the first `python` on PATH, which is Airflow's, whose pyspark-client has no Spark distribution.
export PATH="$_root/.venv/bin:$SPARK_VENV/bin:$PATH"
export PYSPARK_PYTHON="$SPARK_VENV/bin/python"
export PYSPARK_DRIVER_PYTHON="$PYSPARK_PYTHON"
# (Only once the runtime is installed: before that the glob matches nothing, and setup.sh sources
# this file again after creating the venvs.)
for _home in "$SPARK_VENV"/lib/python3*/site-packages/pyspark; do
  if [ -d "$_home" ]; then export SPARK_HOME="$_home"; fi
done
unset _home _venv _scala _iceberg _artifact
# The demo's connections, as a user would define them (see README "Quickstart").
export AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[2]"}'
export AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT="{\"conn_type\": \"iceberg_catalog\", \"extra\": {\"catalog_name\": \"demo\", \"catalog_type\": \"hadoop\", \"warehouse\": \"file://$ICEBERG_DEMO_WAREHOUSE\", \"spark_version\": \"$SPARK_LINE\", \"runtime_jar\": \"$ICEBERG_RUNTIME_JAR\"}}"
unset _root

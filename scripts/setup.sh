#!/usr/bin/env bash
# Set up everything `make demo` and `make test` need, idempotently, from PyPI, apt and Maven Central:
#   .venv/        Airflow 3 + the apache-spark provider + this package (editable) + test tools
#   .spark-venv/  pyspark 3.5 (spark-submit, the JVM jars), kept apart from Airflow's pyspark-client
#   .spark4-venv/ pyspark 4.0, the second Spark line (SPARK_LINE=4.0 in scripts/local_env.sh);
#                 .spark41-venv/ (pyspark 4.1) only when asked for with SPARK_LINES="3.5 4.0 4.1"
#   .cache/jars/  the official Iceberg Spark runtime jar of each Spark line, from Maven Central
#   .airflow/     AIRFLOW_HOME with a migrated SQLite metadata database
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/local_env.sh

PYTHON=${PYTHON:-python3}
stamp() { sha256sum "$@" | sha256sum | cut -c1-16; }

make_venv() {  # make_venv DIR REQUIREMENTS [EXTRA_ARGS...]
  local dir=$1 req=$2; shift 2
  local want; want=$(stamp "$req" pyproject.toml)
  if [ -f "$dir/.installed" ] && [ "$(cat "$dir/.installed")" = "$want" ]; then return; fi
  echo "==> creating $dir from $req"
  [ -x "$dir/bin/python" ] || "$PYTHON" -m venv "$dir"
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check uv
  "$dir/bin/uv" pip install --quiet --python "$dir/bin/python" -r "$req" "$@"
  echo "$want" > "$dir/.installed"
}

make_venv .venv requirements/airflow.txt -e .

# Each Spark line's runtime (its venv, as scripts/local_env.sh names it) and the official Apache
# Iceberg Spark runtime built for it, from Maven Central, with Maven's local repository kept inside
# the checkout (.cache/m2) so a second setup needs no network. `make test` runs 3.5 and 4.0;
# SPARK_LINES="3.5 4.0 4.1" adds the 4.1 line for `make spark41-test`.
declare -A SPARK_REQUIREMENTS=([3.5]=requirements/spark.txt [4.0]=requirements/spark4.txt \
                               [4.1]=requirements/spark41.txt)
for line in ${SPARK_LINES:-3.5 4.0}; do
  (
    SPARK_LINE=$line source scripts/local_env.sh
    make_venv "$SPARK_VENV" "${SPARK_REQUIREMENTS[$line]}"
    if [ ! -s "$ICEBERG_RUNTIME_JAR" ]; then
      echo "==> fetching $ICEBERG_RUNTIME_COORDINATE from Maven Central"
      mvn -q -B dependency:copy -Dartifact="$ICEBERG_RUNTIME_COORDINATE" \
        -DoutputDirectory="$(dirname "$ICEBERG_RUNTIME_JAR")" -Dmaven.repo.local="$PWD/.cache/m2"
    fi
  )
done

# JDBC drivers for the JDBC catalog tests (PostgreSQL, SQLite); PostgreSQL itself for its server.
if [ ! -f /usr/share/java/postgresql.jar ] || [ ! -f /usr/share/java/sqlite-jdbc.jar ] \
   || [ ! -x /usr/lib/postgresql/15/bin/initdb ] || ! command -v docker-compose >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    echo "==> installing JDBC drivers and PostgreSQL from apt"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libpostgresql-jdbc-java libxerial-sqlite-jdbc-java postgresql docker-compose >/dev/null
  else
    echo "warning: JDBC drivers or PostgreSQL missing; run as root or install libpostgresql-jdbc-java," \
         "libxerial-sqlite-jdbc-java and postgresql" >&2
  fi
fi

# Headless Chromium and its WebDriver for the connection-form browser test
# (tests/integration/test_connection_ui.py); test tools cannot download browsers here.
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "==> installing chromium and chromium-driver from apt"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      chromium chromium-driver >/dev/null
  else
    echo "warning: chromium or chromium-driver missing; run as root or install them" \
         "(the browser test is skipped without them)" >&2
  fi
fi

mkdir -p "$AIRFLOW_HOME" "$SPARK_CONF_DIR"
cp scripts/spark-defaults.conf "$SPARK_CONF_DIR/spark-defaults.conf"
if [ ! -f "$AIRFLOW_HOME/.migrated" ]; then
  echo "==> migrating the Airflow metadata database in $AIRFLOW_HOME"
  airflow db migrate >/dev/null
  touch "$AIRFLOW_HOME/.migrated"
fi
pysparks=$(for line in ${SPARK_LINES:-3.5 4.0}; do
  (SPARK_LINE=$line source scripts/local_env.sh && "$SPARK_VENV/bin/python" -c "import pyspark; print(pyspark.__version__)")
done | paste -sd, -)
echo "==> ready: Airflow $(airflow version 2>/dev/null | tail -1), pyspark $pysparks"

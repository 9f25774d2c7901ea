#!/usr/bin/env bash
# Set up, idempotently, from PyPI, apt and Maven Central, what `make demo` or `make test` needs.
#
#   bash scripts/setup.sh demo   only what the demo runs (`make demo`): no root, no apt, no servers
#     .venv/        Airflow 3 + the apache-spark provider + this package (editable) + pyiceberg
#     .spark-venv/  pyspark 3.5 (spark-submit, the JVM jars), kept apart from Airflow's pyspark-client
#     .cache/jars/  the Iceberg Spark runtime jar for Spark 3.5, from Maven Central
#     .airflow/     AIRFLOW_HOME with a migrated SQLite metadata database
#
#   bash scripts/setup.sh        everything `make test` needs (`make setup`): the demo's part, then
#     .venv/        + the test tools, the cncf-kubernetes and OpenLineage providers
#     .spark-venv/  + pytest and pyiceberg, for the job suite
#     .spark4-venv/ pyspark 4.0, the second Spark line (SPARK_LINE=4.0 in scripts/local_env.sh)
#     .spark41-venv/ pyspark 4.1, the third (SPARK_LINE=4.1): the Spark Connect test server runs it
#     .cache/jars/  each line's runtime, the S3 jars, openlineage-spark and Nessie's server
#     .cache/m2/    Maven's local repository, with the YARN test cluster's Hadoop jars
#                   (.cache/yarn-server.classpath lists them)
#     .cache/ivy/   spark-submit --packages' Ivy cache, warmed with the runtime and iceberg-aws-bundle
#     apt           PostgreSQL, the JDBC drivers and Chromium (as root; otherwise a warning)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/local_env.sh

SCOPE=${1:-all}
case "$SCOPE" in
  demo) SPARK_LINES=3.5 ;;
  all) ;;
  *) echo "usage: bash scripts/setup.sh [demo]" >&2; exit 2 ;;
esac
PYTHON=${PYTHON:-python3}
stamp() { sha256sum "$@" | sha256sum | cut -c1-16; }

# A venv's .installed lists the stamp of each requirements file it satisfies: the full install
# satisfies the demo's too (requirements/airflow.txt includes requirements/demo.txt), so that
# `make demo` after `make test` installs nothing.
make_venv() {  # make_venv DIR REQUIREMENTS [ALSO_SATISFIED_REQUIREMENTS...] [-- EXTRA_ARGS...]
  local dir=$1 req=$2; shift 2
  local satisfied=("$req")
  while [ $# -gt 0 ] && [ "$1" != -- ]; do satisfied+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  local file missing=
  for file in "${satisfied[@]}"; do
    grep -qxF "$(stamp "$file" pyproject.toml)" "$dir/.installed" 2>/dev/null || missing=1
  done
  [ -n "$missing" ] || return 0
  echo "==> creating $dir from $req"
  [ -x "$dir/bin/python" ] || "$PYTHON" -m venv "$dir"
  [ -x "$dir/bin/uv" ] || "$dir/bin/python" -m pip install --quiet --disable-pip-version-check uv
  # --compile-bytecode: this kind of machine (and many container images) sets
  # PYTHONDONTWRITEBYTECODE=1, so without it every process compiles Airflow from source
  # (docs/how-it-runs.md, "Bytecode").
  "$dir/bin/uv" pip install --quiet --compile-bytecode --python "$dir/bin/python" -r "$req" "$@"
  for file in "${satisfied[@]}"; do stamp "$file" pyproject.toml; done > "$dir/.installed"
}

if [ "$SCOPE" = demo ]; then
  make_venv .venv requirements/demo.txt -- -e .
else
  make_venv .venv requirements/airflow.txt requirements/demo.txt -- -e .
fi
# The checkout's own modules are an editable install, which uv does not compile: bytecode for
# them too (a no-op when nothing changed), so that no process compiles them from source.
.venv/bin/python -m compileall -q -j 0 airflow_iceberg dags tests benchmarks scripts >/dev/null

# Jars from Maven Central, with Maven's local repository kept inside the checkout (.cache/m2) so a
# second setup needs no network.
fetch_jar() {  # fetch_jar GROUP:ARTIFACT:VERSION JAR_PATH
  if [ ! -s "$2" ]; then
    command -v mvn >/dev/null || {
      echo "setup.sh: Maven (mvn) fetches $1 from Maven Central; install Maven 3 (apt: maven)" >&2
      exit 1
    }
    echo "==> fetching $1 from Maven Central"
    mvn -q -B dependency:copy -Dartifact="$1" -DoutputDirectory="$(dirname "$2")" \
      -Dmaven.repo.local="$PWD/.cache/m2"
  fi
}

# Each Spark line's runtime (its venv, as scripts/local_env.sh names it), the official Apache
# Iceberg Spark runtime built for it (the release a connection without iceberg_version gets) and,
# for the tests, the iceberg-aws-bundle of that release (S3FileIO's AWS SDK v2) and openlineage-spark.
# `make test` runs the suites on 3.5 and 4.0 and its Spark Connect server on 4.1
# (tests/servers/spark_connect.py), so all three are set up; `make spark41-test` runs the suites on
# 4.1 too. The demo runs on 3.5 alone, with pyspark and nothing else in its venv.
declare -A SPARK_REQUIREMENTS=([3.5]=requirements/spark.txt [4.0]=requirements/spark4.txt \
                               [4.1]=requirements/spark41.txt)
for line in ${SPARK_LINES:-3.5 4.0 4.1}; do
  (
    SPARK_LINE=$line source scripts/local_env.sh
    if [ "$SCOPE" = demo ]; then
      make_venv "$SPARK_VENV" requirements/demo-spark.txt
    else
      make_venv "$SPARK_VENV" "${SPARK_REQUIREMENTS[$line]}" \
        $([ "$line" = 3.5 ] && echo requirements/demo-spark.txt)
    fi
    fetch_jar "$ICEBERG_RUNTIME_COORDINATE" "$ICEBERG_RUNTIME_JAR"
    if [ "$SCOPE" = all ]; then
      fetch_jar "$ICEBERG_AWS_BUNDLE_COORDINATE" "$ICEBERG_AWS_BUNDLE_JAR"
      fetch_jar "$OPENLINEAGE_SPARK_COORDINATE" "$OPENLINEAGE_SPARK_JAR"
    fi
  )
done

# The runtimes exist now: source the environment again so SPARK_HOME points into the default one.
source scripts/local_env.sh

mkdir -p "$AIRFLOW_HOME" "$SPARK_CONF_DIR"
cp scripts/spark-defaults.conf "$SPARK_CONF_DIR/spark-defaults.conf"
# A connection without runtime_jar gets the runtime through spark-submit --packages, which Spark
# resolves with Ivy from Maven Central (or your Ivy settings' mirror). Its cache is kept in the
# checkout (and warmed below for the tests), so that runs resolve from it without downloading.
echo "spark.jars.ivy                   $SPARK_IVY_CACHE" >> "$SPARK_CONF_DIR/spark-defaults.conf"
if [ ! -f "$AIRFLOW_HOME/.migrated" ]; then
  echo "==> migrating the Airflow metadata database in $AIRFLOW_HOME"
  airflow db migrate >/dev/null
  touch "$AIRFLOW_HOME/.migrated"
fi

if [ "$SCOPE" = all ]; then
  # What only the tests need.
  # S3A's jars: hadoop-aws and its AWS SDK v1 bundle.
  IFS=, read -r hadoop_aws_jar aws_sdk_jar <<< "$HADOOP_AWS_JARS"
  fetch_jar org.apache.hadoop:hadoop-aws:3.3.4 "$hadoop_aws_jar"
  fetch_jar com.amazonaws:aws-java-sdk-bundle:1.12.262 "$aws_sdk_jar"
  # A Nessie server for the Nessie catalog tests (runs on the Temurin JDK: Nessie 0.99 needs Java 21).
  fetch_jar org.projectnessie.nessie:nessie-quarkus:0.99.0:jar:runner "$NESSIE_RUNNER_JAR"
  # Hadoop 3.3.4's ResourceManager and NodeManager for the YARN test cluster (tests/servers/yarn.py):
  # their jars go to .cache/m2 and their classpath to $YARN_SERVER_CLASSPATH, with "@M2@" standing for
  # .cache/m2 so that the list holds in every worktree; resolved again when the pom changes.
  yarn_pom=tests/servers/java/yarn-daemons/pom.xml
  if [ ! -s "$YARN_SERVER_CLASSPATH" ] || [ "$yarn_pom" -nt "$YARN_SERVER_CLASSPATH" ]; then
    echo "==> resolving the YARN daemons' classpath ($yarn_pom) from Maven Central"
    mvn -q -B -f "$yarn_pom" dependency:build-classpath -Dmdep.outputFile="$YARN_SERVER_CLASSPATH" \
      -Dmdep.localRepoProperty=@M2@ -Dmaven.repo.local="$PWD/.cache/m2"
  fi

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

  # The Ivy cache, warmed once with the runtime and the aws bundle.
  ivy_packages="$ICEBERG_RUNTIME_COORDINATE,$ICEBERG_AWS_BUNDLE_COORDINATE"
  if [ "$(cat "$SPARK_IVY_CACHE/.warmed" 2>/dev/null)" != "$ivy_packages" ]; then
    echo "==> resolving $ivy_packages with spark-submit --packages into $SPARK_IVY_CACHE"
    noop_dir=$(mktemp -d) && : > "$noop_dir/noop.py"
    spark-submit --master "local[1]" --packages "$ivy_packages" "$noop_dir/noop.py" >"$noop_dir/log" 2>&1 \
      || { tail -30 "$noop_dir/log" >&2; exit 1; }
    rm -rf "$noop_dir"
    echo "$ivy_packages" > "$SPARK_IVY_CACHE/.warmed"
  fi
fi

pysparks=$(for line in ${SPARK_LINES:-3.5 4.0 4.1}; do
  (SPARK_LINE=$line source scripts/local_env.sh && "$SPARK_VENV/bin/python" -c "import pyspark; print(pyspark.__version__)")
done | paste -sd, -)
echo "==> ready ($SCOPE): Airflow $(airflow version 2>/dev/null | tail -1), pyspark $pysparks"

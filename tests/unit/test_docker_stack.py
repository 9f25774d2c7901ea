"""Check the Docker stack without Docker: the compose file, the image recipe, and the settings the
connections in them produce through the provider's real code.

Docker cannot run on the machines this project is developed and tested on, so everything that
can be checked statically is checked here: the services and their wiring (ports on 127.0.0.1,
names the others use), the ``AIRFLOW_CONN_*`` connections fed through Airflow's own connection
parsing, ``config_from_fields``/``spark_settings`` and SparkSubmitHook, and the versions pinned
in the Dockerfile against the ones ``make test`` runs. When a compose CLI is present,
``docker compose config`` validates the file as well.

    .venv/bin/pytest docker/test_docker_stack.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from airflow_iceberg.catalog.config import DEFAULT_ICEBERG_VERSION, config_from_fields
from airflow_iceberg.catalog.iceberg_runtimes import DEFAULT_ICEBERG_VERSIONS
from airflow_iceberg.catalog.spark_settings import runtime_coordinate, spark_settings

DOCKER = Path(__file__).resolve().parents[2] / "docker"
REPO = DOCKER.parent
COMPOSE = DOCKER / "compose.yaml"
DOCKERFILE = DOCKER / "Dockerfile"
S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"
LOCAL_ENV = REPO / "scripts" / "local_env.sh"


def local_env_value(name: str) -> str:
    """A value ``scripts/local_env.sh`` exports on the default Spark line: what ``make test`` runs."""
    env = {key: value for key, value in os.environ.items() if key != "SPARK_LINE"}
    completed = subprocess.run(
        ["bash", "-c", f'source "{LOCAL_ENV}" && printf %s "${name}"'],
        env=env, capture_output=True, text=True, check=True,
    )
    assert completed.stdout, f"scripts/local_env.sh exports no {name}"
    return completed.stdout


AWS_BUNDLE = local_env_value("ICEBERG_AWS_BUNDLE_COORDINATE")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


@pytest.fixture(scope="module")
def airflow_env(services) -> dict[str, str]:
    return services["airflow"]["environment"]


def connection(airflow_env, conn_id: str) -> dict:
    return json.loads(airflow_env[f"AIRFLOW_CONN_{conn_id.upper()}"])


def requirement_lines(requirements: str) -> str:
    """A requirements file's text with the files it includes (``-r demo.txt``), as pip reads it."""
    text = (REPO / "requirements" / requirements).read_text()
    included = re.findall(r"^-r\s+(\S+)", text, re.M)
    return "\n".join([text, *(requirement_lines(name) for name in included)])


def pinned(requirements: str, package: str) -> str:
    text = requirement_lines(requirements)
    return re.search(rf"^{re.escape(package)}(?:\[[^\]]*\])?==(\S+)", text, re.M).group(1)


def dockerfile_arg(name: str) -> str:
    return re.search(rf"^ARG {name}=(\S+)", DOCKERFILE.read_text(), re.M).group(1)


# --------------------------------------------------------------------------- services and wiring


def test_stack_has_airflow_spark_catalog_and_object_store(services):
    assert set(services) == {"airflow", "spark-master", "spark-worker", "rest", "minio", "create-bucket"}
    assert services["airflow"]["command"] == "standalone"
    assert services["rest"]["image"].startswith("apache/iceberg-rest-fixture")


def test_every_published_port_is_loopback_only(services):
    published = {name: service.get("ports", []) for name, service in services.items()}
    assert {name: ports for name, ports in published.items() if ports} == {
        "airflow": ["127.0.0.1:8080:8080"],
        "spark-master": ["127.0.0.1:8081:8081"],
        "spark-worker": ["127.0.0.1:8082:8082"],
        "rest": ["127.0.0.1:8181:8181"],
        "minio": ["127.0.0.1:9000:9000", "127.0.0.1:9001:9001"],
    }


def test_spark_daemons_run_from_the_provider_image(services):
    for name in ("spark-master", "spark-worker"):
        service = services[name]
        assert service["image"] == services["airflow"]["image"]
        assert service["build"] == services["airflow"]["build"]
        assert service["entrypoint"] == ["/opt/spark/bin/spark-class"]
    assert services["spark-master"]["command"][0] == "org.apache.spark.deploy.master.Master"
    assert services["spark-worker"]["command"][0] == "org.apache.spark.deploy.worker.Worker"


def test_worker_and_airflow_point_at_the_master(services, airflow_env, monkeypatch):
    master = services["spark-master"]
    args = master["command"]
    master_url = f"spark://{args[args.index('--host') + 1]}:{args[args.index('--port') + 1]}"
    assert master["hostname"] == "spark-master"
    assert services["spark-worker"]["command"][-1] == master_url

    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", airflow_env["AIRFLOW_CONN_SPARK_DEFAULT"])
    argv = SparkSubmitHook(conn_id="spark_default")._build_spark_submit_command("job.py")
    assert argv[argv.index("--master") + 1] == master_url
    assert argv[argv.index("--deploy-mode") + 1] == "client"


def test_driver_advertises_the_airflow_container(services, airflow_env):
    airflow = services["airflow"]
    conf_dir = airflow_env["SPARK_CONF_DIR"]
    mounts = dict(volume.split(":")[1::-1] for volume in airflow["volumes"])
    defaults_source = mounts[f"{conf_dir}/spark-defaults.conf"]
    defaults = dict(
        line.split(None, 1)
        for line in (DOCKER / defaults_source).read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    assert defaults["spark.driver.host"] == airflow["hostname"] == "airflow"
    assert defaults["spark.driver.bindAddress"] == "0.0.0.0"


def test_airflow_starts_after_the_bucket_exists(services):
    assert services["airflow"]["depends_on"]["create-bucket"] == {
        "condition": "service_completed_successfully"
    }
    command = " ".join(services["create-bucket"]["command"])
    assert "mc mb --ignore-existing local/warehouse" in command


# --------------------------------------------------------------------------- the catalog connection


def test_catalog_connection_yields_rest_catalog_on_s3(airflow_env):
    conn = connection(airflow_env, "iceberg_catalog_default")
    assert conn["conn_type"] == "iceberg_catalog"
    config = config_from_fields(
        extra=conn["extra"],
        host=conn.get("host"),
        port=conn.get("port"),
        login=conn.get("login"),
        password=conn.get("password"),
    )
    settings = spark_settings(config)
    prefix = f"spark.sql.catalog.{config.catalog_name}"
    assert settings.conf[prefix] == "org.apache.iceberg.spark.SparkCatalog"
    assert settings.conf[f"{prefix}.type"] == "rest"
    assert settings.conf[f"{prefix}.uri"] == "http://rest:8181"
    assert settings.conf[f"{prefix}.io-impl"] == S3_FILE_IO
    assert settings.conf[f"{prefix}.s3.endpoint"] == "http://minio:9000"
    assert settings.conf[f"{prefix}.s3.path-style-access"] == "true"
    # runtime and S3FileIO's AWS SDK both come from Maven Central, at the versions make test runs
    assert settings.jars == ()
    assert settings.packages == (runtime_coordinate(config), AWS_BUNDLE)
    assert (
        runtime_coordinate(config)
        == f"org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:{DEFAULT_ICEBERG_VERSION}"
        == local_env_value("ICEBERG_RUNTIME_COORDINATE")
    )


def test_catalog_s3_keys_travel_as_secrets_not_argv(airflow_env):
    conn = connection(airflow_env, "iceberg_catalog_default")
    settings = spark_settings(config_from_fields(extra=conn["extra"], host=conn["host"]))
    assert set(settings.secret_conf) == {
        "spark.sql.catalog.demo.s3.access-key-id",
        "spark.sql.catalog.demo.s3.secret-access-key",
    }
    assert not any("access-key" in key for key in settings.conf)


def test_hook_reads_the_same_connection_from_the_environment(airflow_env, monkeypatch):
    from airflow_iceberg.hooks.iceberg_catalog import IcebergCatalogHook

    monkeypatch.setenv(
        "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", airflow_env["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"]
    )
    settings = IcebergCatalogHook().spark_settings()
    assert settings.catalog_names == ("demo",)
    assert settings.conf["spark.sql.catalog.demo.io-impl"] == S3_FILE_IO
    assert AWS_BUNDLE in settings.packages


def test_catalog_server_and_client_agree_on_storage(services, airflow_env):
    rest, minio = services["rest"]["environment"], services["minio"]["environment"]
    extra = connection(airflow_env, "iceberg_catalog_default")["extra"]
    properties = {**extra["catalog_properties"], **extra["secret_properties"]}
    assert rest["CATALOG_IO__IMPL"] == S3_FILE_IO
    assert rest["CATALOG_S3_ENDPOINT"] == properties["s3.endpoint"]
    assert (
        rest["CATALOG_WAREHOUSE"] == connection(airflow_env, "iceberg_catalog_default")["extra"]["warehouse"]
    )
    assert (
        (rest["AWS_ACCESS_KEY_ID"], rest["AWS_SECRET_ACCESS_KEY"])
        == (minio["MINIO_ROOT_USER"], minio["MINIO_ROOT_PASSWORD"])
        == (properties["s3.access-key-id"], properties["s3.secret-access-key"])
    )


# --------------------------------------------------------------------------- the image


def test_image_pins_the_versions_make_test_runs():
    assert dockerfile_arg("AIRFLOW_VERSION") == pinned("airflow.txt", "apache-airflow")
    assert dockerfile_arg("SPARK_PROVIDER_VERSION") == pinned(
        "airflow.txt", "apache-airflow-providers-apache-spark"
    )
    assert dockerfile_arg("PYSPARK_VERSION") == pinned("spark.txt", "pyspark")
    assert re.search(
        r"^FROM apache/airflow:\$\{AIRFLOW_VERSION\}-python\$\{PYTHON_VERSION\}$",
        DOCKERFILE.read_text(),
        re.M,
    )


def test_the_spark4_build_it_documents_is_the_one_make_test_runs():
    build_arg = f"PYSPARK_VERSION={pinned('spark4.txt', 'pyspark')}"
    assert build_arg in DOCKERFILE.read_text()
    assert build_arg in (REPO / "docs" / "docker.md").read_text()
    config = config_from_fields({"warehouse": "s3://warehouse/", "spark_version": "4.0"})
    runtime = f"org.apache.iceberg:iceberg-spark-runtime-4.0_2.13:{DEFAULT_ICEBERG_VERSIONS['4.0']}"
    assert runtime_coordinate(config) == runtime


def test_image_sets_up_spark_like_local_env():
    text = DOCKERFILE.read_text()
    assert "openjdk-17-jre-headless" in text
    for variable, value in (
        ("SPARK_HOME", "/opt/spark"),
        ("PYSPARK_PYTHON", "/opt/spark-venv/bin/python"),
        ("PYSPARK_DRIVER_PYTHON", "/opt/spark-venv/bin/python"),
    ):
        assert re.search(rf"\b{variable}={re.escape(value)}\b", text), variable
    # Spark's bin directory goes after Airflow's, so `python` stays Airflow's interpreter
    assert 'ENV PATH="${PATH}:/opt/spark-venv/bin"' in text


def test_build_context_lets_in_what_the_image_copies():
    copied = set()
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("COPY "):
            copied.update(part.rstrip("/") for part in line.split()[1:-1] if not part.startswith("--"))
    allowed = {
        line[1:].rstrip("/")
        for line in (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    assert copied <= allowed
    assert all((REPO / path).exists() for path in copied)


# --------------------------------------------------------------------------- the compose CLI, if any


def compose_cli() -> list[str] | None:
    """``docker compose`` (the plugin) or ``docker-compose``, whichever works without a daemon."""
    candidates = [["docker", "compose"]] if shutil.which("docker") else []
    candidates += [["docker-compose"]] if shutil.which("docker-compose") else []
    for candidate in candidates:
        if subprocess.run([*candidate, "version"], capture_output=True, check=False).returncode == 0:
            return candidate
    return None


def test_compose_cli_accepts_the_file():
    cli = compose_cli()
    if cli is None:
        pytest.skip("no docker compose CLI here (the plugin or docker-compose); YAML checks above still ran")
    completed = subprocess.run(
        [*cli, "-f", str(COMPOSE), "config", "--quiet"], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 0, completed.stderr

"""A Spark Connect server from the Spark 4.1 runtime, with the Iceberg runtime, on 127.0.0.1.

It runs the newest Spark line that has an Iceberg runtime (4.1, Iceberg 1.12.0), the server a new
deployment starts with; the workers' client is pyspark-client 4.2, one minor ahead, as Spark
Connect allows. pip's pyspark 4.1 (``.spark41-venv``) has no ``sbin/start-connect-server.sh`` but
ships the server in ``jars/spark-connect_2.13-4.1.4.jar``; the script only runs ``spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer``, which is what this does. The Iceberg
runtime (and the AWS bundle, for the REST catalog on S3) goes on the classpath with ``--jars``
and Iceberg's SQL extensions into ``spark.sql.extensions``, the two things a server must start
with; catalogs are set per session by the operators, except their secrets, which a server must
start with too (``conf``: written to a private properties file, as a deployment keeps them in
spark-defaults.conf, never on the server's command line). The gRPC port is a free 127.0.0.1 port.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from airflow_iceberg.catalog.iceberg_runtimes import DEFAULT_ICEBERG_VERSIONS

from .ports import LOOPBACK, free_port, port_accepts
from .process import ManagedProcess, OneProcessServer, ServerError
from .safety_net import tracked_start

REPO_ROOT = Path(__file__).resolve().parents[2]
#: The Spark line the server runs, and its runtime's virtualenv (scripts/setup.sh creates it).
SERVER_SPARK_LINE = "4.1"
SERVER_SPARK_VENV = REPO_ROOT / ".spark41-venv"
#: The line's default Iceberg release, the one a connection without iceberg_version gets.
SERVER_ICEBERG_VERSION = DEFAULT_ICEBERG_VERSIONS[SERVER_SPARK_LINE]
SERVER_ICEBERG_RUNTIME = (
    REPO_ROOT / f".cache/jars/iceberg-spark-runtime-{SERVER_SPARK_LINE}_2.13-{SERVER_ICEBERG_VERSION}.jar"
)
ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"


def server_spark_home(venv: Path = SERVER_SPARK_VENV) -> Path:
    """The pyspark package directory of the server's Spark runtime (it has ``jars/`` and ``bin/``)."""
    found = sorted(venv.glob("lib/python3*/site-packages/pyspark"))
    if not found:
        raise ServerError(
            f"no pyspark in {venv}: scripts/setup.sh creates the Spark {SERVER_SPARK_LINE} runtime"
        )
    return found[-1]


class SparkConnectServer(OneProcessServer):
    """Spark Connect on ``sc://127.0.0.1:<port>``, local[2], with the Iceberg runtime of its Spark line.

    Attributes:
        workdir: Folder holding the server log (``spark-connect.log``) and its working files.
        port: The gRPC port (filled at start).
    """

    def __init__(
        self,
        workdir: Path,
        *,
        extra_jars: tuple[Path, ...] = (),
        driver_class_path: tuple[Path, ...] = (),
        conf: Mapping[str, str] | None = None,
        event_log: bool = False,
        startup_timeout: float = 180.0,
    ):
        """Prepares (does not start) the server.

        Args:
            workdir: Private folder for this server; created if missing.
            extra_jars: More jars for its classpath (the runtime is always there).
            driver_class_path: Jars for the JVM's own class path: Hadoop loads file systems
                (S3A) from there, not from ``--jars``.
            conf: More Spark settings, secrets included: they go to a properties file only this
                user can read (``--properties-file``, with spark-defaults.conf still loaded).
            event_log: Write Spark's event log to ``event_log_dir``.
            startup_timeout: Seconds to wait for the gRPC port (10-30 s here).
        """
        self.workdir = Path(workdir).absolute()
        self.extra_jars = extra_jars
        self.driver_class_path = driver_class_path
        self.conf = dict(conf or {})
        self.event_log = event_log
        self.startup_timeout = startup_timeout
        self.port = 0
        self.process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"sc://{LOOPBACK}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "spark-connect.log"

    @property
    def event_log_dir(self) -> Path:
        return self.workdir / "event-log"

    def event_log_text(self) -> str:
        """Everything the server's event log holds so far (Spark flushes it at each job's end)."""
        files = sorted(path for path in self.event_log_dir.rglob("*") if path.is_file())
        return "".join(path.read_text(errors="replace") for path in files)

    def connection(self) -> dict:
        """The apache-spark provider's ``spark_connect`` connection for this server."""
        return {"conn_type": "spark_connect", "host": LOOPBACK, "port": self.port}

    def start(self) -> SparkConnectServer:
        """Starts the server and waits until its gRPC port accepts connections.

        Raises:
            ServerError: If the runtime is missing, the server exits, or does not listen in time.
        """
        home = server_spark_home()
        server_jar = next(iter(sorted((home / "jars").glob("spark-connect_2.13-*.jar"))), None)
        if server_jar is None or not SERVER_ICEBERG_RUNTIME.is_file():
            raise ServerError(
                f"the Spark {SERVER_SPARK_LINE} runtime needs jars/spark-connect_2.13-*.jar and "
                f"{SERVER_ICEBERG_RUNTIME}: scripts/setup.sh installs both"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        jars = ",".join(str(jar) for jar in (SERVER_ICEBERG_RUNTIME, *self.extra_jars))
        argv = [
            SERVER_SPARK_VENV / "bin/spark-submit",
            "--class",
            "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--name",
            "airflow-iceberg-test-connect",
            "--master",
            "local[2]",
            "--jars",
            jars,
            "--conf",
            f"spark.sql.extensions={ICEBERG_EXTENSIONS}",
            "--conf",
            f"spark.connect.grpc.binding.address={LOOPBACK}",
            "--conf",
            f"spark.connect.grpc.binding.port={self.port}",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            f"spark.sql.warehouse.dir={self.workdir / 'spark-warehouse'}",
            *self._properties_file_arguments(),
        ]
        if self.driver_class_path:
            argv += ["--driver-class-path", ":".join(str(jar) for jar in self.driver_class_path)]
        argv.append(server_jar)
        env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "PYSPARK_PYTHON": str(SERVER_SPARK_VENV / "bin/python"),
            "SPARK_LOCAL_IP": LOOPBACK,
        }
        self.process = ManagedProcess(
            "spark-connect", argv, log_path=self.log_path, cwd=self.workdir, env=env
        )
        self.process.start()
        with tracked_start(self):
            self.process.wait_until(
                lambda: port_accepts(LOOPBACK, self.port), timeout=self.startup_timeout, what="the gRPC port"
            )
        return self

    def _properties_file_arguments(self) -> list[str]:
        conf = dict(self.conf)
        if self.event_log:
            self.event_log_dir.mkdir(parents=True, exist_ok=True)
            conf.update(
                {
                    "spark.eventLog.enabled": "true",
                    "spark.eventLog.dir": self.event_log_dir.as_uri(),
                    # Spark 4 compresses (zstd) and rolls event logs by default; tests read them.
                    "spark.eventLog.compress": "false",
                    "spark.eventLog.rolling.enabled": "false",
                }
            )
        if not conf:
            return []
        path = self.workdir / "server.properties"
        path.unlink(missing_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            for key, value in conf.items():
                escaped = value.replace("\\", "\\\\")  # java.util.Properties reads a backslash as an escape
                handle.write(f"{key}={escaped}\n")
        # With --properties-file, Spark 4 reads spark-defaults.conf as well only when asked.
        return ["--properties-file", str(path), "--load-spark-defaults"]

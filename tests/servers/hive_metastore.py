"""A real Hive 2.3 thrift metastore on 127.0.0.1, built from pyspark's own jars.

Neither Debian nor PyPI ships a usable Hive, but pyspark's ``jars/`` folder holds a complete
Hive 2.3.9 metastore (with Derby, DataNucleus and libthrift). The stock ``HiveMetaStore`` main
binds the wildcard address and leaves out the lock tables Iceberg needs, so a small Java launcher
(``java/LoopbackMetastore.java``) is compiled once against those jars and cached by source hash.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from xml.sax.saxutils import escape

from .ports import LOOPBACK, free_port, port_accepts
from .process import ManagedProcess, OneProcessServer, ServerError, run_to_completion
from .safety_net import tracked_start

LAUNCHER_SOURCE = Path(__file__).with_name("java") / "LoopbackMetastore.java"
LAUNCHER_CLASS = "LoopbackMetastore"


def java_tool(name: str) -> str:
    """Finds ``java`` or ``javac``, preferring ``$JAVA_HOME/bin`` like Spark does.

    Args:
        name: Tool name.

    Returns:
        Path of the tool.

    Raises:
        FileNotFoundError: If the tool is nowhere to be found.
    """
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / name).is_file():
        return str(Path(java_home) / "bin" / name)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found; install a JDK 17 or set JAVA_HOME")
    return found


def spark_jars_dir(spark_home: Path) -> Path:
    """Returns the jars folder of a Spark home or of a pyspark package directory.

    Raises:
        FileNotFoundError: If ``spark_home`` has no Hive metastore jar.
    """
    jars = spark_home / "jars"
    if not any(jars.glob("hive-metastore-*.jar")):
        raise FileNotFoundError(f"no hive-metastore jar under {jars}; is {spark_home} a Spark home?")
    return jars


def compile_launcher(spark_home: Path, cache_dir: Path) -> Path:
    """Compiles the loopback launcher once per (source, Hive/Thrift jar set) and caches it.

    The cache key covers the jar names the source compiles against, so another Spark version
    gets its own build. Compilation happens in a temporary folder that is renamed into place, so
    concurrent test processes never see a half-written class.

    Args:
        spark_home: Spark home or pyspark package directory (with ``jars/``).
        cache_dir: Folder that keeps compiled launchers between runs.

    Returns:
        The folder holding ``LoopbackMetastore.class``, for the classpath.

    Raises:
        ServerError: If javac fails.
    """
    jars = spark_jars_dir(spark_home)
    digest = hashlib.sha256(LAUNCHER_SOURCE.read_bytes())
    for jar in sorted(jars.glob("*.jar")):
        if jar.name.startswith(("hive-", "libthrift")):
            digest.update(jar.name.encode())
    target = cache_dir / f"loopback-metastore-{digest.hexdigest()[:16]}"
    if (target / f"{LAUNCHER_CLASS}.class").is_file():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".javac-", dir=cache_dir))
    try:
        run_to_completion(
            [java_tool("javac"), "-nowarn", "-cp", f"{jars}/*", "-d", staging, LAUNCHER_SOURCE],
            log_path=cache_dir / "javac.log",
            timeout=120,
        )
        try:
            staging.rename(target)
        except OSError:
            if not (target / f"{LAUNCHER_CLASS}.class").is_file():  # lost a race only if it exists
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


# Log4j2 picks this file up from the classpath (the conf folder comes first). libthrift 0.12's
# TThreadPoolServer logs an ERROR with a stack trace each time a client simply disconnects, which
# would drown real errors in the log tail shown on failures, so that one logger is silenced.
LOG4J2_PROPERTIES = """\
status = warn
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %-5p %c{1}: %m%n
rootLogger.level = warn
rootLogger.appenderRef.console.ref = console
logger.thrift.name = org.apache.thrift.server.TThreadPoolServer
logger.thrift.level = off
"""


def hive_site_xml(properties: dict[str, str]) -> str:
    """Renders Hadoop-style configuration XML."""
    body = "".join(
        f"  <property>\n    <name>{escape(k)}</name>\n    <value>{escape(v)}</value>\n  </property>\n"
        for k, v in properties.items()
    )
    return f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n'


class HiveMetastore(OneProcessServer):
    """A Hive metastore with embedded Derby, serving thrift on 127.0.0.1.

    Attributes:
        workdir: Folder holding hive-site.xml, the Derby database, the warehouse and the log.
        spark_home: Spark home or pyspark package directory whose jars run the metastore.
        host: Always 127.0.0.1.
        port: Thrift port (chosen at start).
    """

    def __init__(
        self,
        workdir: Path,
        spark_home: Path,
        *,
        class_cache: Path | None = None,
        startup_timeout: float = 120.0,
        heap: str = "512m",
    ) -> None:
        """Prepares (does not start) the metastore.

        Args:
            workdir: Private folder for this server; created if missing.
            spark_home: Spark home or pyspark package directory (its ``jars/`` is the classpath).
            class_cache: Where the compiled launcher is cached; defaults to inside ``workdir``.
                Pass a folder that outlives the test session to skip javac on later runs.
            startup_timeout: Seconds to wait for the first successful thrift call.
            heap: JVM maximum heap.
        """
        self.workdir = Path(workdir).absolute()
        self.spark_home = Path(spark_home)
        self.class_cache = Path(class_cache) if class_cache else self.workdir / "classes"
        self.startup_timeout = startup_timeout
        self.heap = heap
        self.host = LOOPBACK
        self.port = 0
        self.process: ManagedProcess | None = None

    def __repr__(self) -> str:
        return f"HiveMetastore(uri={self.uri!r})"

    @property
    def uri(self) -> str:
        """Thrift URI for Spark's and pyiceberg's ``uri`` setting."""
        return f"thrift://{self.host}:{self.port}"

    @property
    def warehouse(self) -> str:
        """``file://`` URI of the warehouse folder (``hive.metastore.warehouse.dir``)."""
        return (self.workdir / "warehouse").as_uri()

    @property
    def log_path(self) -> Path:
        """The metastore JVM's stdout/stderr log."""
        return self.workdir / "metastore.log"

    def start(self) -> HiveMetastore:
        """Compiles (or reuses) the launcher, starts the JVM and waits for a real thrift call.

        Returns:
            self, for chaining.

        Raises:
            ServerError: If compilation, start-up or the readiness call fails in time.
        """
        if self.process is not None:
            raise ServerError("metastore already started")
        conf_dir = self.workdir / "conf"
        for folder in (conf_dir, self.workdir / "warehouse", self.workdir / "tmp"):
            folder.mkdir(parents=True, exist_ok=True)
        classes = compile_launcher(self.spark_home, self.class_cache)
        jars = spark_jars_dir(self.spark_home)
        (conf_dir / "hive-site.xml").write_text(hive_site_xml(self._hive_properties()))
        (conf_dir / "log4j2.properties").write_text(LOG4J2_PROPERTIES)
        self.port = free_port()
        argv = [
            java_tool("java"),
            f"-Xmx{self.heap}",
            "-XX:-UsePerfData",  # no /tmp/hsperfdata_* file left behind by a SIGKILL
            # A metastore for tests is start-up bound: the C1-only JIT and the serial GC cut its
            # start from ~7 s to ~3 s on a busy 2-core machine.
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            f"-Djava.io.tmpdir={self.workdir / 'tmp'}",
            f"-Dderby.system.home={self.workdir}",
            "-cp",
            os.pathsep.join([str(conf_dir), str(classes), f"{jars}/*"]),
            LAUNCHER_CLASS,
            str(self.port),
        ]
        env = {**os.environ, "HIVE_CONF_DIR": str(conf_dir)}
        self.process = ManagedProcess(
            "hive-metastore", argv, log_path=self.log_path, cwd=self.workdir, env=env
        ).start()
        with tracked_start(self):
            self.process.wait_until(
                self._ready, timeout=self.startup_timeout, what=f"thrift get_all_databases on {self.uri}"
            )
        return self

    def list_databases(self, timeout: float = 10.0) -> list[str]:
        """Lists databases with a raw thrift client, as a real metastore call.

        Uses the ``hive-metastore`` thrift bindings that ``pyiceberg[hive]`` brings, so the check
        does not depend on pyiceberg's catalog layer.

        Args:
            timeout: Socket timeout in seconds.

        Returns:
            Database names.
        """
        from hive_metastore.ThriftHiveMetastore import Client
        from thrift.protocol import TBinaryProtocol
        from thrift.transport import TSocket, TTransport

        sock = TSocket.TSocket(self.host, self.port)
        sock.setTimeout(timeout * 1000)
        transport = TTransport.TBufferedTransport(sock)
        transport.open()
        try:
            return list(Client(TBinaryProtocol.TBinaryProtocol(transport)).get_all_databases())
        finally:
            transport.close()

    def _ready(self) -> bool:
        # Probe the port first: the thrift client logs an ERROR for every refused connection.
        return port_accepts(self.host, self.port) and "default" in self.list_databases()

    def _hive_properties(self) -> dict[str, str]:
        derby = self.workdir / "metastore_db"
        return {
            "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={derby};create=true",
            "javax.jdo.option.ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver",
            "datanucleus.schema.autoCreateAll": "true",
            "hive.metastore.schema.verification": "false",
            "hive.metastore.warehouse.dir": self.warehouse,
            # Keep every scratch path inside the workdir rather than /tmp.
            "hive.exec.scratchdir": str(self.workdir / "tmp" / "scratch"),
            "hive.exec.local.scratchdir": str(self.workdir / "tmp" / "local-scratch"),
            "hive.downloaded.resources.dir": str(self.workdir / "tmp" / "resources"),
        }

"""A real YARN cluster on 127.0.0.1: Hadoop 3.3.4's ResourceManager and one NodeManager.

pyspark 3.5 bundles Hadoop 3.3.4's client and ``spark-yarn``, so ``spark-submit --master yarn`` (client
or cluster deploy mode) can run against these daemons. Their classpath comes from Maven Central:
``scripts/setup.sh`` resolves ``tests/servers/java/yarn-daemons/pom.xml`` into ``.cache/m2`` and writes
the jar list to ``$YARN_SERVER_CLASSPATH``. Each daemon is the stock main class in a JVM of its own,
configured only through files written here (``yarn-site.xml``, ``core-site.xml``,
``capacity-scheduler.xml``), every address pinned to a free 127.0.0.1 port and the file system the
local one (``file:///``), so a NodeManager container reads and writes the same paths as the test.

Why not ``MiniYARNCluster`` (``hadoop-yarn-server-tests``): it runs the ResourceManager and the
NodeManager in one JVM, and tried here, once the NodeManager's web app had started, every request
to the ResourceManager's web port was served by the NodeManager's web app (``GET
/ws/v1/cluster/info``: 404 "controller for v1 not found", ``NMWebAppFilter`` in the stack), as fits
Guice's ``GuiceFilter`` keeping one static pipeline per JVM. The apache-spark provider's
``yarn_track_via_rm_api`` polls that REST API (``GET /ws/v1/cluster/apps/{appId}``). Two JVMs avoid
it, and are what a real cluster runs.

The NodeManager runs containers with the DefaultContainerExecutor, as this user, each in a session
of its own (``setsid``): stopping the NodeManager stops them; :meth:`YarnCluster.stop` then kills
anything still running in the NodeManager's local directories (a container of a SIGKILLed
NodeManager), so no process outlives the server.

Measured on the 2-core, 24 GiB test machine (Java 17, pyspark 3.5.9) on 2026-12-02, while other
suites kept its load average at 9-15:

- start-up, both JVMs until ``GET /ws/v1/cluster/info`` answers STARTED and the node is RUNNING:
  9-12 s; stop: 0.4-3.2 s;
- resident memory once started: ResourceManager 220 MiB, NodeManager 184 MiB (``-Xmx256m`` each);
- one PySpark application in cluster deploy mode that creates an Iceberg table in a Hadoop catalog
  and appends to it (driver 512m in the ApplicationMaster's container, one 512m executor; two
  containers of 896 MiB): 56 s from spark-submit's start to ``FINISHED``/``SUCCEEDED`` in the REST
  API, of which spark-submit itself (``spark.yarn.submit.waitAppCompletion=false``) 15-18 s; the
  driver's JVM starts 5-9 s after submission and the executor's 7-15 s after the driver asks.
  With ``waitAppCompletion`` left true, a create, two appends and a count took 84 s.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

from .hive_metastore import hive_site_xml, java_tool
from .ports import LOOPBACK, free_ports
from .process import ManagedProcess, ServerError, StartStop
from .safety_net import tracked_start, untrack

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Where scripts/setup.sh writes the daemons' classpath; ``@M2@`` in it stands for ``M2_REPOSITORY``.
DEFAULT_CLASSPATH_FILE = REPO_ROOT / ".cache/yarn-server.classpath"
M2_REPOSITORY = REPO_ROOT / ".cache/m2"
M2_PLACEHOLDER = "@M2@"
RESOURCE_MANAGER_CLASS = "org.apache.hadoop.yarn.server.resourcemanager.ResourceManager"
NODE_MANAGER_CLASS = "org.apache.hadoop.yarn.server.nodemanager.NodeManager"
# Hadoop 3.3's web apps (Guice, Jersey) reflect into java.base, closed by default on Java 17.
JAVA17_OPENS = [
    f"--add-opens=java.base/java.{package}=ALL-UNNAMED"
    for package in ("lang", "lang.reflect", "util", "util.concurrent", "net", "io")
]
#: The daemons' ports, by role: RPC (client, scheduler, resource tracker, admin) and web.
RESOURCE_MANAGER_PORTS = ("rm", "rm_scheduler", "rm_tracker", "rm_admin", "rm_webapp")
NODE_MANAGER_PORTS = ("nm", "nm_localizer", "nm_webapp")
DAEMONS = {"resourcemanager": RESOURCE_MANAGER_CLASS, "nodemanager": NODE_MANAGER_CLASS}
#: Seconds the NodeManager gets to exit on SIGTERM before SIGKILL (see :meth:`YarnCluster.stop`).
NODE_MANAGER_STOP_SECONDS = 3.0
QUICK_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# The daemons log through reload4j (log4j 1.2), which reads log4j.properties from the classpath.
LOG4J_PROPERTIES = """\
log4j.rootLogger=WARN,console
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{HH:mm:ss.SSS} %-5p %c{1}: %m%n
log4j.logger.org.apache.hadoop.yarn.server.resourcemanager.RMAppManager$ApplicationSummary=INFO
log4j.logger.org.apache.hadoop.yarn.server.nodemanager.NodeStatusUpdaterImpl=INFO
"""


def daemon_classpath(classpath_file: Path | None = None) -> str:
    """The daemons' jars, from the file scripts/setup.sh writes.

    Raises:
        ServerError: If the file is missing (scripts/setup.sh has not run).
    """
    path = classpath_file or Path(os.environ.get("YARN_SERVER_CLASSPATH") or DEFAULT_CLASSPATH_FILE)
    if not path.is_file():
        raise ServerError(f"YARN classpath {path} missing: scripts/setup.sh resolves it from Maven Central")
    classpath = path.read_text().strip().replace(M2_PLACEHOLDER, str(M2_REPOSITORY))
    missing = [jar for jar in classpath.split(os.pathsep) if not Path(jar).is_file()]
    if missing:
        raise ServerError(f"{len(missing)} jars of {path} missing (first {missing[0]}): run scripts/setup.sh")
    return classpath


class YarnCluster(StartStop):
    """A ResourceManager and one NodeManager on 127.0.0.1, with the local file system.

    Attributes:
        workdir: Folder holding the configuration, the NodeManager's local and log directories,
            the Spark staging directory and both daemons' logs.
        ports: The daemons' ports by role (filled at start).
        processes: The ResourceManager's and the NodeManager's processes (filled at start).
    """

    def __init__(
        self,
        workdir: Path,
        *,
        classpath_file: Path | None = None,
        node_memory_mb: int = 4096,
        node_vcores: int = 4,
        heap: str = "256m",
        startup_timeout: float = 120.0,
    ) -> None:
        """Prepares (does not start) the cluster.

        Args:
            workdir: Private folder for this cluster; created if missing.
            classpath_file: The daemons' classpath; ``$YARN_SERVER_CLASSPATH`` or
                ``.cache/yarn-server.classpath`` by default.
            node_memory_mb: Memory the NodeManager offers to containers. A Spark application with
                a 512m driver and one 512m executor takes two containers of 896 MiB each.
            node_vcores: Virtual cores the NodeManager offers (more than the machine's 2 is fine:
                YARN does not enforce them without cgroups).
            heap: Maximum heap of each daemon JVM.
            startup_timeout: Seconds to wait for the ResourceManager's REST API and a RUNNING node.
        """
        self.workdir = Path(workdir).absolute()
        self.classpath_file = classpath_file
        self.node_memory_mb = node_memory_mb
        self.node_vcores = node_vcores
        self.heap = heap
        self.startup_timeout = startup_timeout
        self.ports: dict[str, int] = {}
        self.processes: dict[str, ManagedProcess] = {}

    def __repr__(self) -> str:
        return f"YarnCluster(rm_webapp_address={self.rm_webapp_address!r})"

    @property
    def conf_dir(self) -> Path:
        """``yarn-site.xml`` and ``core-site.xml``: what ``HADOOP_CONF_DIR``/``YARN_CONF_DIR`` point at."""
        return self.workdir / "conf"

    @property
    def rm_webapp_address(self) -> str:
        """The ResourceManager's web address (REST API under ``/ws/v1/cluster``), with scheme.

        What the apache-spark provider's ``yarn_resourcemanager_webapp_address`` takes.
        """
        return f"http://{LOOPBACK}:{self.ports.get('rm_webapp', 0)}"

    @property
    def staging_dir(self) -> Path:
        """Where spark-submit uploads an application's files (``spark.yarn.stagingDir``)."""
        return self.workdir / "staging"

    @property
    def node_log_dir(self) -> Path:
        """The NodeManager's log directory: ``<app id>/<container id>/{stdout,stderr}``."""
        return self.workdir / "nm-logs"

    def spark_env(self) -> dict[str, str]:
        """Environment variables spark-submit needs to find this cluster."""
        return {"HADOOP_CONF_DIR": str(self.conf_dir), "YARN_CONF_DIR": str(self.conf_dir)}

    def spark_conf(self, spark_home: Path, python: Path) -> dict[str, str]:
        """Spark settings for an application on this cluster, in client or cluster deploy mode.

        Args:
            spark_home: The Spark runtime's home (pip's pyspark package directory works): its
                ``jars/`` are used in place (``local:``), not zipped and uploaded for every
                application, as a cluster with Spark installed on its nodes would be set up.
            python: Interpreter (with pyspark) for the driver in the ApplicationMaster's container
                and for executors; the NodeManager runs on this machine, so a local path works.

        Returns:
            ``--conf`` settings.
        """
        return {
            "spark.yarn.jars": f"local:{spark_home}/jars/*",
            "spark.yarn.stagingDir": self.staging_dir.as_uri(),
            "spark.yarn.appMasterEnv.PYSPARK_PYTHON": str(python),
            "spark.executorEnv.PYSPARK_PYTHON": str(python),
            "spark.yarn.appMasterEnv.SPARK_LOCAL_IP": LOOPBACK,
            "spark.executorEnv.SPARK_LOCAL_IP": LOOPBACK,
            "spark.yarn.maxAppAttempts": "1",  # a failing test application fails once, not twice
            "spark.driver.memory": "512m",
            "spark.executor.memory": "512m",
            "spark.executor.instances": "1",
            # Test applications are short: C1 alone and the serial GC start the driver's and the
            # executor's JVMs faster on this small machine than the default tiered JIT and G1.
            "spark.driver.extraJavaOptions": QUICK_JVM_OPTIONS,
            "spark.executor.extraJavaOptions": QUICK_JVM_OPTIONS,
        }

    def start(self) -> YarnCluster:
        """Writes the configuration, starts both daemons and waits for a RUNNING node.

        Returns:
            self, for chaining.

        Raises:
            ServerError: If the classpath is missing, a daemon exits, or the node does not register
                in time; includes the log tail.
        """
        if self.processes:
            raise ServerError("YARN cluster already started")
        classpath = daemon_classpath(self.classpath_file)
        server_conf = self.workdir / "server-conf"
        for folder in (self.conf_dir, server_conf, self.workdir / "tmp", self.staging_dir):
            folder.mkdir(parents=True, exist_ok=True)
        roles = RESOURCE_MANAGER_PORTS + NODE_MANAGER_PORTS
        self.ports = dict(zip(roles, free_ports(len(roles)), strict=True))
        (self.conf_dir / "core-site.xml").write_text(hive_site_xml(self._core_site()))
        (self.conf_dir / "yarn-site.xml").write_text(hive_site_xml(self._yarn_site()))
        (server_conf / "capacity-scheduler.xml").write_text(hive_site_xml(self._capacity_scheduler()))
        (server_conf / "log4j.properties").write_text(LOG4J_PROPERTIES)
        java = java_tool("java")
        java_home = str(Path(java).resolve().parents[1])
        env = {**os.environ, "JAVA_HOME": java_home, **self.spark_env()}
        for variable in ("SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH"):
            env.pop(variable, None)  # containers get what the application asks for, not our test env
        with tracked_start(self):
            for role, main_class in DAEMONS.items():
                argv = [
                    java,
                    f"-Xmx{self.heap}",
                    "-XX:-UsePerfData",
                    # start-up bound daemons: C1 only and the serial GC, as for the Hive metastore
                    *QUICK_JVM_OPTIONS.split(),
                    *JAVA17_OPENS,
                    f"-Djava.io.tmpdir={self.workdir / 'tmp'}",
                    f"-Dhadoop.log.dir={self.workdir / 'logs'}",
                    f"-Dyarn.log.dir={self.workdir / 'logs'}",
                    "-cp",
                    os.pathsep.join([str(server_conf), str(self.conf_dir), classpath]),
                    main_class,
                ]
                self.processes[role] = ManagedProcess(
                    role, argv, log_path=self.workdir / f"{role}.log", cwd=self.workdir, env=env
                ).start()
            rm = self.processes["resourcemanager"]
            rm.wait_until(
                lambda: self.cluster_info().get("state") == "STARTED",
                timeout=self.startup_timeout,
                what=f"GET {self.rm_webapp_address}/ws/v1/cluster/info",
            )
            self.processes["nodemanager"].wait_until(
                self.running_nodes, timeout=self.startup_timeout, what="a RUNNING NodeManager"
            )
        return self

    def stop(self) -> None:
        """Stops the NodeManager (and its containers), then the ResourceManager. Safe twice.

        The NodeManager kills its containers within a second of SIGTERM but then takes 15-20 s more
        to exit (measured), so it gets SIGKILL after :data:`NODE_MANAGER_STOP_SECONDS`; whatever
        container it left is killed by working directory.

        Raises:
            ServerError: If a daemon or a container process survives SIGKILL.
        """
        try:
            if "nodemanager" in self.processes:
                self.processes["nodemanager"].stop(timeout=NODE_MANAGER_STOP_SECONDS)
            self._kill_leftover_containers()
            if "resourcemanager" in self.processes:
                self.processes["resourcemanager"].stop(timeout=20)
        finally:
            untrack(self)

    def request(self, path: str, timeout: float = 10.0) -> Any:
        """One GET of the ResourceManager's REST API, ``path`` relative to ``/ws/v1/cluster/``."""
        request = urllib.request.Request(
            f"{self.rm_webapp_address}/ws/v1/cluster/{path}", headers={"Accept": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.load(response)

    def cluster_info(self) -> dict[str, Any]:
        """``GET /ws/v1/cluster/info``'s ``clusterInfo`` (``state`` is ``STARTED`` once it serves)."""
        return dict(self.request("info")["clusterInfo"])

    def running_nodes(self) -> list[dict[str, Any]]:
        """The nodes in state RUNNING, from ``GET /ws/v1/cluster/nodes``."""
        nodes = (self.request("nodes").get("nodes") or {}).get("node", [])
        return [node for node in nodes if node.get("state") == "RUNNING"]

    def app(self, app_id: str) -> dict[str, Any]:
        """``GET /ws/v1/cluster/apps/{app_id}``'s ``app``: ``state``, ``finalStatus``, ``diagnostics``..."""
        return dict(self.request(f"apps/{app_id}")["app"])

    def apps(self) -> list[dict[str, Any]]:
        """Every application the ResourceManager knows, from ``GET /ws/v1/cluster/apps``."""
        return list((self.request("apps").get("apps") or {}).get("app", []))

    def container_logs(self, app_id: str, lines: int = 60) -> str:
        """The tails of every container's stdout and stderr of an application, for failure messages."""
        parts = []
        for log in sorted((self.node_log_dir / app_id).glob("*/std*")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {log.relative_to(self.node_log_dir)}\n" + "\n".join(text))
        return "\n".join(parts) or f"<no container logs for {app_id}>"

    def container_pids(self) -> list[int]:
        """Live processes whose working directory is in the NodeManager's local directories."""
        local = str(self.workdir / "nm-local")
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cwd = os.readlink(entry / "cwd")
            except OSError:  # exited meanwhile, or not ours to read
                continue
            if cwd == local or cwd.startswith(local + os.sep):
                found.append(int(entry.name))
        return found

    def _kill_leftover_containers(self) -> None:
        own_group = os.getpgid(0)
        deadline = time.monotonic() + 10
        while pids := self.container_pids():
            if time.monotonic() >= deadline:
                raise ServerError(f"container processes {pids} of {self!r} survived SIGKILL")
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    group = os.getpgid(pid)  # the container's session: bash, its JVM, Python workers
                    if group == own_group:  # never ours, but never kill the test process either
                        os.kill(pid, signal.SIGKILL)
                    else:
                        os.killpg(group, signal.SIGKILL)
            time.sleep(0.05)

    def _core_site(self) -> dict[str, str]:
        return {"fs.defaultFS": "file:///", "hadoop.tmp.dir": str(self.workdir / "tmp")}

    def _yarn_site(self) -> dict[str, str]:
        address = {role: f"{LOOPBACK}:{port}" for role, port in self.ports.items()}
        return {
            "yarn.resourcemanager.hostname": LOOPBACK,
            "yarn.resourcemanager.address": address["rm"],
            "yarn.resourcemanager.scheduler.address": address["rm_scheduler"],
            "yarn.resourcemanager.resource-tracker.address": address["rm_tracker"],
            "yarn.resourcemanager.admin.address": address["rm_admin"],
            "yarn.resourcemanager.webapp.address": address["rm_webapp"],
            "yarn.nodemanager.hostname": LOOPBACK,
            "yarn.nodemanager.address": address["nm"],
            "yarn.nodemanager.localizer.address": address["nm_localizer"],
            "yarn.nodemanager.webapp.address": address["nm_webapp"],
            # The NodeManager may start before the ResourceManager listens: retry soon, not in 30 s.
            "yarn.resourcemanager.connect.retry-interval.ms": "250",
            "yarn.nodemanager.local-dirs": str(self.workdir / "nm-local"),
            "yarn.nodemanager.log-dirs": str(self.node_log_dir),
            "yarn.nodemanager.resource.memory-mb": str(self.node_memory_mb),
            "yarn.nodemanager.resource.cpu-vcores": str(self.node_vcores),
            "yarn.nodemanager.resource.detect-hardware-capabilities": "false",
            "yarn.scheduler.minimum-allocation-mb": "128",
            "yarn.scheduler.maximum-allocation-mb": str(self.node_memory_mb),
            "yarn.scheduler.maximum-allocation-vcores": str(self.node_vcores),
            # Containers are JVMs and Python workers sharing one small machine with the tests: YARN's
            # memory checks would kill them for virtual memory they never touch.
            "yarn.nodemanager.vmem-check-enabled": "false",
            "yarn.nodemanager.pmem-check-enabled": "false",
            # A nearly full disk of a CI runner must not mark the only node unhealthy (default 90%).
            "yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage": "99",
        }

    def _capacity_scheduler(self) -> dict[str, str]:
        # One queue, "default", with all of the node; ApplicationMasters may use all of it too (the
        # default 10% would keep a Spark driver's container waiting in ACCEPTED on a 4 GiB node).
        return {
            "yarn.scheduler.capacity.root.queues": "default",
            "yarn.scheduler.capacity.root.default.capacity": "100",
            "yarn.scheduler.capacity.root.default.maximum-capacity": "100",
            "yarn.scheduler.capacity.maximum-am-resource-percent": "1.0",
        }

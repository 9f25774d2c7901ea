"""A Nessie server (the official Quarkus runner jar from Maven Central) on 127.0.0.1, in memory.

``scripts/setup.sh`` fetches ``org.projectnessie.nessie:nessie-quarkus:<version>:jar:runner``
into ``.cache/jars`` (``$NESSIE_RUNNER_JAR``). Nessie 0.99 is compiled for Java 21, so it runs on
the newest JDK under /usr/lib/jvm (the machines have a Temurin JDK next to Spark's Java 17), or
``$NESSIE_JAVA``. Both its HTTP and its management ports are pinned to free 127.0.0.1 ports; the
version store is in memory, so every start is an empty repository with a ``main`` branch.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

from .ports import LOOPBACK, free_ports
from .process import ManagedProcess, OneProcessServer, ServerError
from .safety_net import tracked_start

MIN_JAVA = 21


def java_version(java: Path) -> int:
    """The feature version (17, 21, 25, ...) of a ``java`` binary, or 0 if it does not run."""
    try:
        result = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=60)
    except OSError:
        return 0
    match = re.search(r'version "(\d+)', result.stderr)
    return int(match.group(1)) if match else 0


def find_java(minimum: int = MIN_JAVA) -> Path:
    """``$NESSIE_JAVA``, else the newest ``/usr/lib/jvm/*/bin/java`` of at least ``minimum``.

    Raises:
        FileNotFoundError: If no such Java is installed.
    """
    if os.environ.get("NESSIE_JAVA"):
        return Path(os.environ["NESSIE_JAVA"])
    found = {java: java_version(java) for java in Path("/usr/lib/jvm").glob("*/bin/java")}
    usable = sorted((version, str(java)) for java, version in found.items() if version >= minimum)
    if not usable:
        raise FileNotFoundError(f"Nessie needs Java {minimum}+; none under /usr/lib/jvm (set NESSIE_JAVA)")
    return Path(usable[-1][1])


class NessieServer(OneProcessServer):
    """Nessie with an in-memory version store, REST API v2 at :attr:`api_uri`.

    Attributes:
        workdir: Folder holding the server log.
        ports: HTTP and management ports (filled at start).
    """

    def __init__(self, workdir: Path, *, runner_jar: Path | None = None, startup_timeout: float = 180.0):
        """Prepares (does not start) the server.

        Args:
            workdir: Private folder for this server; created if missing.
            runner_jar: The Quarkus runner jar; ``$NESSIE_RUNNER_JAR`` by default.
            startup_timeout: Seconds to wait for ``GET /api/v2/config`` (Quarkus takes 5-45 s here).
        """
        self.workdir = Path(workdir).absolute()
        self.runner_jar = runner_jar or Path(os.environ.get("NESSIE_RUNNER_JAR", ""))
        self.startup_timeout = startup_timeout
        self.ports: dict[str, int] = {}
        self.process: ManagedProcess | None = None

    @property
    def api_uri(self) -> str:
        """Nessie REST API v2 base, what Iceberg's NessieCatalog takes as ``uri``."""
        return f"http://{LOOPBACK}:{self.ports.get('http', 0)}/api/v2"

    def start(self) -> NessieServer:
        """Starts Nessie and waits until its API answers.

        Raises:
            ServerError: If the jar is missing, Nessie exits, or it does not answer in time.
        """
        if not self.runner_jar.is_file():
            raise ServerError(f"Nessie runner jar {self.runner_jar} missing: scripts/setup.sh fetches it")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ports = dict(zip(("http", "management"), free_ports(2), strict=True))
        argv = [
            find_java(),
            "-Xmx512m",
            "-Dnessie.version.store.type=IN_MEMORY",
            f"-Dquarkus.http.host={LOOPBACK}",
            f"-Dquarkus.http.port={self.ports['http']}",
            f"-Dquarkus.management.host={LOOPBACK}",
            f"-Dquarkus.management.port={self.ports['management']}",
            "-Dquarkus.otel.sdk.disabled=true",
            "-jar",
            self.runner_jar,
        ]
        self.process = ManagedProcess("nessie", argv, log_path=self.workdir / "nessie.log", cwd=self.workdir)
        self.process.start()
        with tracked_start(self):
            self.process.wait_until(
                lambda: self.request("GET", "config").get("defaultBranch"),
                timeout=self.startup_timeout,
                what="GET /api/v2/config",
            )
        return self

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One JSON call to the REST API v2 (``path`` relative to ``/api/v2/``)."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.api_uri}/{path}", data=data, method=method, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)

    def create_branch(self, name: str, source: str = "main") -> None:
        """Creates branch ``name`` at the current head of ``source``."""
        head = self.request("GET", f"trees/{source}")["reference"]
        self.request("POST", f"trees?name={name}&type=BRANCH", {"type": "BRANCH", **head, "name": source})

    def metadata_location(self, ref: str, key: str) -> str:
        """The Iceberg metadata file that table ``key`` (``ns.table``) points at on ``ref``."""
        return str(self.request("GET", f"trees/{ref}/contents/{key}")["content"]["metadataLocation"])

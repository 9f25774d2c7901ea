"""A private PostgreSQL cluster on 127.0.0.1 for the JDBC / SQL catalog tests.

The cluster is created with ``initdb`` for each server, so tests never depend on (or damage) a
system database. Host connections need a password (SCRAM), so a wrong password really fails, as
it would against a production database. When we run as root the server runs as the ``postgres``
OS user, because PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from .ports import LOOPBACK, free_port, port_accepts
from .process import ManagedProcess, ServerError, StartStop, run_to_completion
from .safety_net import tracked_start, untrack

SERVER_USER = "postgres"
_DATA_DIR_PREFIX = "airflow-iceberg-pg-"  # followed by the owning test process's pid


def find_pg_bin() -> Path:
    """Finds the folder holding ``initdb`` and ``postgres``.

    Debian keeps them out of ``PATH`` under /usr/lib/postgresql/VERSION/bin, so this asks
    ``$PG_BIN``, then ``pg_config --bindir``, then ``PATH``, then the newest Debian version.

    Returns:
        The binaries folder.

    Raises:
        FileNotFoundError: If no PostgreSQL server binaries are installed.
    """
    candidates: list[Path] = []
    if os.environ.get("PG_BIN"):
        candidates.append(Path(os.environ["PG_BIN"]))
    if pg_config := shutil.which("pg_config"):
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        candidates.append(Path(out.stdout.strip()))
    if initdb := shutil.which("initdb"):
        candidates.append(Path(initdb).parent)

    def version(path: Path) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", path.parent.name))

    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "postgres").is_file():
            return folder
    raise FileNotFoundError("PostgreSQL server binaries (initdb, postgres) not found; set PG_BIN")


def remove_orphaned_clusters() -> None:
    """Deletes what test processes that were SIGKILLed left in the temp dir.

    The kernel kills such a server with its parent, but nothing is left to delete its cluster
    folder or the small SysV shared memory segment a killed postmaster leaves behind.
    """
    for folder in Path(tempfile.gettempdir()).glob(f"{_DATA_DIR_PREFIX}*"):
        owner = folder.name[len(_DATA_DIR_PREFIX) :].split("-", 1)[0]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            shmid = shared_memory_id(folder / "cluster")
            if shmid is not None and shutil.which("ipcrm"):
                subprocess.run(["ipcrm", "-m", str(shmid)], capture_output=True, check=False)
            shutil.rmtree(folder, ignore_errors=True)


def shared_memory_id(cluster: Path) -> int | None:
    """The SysV shared memory id a cluster's postmaster recorded in postmaster.pid, if any."""
    try:
        lines = (cluster / "postmaster.pid").read_text().splitlines()
    except OSError:
        return None
    fields = lines[6].split() if len(lines) > 6 else []  # line 7: "KEY SHMID"
    return int(fields[1]) if len(fields) == 2 and fields[1].isdigit() else None


def _server_user() -> str | None:
    """The OS user to run PostgreSQL as: ``postgres`` when we are root, else ourselves."""
    if os.geteuid() != 0:
        return None
    pwd.getpwnam(SERVER_USER)  # fail early with KeyError if the user does not exist
    return SERVER_USER


class PostgresServer(StartStop):
    """A throwaway PostgreSQL cluster with one database and one password-protected user.

    Attributes:
        workdir: Folder for the server log (the cluster itself lives in ``data_dir``).
        host: Always 127.0.0.1.
        port: TCP port (chosen at start).
        database: Database created for the tests, owned by ``user``.
        user: Login role with a password.
        password: That role's password.
        data_dir: Private cluster folder; see :meth:`start` for why it is not inside ``workdir``.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        database: str = "iceberg",
        user: str = "iceberg",
        password: str | None = None,
        pg_bin: Path | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        """Prepares (does not start) the server.

        Args:
            workdir: Private folder for this server; created if missing.
            database: Name of the database to create.
            user: Name of the login role to create (owner of ``database``).
            password: Its password; random by default.
            pg_bin: Folder with initdb/postgres; found with :func:`find_pg_bin` by default.
            startup_timeout: Seconds to wait for a password login to succeed.
        """
        self.workdir = Path(workdir).absolute()
        self.database = database
        self.user = user
        self.password = password or secrets.token_hex(12)
        self.pg_bin = pg_bin
        self.startup_timeout = startup_timeout
        self.host = LOOPBACK
        self.port = 0
        self.data_dir: Path | None = None
        self.process: ManagedProcess | None = None

    def __repr__(self) -> str:
        return f"PostgresServer(jdbc_uri={self.jdbc_uri!r})"

    @property
    def jdbc_uri(self) -> str:
        """JDBC URL for Spark's JDBC catalog (``uri`` with ``jdbc.user``/``jdbc.password``)."""
        return f"jdbc:postgresql://{self.host}:{self.port}/{self.database}"

    @property
    def sqlalchemy_uri(self) -> str:
        """SQLAlchemy URL (with credentials) for pyiceberg's SqlCatalog."""
        return f"postgresql+psycopg2://{self.user}:{self.password}@{self.host}:{self.port}/{self.database}"

    @property
    def log_path(self) -> Path:
        """The server's stdout/stderr log (initdb output too)."""
        return self.workdir / "postgres.log"

    def start(self) -> PostgresServer:
        """Creates the cluster, starts the server, creates the role and database.

        The cluster goes into a fresh private folder in the system temp dir rather than in
        ``workdir``: the ``postgres`` user cannot enter root's 0700 pytest folders, and the Unix
        socket path inside a deep pytest folder could pass the 107-byte limit.

        Returns:
            self, for chaining.

        Raises:
            ServerError: If initdb, start-up or the login check fails in time.
        """
        if self.process is not None:
            raise ServerError("postgres already started")
        self.workdir.mkdir(parents=True, exist_ok=True)
        pg_bin = self.pg_bin or find_pg_bin()
        run_as = _server_user()
        remove_orphaned_clusters()
        self.data_dir = Path(tempfile.mkdtemp(prefix=f"{_DATA_DIR_PREFIX}{os.getpid()}-"))
        with tracked_start(self):
            if run_as is not None:
                entry = pwd.getpwnam(run_as)
                os.chown(self.data_dir, entry.pw_uid, entry.pw_gid)
            run_to_completion(self._initdb_argv(pg_bin), log_path=self.log_path, timeout=120, user=run_as)
            self.port = free_port()
            self.process = self._server_process(pg_bin, run_as).start()
            self.process.wait_until(self._superuser_ready, timeout=self.startup_timeout, what="socket login")
            self._create_role_and_database()
            self.process.wait_until(
                self._login_works,
                timeout=self.startup_timeout,
                what=f"password login on {self.host}:{self.port}",
            )
        return self

    def interrupt(self) -> None:
        """Stop the server but keep its cluster and port: clients are refused until :meth:`resume`.

        For outage tests. The databases and everything in them survive.
        """
        if self.process is not None:
            self.process.stop()

    def resume(self) -> None:
        """Start the server again after :meth:`interrupt`, on the same port and cluster."""
        self.process = self._server_process(self.pg_bin or find_pg_bin(), _server_user()).start()
        self.process.wait_until(
            self._login_works, timeout=self.startup_timeout, what=f"password login on {self.host}:{self.port}"
        )

    def _server_process(self, pg_bin: Path, run_as: str | None) -> ManagedProcess:
        # SIGINT is PostgreSQL's "fast shutdown": it does not wait for clients to disconnect.
        return ManagedProcess(
            "postgres",
            self._server_argv(pg_bin),
            log_path=self.log_path,
            cwd=self.data_dir,
            user=run_as,
            stop_signal=signal.SIGINT,
        )

    def _initdb_argv(self, pg_bin: Path) -> list[str | Path]:
        assert self.data_dir is not None
        return [
            pg_bin / "initdb",
            "--pgdata", self.data_dir / "cluster",
            "--username", "postgres",
            "--auth-local", "trust",  # Unix socket: only used to create the role
            "--auth-host", "scram-sha-256",  # every TCP login needs the password
            "--encoding", "UTF8",
            "--locale", "C",
            "--no-sync",
        ]  # fmt: skip

    def _server_argv(self, pg_bin: Path) -> list[str | Path]:
        assert self.data_dir is not None
        return [
            pg_bin / "postgres",
            "-D", self.data_dir / "cluster",
            "-c", f"listen_addresses={self.host}",
            "-c", f"port={self.port}",
            "-c", f"unix_socket_directories={self.data_dir}",
            # Test data is disposable: trade durability for speed.
            "-c", "fsync=off",
            "-c", "synchronous_commit=off",
            "-c", "full_page_writes=off",
        ]  # fmt: skip

    def stop(self) -> None:
        """Stops the server (fast shutdown, then SIGKILL) and deletes the cluster. Safe twice."""
        try:
            if self.process is not None:
                self.process.stop()
        finally:
            if self.data_dir is not None:
                shutil.rmtree(self.data_dir, ignore_errors=True)
            untrack(self)

    def connect(self, *, password: str | None = None, **kwargs: Any) -> Any:
        """Opens a psycopg2 connection over TCP as :attr:`user`, like an application would.

        Args:
            password: Password to try; defaults to the right one.
            **kwargs: Extra ``psycopg2.connect`` arguments.

        Returns:
            A psycopg2 connection; the caller closes it.
        """
        import psycopg2

        return psycopg2.connect(
            host=self.host,
            port=self.port,
            dbname=self.database,
            user=self.user,
            password=self.password if password is None else password,
            connect_timeout=5,
            **kwargs,
        )

    def _superuser_connect(self) -> Any:
        import psycopg2

        # Through the Unix socket, where initdb set "trust", as the bootstrap superuser.
        return psycopg2.connect(
            host=str(self.data_dir), port=self.port, dbname="postgres", user="postgres", connect_timeout=5
        )

    def _superuser_ready(self) -> bool:
        if not port_accepts(self.host, self.port):
            return False
        self._superuser_connect().close()
        return True

    def _create_role_and_database(self) -> None:
        from psycopg2 import sql

        conn = self._superuser_connect()
        try:
            conn.autocommit = True  # CREATE DATABASE cannot run in a transaction
            with conn.cursor() as cur:
                cur.execute(
                    sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                        sql.Identifier(self.user), sql.Literal(self.password)
                    )
                )
                cur.execute(
                    sql.SQL("CREATE DATABASE {} OWNER {}").format(
                        sql.Identifier(self.database), sql.Identifier(self.user)
                    )
                )
        finally:
            conn.close()

    def _login_works(self) -> bool:
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT current_user, current_database()")
                return cur.fetchone() == (self.user, self.database)
        finally:
            conn.close()

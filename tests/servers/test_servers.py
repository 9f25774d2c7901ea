"""Integration tests of the test-server library: real servers, real clients, clean stops."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest

from .fixtures import spark_home
from .hive_metastore import HiveMetastore
from .nessie import NessieServer
from .ports import free_ports, is_port_free, wait_for_port
from .postgres import PostgresServer, remove_orphaned_clusters, shared_memory_id
from .process import ManagedProcess, ServerError
from .seaweedfs_rest import SeaweedRestCatalog
from .yarn import NODE_MANAGER_PORTS, RESOURCE_MANAGER_PORTS, YarnCluster

pytestmark = pytest.mark.integration

# sys.path entry from which this package imports under its current name (tests.servers or servers).
IMPORT_ROOT = str(Path(__file__).resolve().parents[len(__name__.split(".")) - 1])


# --- helpers -------------------------------------------------------------------------------------


def listening_addresses(pid: int) -> set[tuple[str, int]]:
    """(IP, port) pairs that process ``pid`` listens on, read from /proc (IPv4-mapped -> IPv4)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A = LISTEN
                continue
            hex_ip, hex_port = local.split(":")
            raw = bytes.fromhex(hex_ip)
            packed = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))  # host-order words
            ip = ipaddress.ip_address(packed)
            if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
                ip = ip.ipv4_mapped
            found.add((str(ip), int(hex_port, 16)))
    return found


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie (PID 1 in a container may never reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def shared_memory_ids() -> set[int]:
    """Ids of the SysV shared memory segments that exist now."""
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return {int(line.split()[1]) for line in lines}


def wait_dead(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def assert_stopped(proc: ManagedProcess, ports: list[int]) -> None:
    assert not proc.running()
    assert not proc.group_alive(), "a process of the server's group outlived stop()"
    for port in ports:
        assert is_port_free(port), f"port {port} still taken after stop()"


def assert_loopback_only(proc: ManagedProcess, expected_ports: set[int]) -> None:
    assert proc.pid is not None
    addresses = listening_addresses(proc.pid)
    assert addresses, "the server listens on nothing"
    assert {ip for ip, _ in addresses} == {"127.0.0.1"}, addresses
    assert expected_ports <= {port for _, port in addresses}, addresses


# --- ports and process helpers ---------------------------------------------------------------------


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = free_ports(12)
    assert len(set(ports)) == 12
    assert all(is_port_free(p) for p in ports)


def test_wait_for_port_returns_once_something_listens() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        wait_for_port("127.0.0.1", sock.getsockname()[1], timeout=5)


def test_wait_for_port_times_out_with_a_clear_error() -> None:
    (port,) = free_ports(1)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=f"127.0.0.1:{port}"):
        wait_for_port("127.0.0.1", port, timeout=0.3)
    assert time.monotonic() - started < 5


def test_wait_until_reports_an_early_exit_with_the_log_tail(tmp_path: Path) -> None:
    proc = ManagedProcess(
        "failing", ["sh", "-c", "echo boom-from-server; exit 3"], log_path=tmp_path / "x.log"
    )
    with proc, pytest.raises(ServerError, match=r"(?s)code 3.*boom-from-server"):
        proc.wait_until(lambda: False, timeout=30, what="never")


def test_wait_until_times_out_with_the_last_error(tmp_path: Path) -> None:
    def probe() -> bool:
        raise ConnectionRefusedError("not yet")

    proc = ManagedProcess("sleeper", ["sleep", "60"], log_path=tmp_path / "x.log")
    with proc, pytest.raises(ServerError, match=r"not ready after.*not yet"):
        proc.wait_until(probe, timeout=0.3, what="a probe")


def test_stop_kills_the_whole_process_group(tmp_path: Path) -> None:
    # The shell ignores SIGTERM and forks a grandchild: stop() must still leave nothing behind.
    script = "trap '' TERM; sleep 300 & echo child=$!; wait"
    proc = ManagedProcess("group", ["sh", "-c", script], log_path=tmp_path / "g.log").start()
    child = int(proc.wait_until(lambda: _child_pid(proc.log_path), timeout=10, what="child pid"))
    started = time.monotonic()
    proc.stop(timeout=1)
    assert time.monotonic() - started < 10
    assert not proc.group_alive()
    assert wait_dead(child)


def _child_pid(log: Path) -> str | None:
    text = log.read_text() if log.exists() else ""
    return text.split("child=", 1)[1].split()[0] if "child=" in text else None


HOLDER = textwrap.dedent(
    """
    import importlib, sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    mod = importlib.import_module(sys.argv[5])
    proc = mod.ManagedProcess("sleeper", ["sleep", "300"], log_path=Path(sys.argv[2]), user=sys.argv[4])
    proc.start()
    print(proc.pid, flush=True)
    sys.stdin.readline()  # the test checks the child is alive, then lets us go on
    if sys.argv[3] == "exit":
        sys.exit(0)
    # Short slices, not one sleep(300): CPython runs a Python signal handler only between
    # bytecodes, so a SIGTERM landing just before the sleep syscall would wait out the whole sleep.
    for _ in range(3000):
        time.sleep(0.1)
    """
)


@pytest.mark.parametrize("how", ["exit", "sigterm", "sigkill"])
def test_safety_net_stops_children_when_the_test_process_goes_away(tmp_path: Path, how: str) -> None:
    """atexit (normal exit), SIGTERM -> KeyboardInterrupt, and PDEATHSIG (SIGKILL) all clean up."""
    # Switching user (as root) must not lose the parent-death signal.
    user = "postgres" if os.geteuid() == 0 else ""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            HOLDER,
            IMPORT_ROOT,
            tmp_path / "h.log",
            how,
            user or "root",
            ManagedProcess.__module__,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        child = int(holder.stdout.readline())
        assert pid_alive(child)
        holder.stdin.write("go\n")
        holder.stdin.flush()
        if how == "sigterm":
            holder.send_signal(signal.SIGTERM)
        elif how == "sigkill":
            holder.kill()
        holder.wait(timeout=20)
        assert wait_dead(child), f"child {child} survived its parent ({how})"
    finally:
        holder.kill()
        holder.wait()


INTERRUPTED_SUITE = """
import os, time
from pathlib import Path
from {package}.postgres import PostgresServer

def test_hangs(tmp_path):
    with PostgresServer(tmp_path / "pg") as pg:
        Path(os.environ["SERVER_MARKER"]).write_text(f"{{pg.process.pid}} {{pg.data_dir}}")
        for _ in range(3000):  # short slices, so a signal sent right now is never held back
            time.sleep(0.1)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_interrupted_pytest_leaves_no_server_behind(tmp_path: Path, sig: signal.Signals) -> None:
    """A pytest run killed mid-test (Ctrl-C, CI timeout, OOM killer) must not leak its servers."""
    package = ManagedProcess.__module__.rsplit(".", 1)[0]
    (tmp_path / "test_hang.py").write_text(INTERRUPTED_SUITE.format(package=package))
    marker = tmp_path / "marker"
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'tmp'}"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": IMPORT_ROOT, "SERVER_MARKER": str(marker)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        # (the inner run writes the marker, so it can exist before its text is in it)
        while not marker.exists() or len(marker.read_text().split()) < 2:
            assert run.poll() is None and time.monotonic() < deadline, "inner pytest never started postgres"
            time.sleep(0.05)
        pid, data_dir = marker.read_text().split()
        run.send_signal(sig)
        output, _ = run.communicate(timeout=60)
        assert wait_dead(int(pid)), f"postgres outlived pytest ({sig.name}):\n{output}"
        if sig != signal.SIGKILL:  # teardown ran
            assert not Path(data_dir).exists(), output
        else:  # nothing could run; the next server start sweeps the orphaned cluster
            shmid = shared_memory_id(Path(data_dir) / "cluster")
            assert shmid is not None and shmid in shared_memory_ids()
            remove_orphaned_clusters()
            assert not Path(data_dir).exists()
            assert shmid not in shared_memory_ids()
    finally:
        run.kill()
        run.communicate()


# --- Hive metastore ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark_dir() -> Path:
    return spark_home()


@pytest.fixture(scope="module")
def metastore(tmp_path_factory: pytest.TempPathFactory, spark_dir: Path) -> Iterator[HiveMetastore]:
    cache = tmp_path_factory.mktemp("launcher-cache")
    with HiveMetastore(tmp_path_factory.mktemp("hms"), spark_dir, class_cache=cache) as server:
        yield server


def test_spark_home_has_the_hive_jars(spark_dir: Path) -> None:
    assert any((spark_dir / "jars").glob("hive-metastore-*.jar"))


def test_spark_home_prefers_the_env_var(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    assert spark_home() == tmp_path


def test_spark_home_reports_a_missing_interpreter(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setenv("SPARK_PYTHON", str(tmp_path / "no-python"))
    with pytest.raises(RuntimeError, match="SPARK_PYTHON"):
        spark_home()


def test_metastore_answers_thrift_on_loopback_only(metastore: HiveMetastore) -> None:
    assert metastore.uri == f"thrift://127.0.0.1:{metastore.port}"
    assert metastore.warehouse.startswith("file:///")
    assert "default" in metastore.list_databases()
    assert metastore.process is not None
    assert_loopback_only(metastore.process, {metastore.port})


def test_metastore_supports_iceberg_commits_with_locks(metastore: HiveMetastore) -> None:
    """Each HiveCatalog commit takes a metastore lock: this fails without TxnDbUtil.prepDb."""
    import pyarrow as pa
    from pyiceberg.catalog.hive import HiveCatalog

    catalog = HiveCatalog("hms", uri=metastore.uri, warehouse=metastore.warehouse)
    catalog.create_namespace("locks")
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    table = catalog.create_table("locks.t", schema=rows.schema)
    table.append(rows)
    table.append(rows)
    assert catalog.load_table("locks.t").scan().to_arrow().num_rows == 6
    assert "locks" in metastore.list_databases()


def test_metastore_stop_frees_port_and_reuses_cached_launcher(tmp_path: Path, spark_dir: Path) -> None:
    cache = tmp_path / "cache"
    with HiveMetastore(tmp_path / "first", spark_dir, class_cache=cache):
        pass
    compiled = sorted(cache.glob("loopback-metastore-*"))
    assert len(compiled) == 1
    mtime = compiled[0].stat().st_mtime_ns
    server = HiveMetastore(tmp_path / "second", spark_dir, class_cache=cache).start()
    try:
        assert server.list_databases()
    finally:
        server.stop()
    assert compiled[0].stat().st_mtime_ns == mtime, "launcher was recompiled"
    assert server.process is not None
    assert_stopped(server.process, [server.port])


# --- PostgreSQL ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    with PostgresServer(tmp_path_factory.mktemp("pg")) as server:
        yield server


def test_postgres_accepts_the_password_on_loopback_only(postgres: PostgresServer) -> None:
    conn = postgres.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT current_user, current_database(), inet_server_addr()::text")
            assert cur.fetchone() == (postgres.user, postgres.database, "127.0.0.1/32")
    finally:
        conn.close()
    assert postgres.jdbc_uri == f"jdbc:postgresql://127.0.0.1:{postgres.port}/{postgres.database}"
    assert postgres.process is not None
    assert_loopback_only(postgres.process, {postgres.port})


def test_postgres_rejects_a_wrong_password(postgres: PostgresServer) -> None:
    import psycopg2

    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        postgres.connect(password=postgres.password + "-wrong")


def test_postgres_works_as_a_pyiceberg_sql_catalog(postgres: PostgresServer, tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("jdbc_cat", uri=postgres.sqlalchemy_uri, warehouse=(tmp_path / "wh").as_uri())
    catalog.create_namespace("sales")
    assert ("sales",) in catalog.list_namespaces()


def test_postgres_stop_frees_port_and_deletes_cluster(tmp_path: Path) -> None:
    server = PostgresServer(tmp_path / "pg").start()
    conn = server.connect()  # an open client must not block the (fast) shutdown
    try:
        server.stop()
    finally:
        conn.close()
    assert server.process is not None and server.data_dir is not None
    assert_stopped(server.process, [server.port])
    assert not server.data_dir.exists()


# --- SeaweedFS REST catalog ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedRestCatalog]:
    with SeaweedRestCatalog(tmp_path_factory.mktemp("weed")) as server:
        yield server


def test_rest_catalog_creates_and_lists_namespaces(rest: SeaweedRestCatalog) -> None:
    from pyiceberg.catalog.rest import RestCatalog

    catalog = RestCatalog("rest", **rest.catalog_properties())
    catalog.create_namespace("analytics")
    assert ("analytics",) in catalog.list_namespaces()
    assert ["analytics"] in rest.list_namespaces()


def test_rest_catalog_stores_table_data_in_s3(rest: SeaweedRestCatalog) -> None:
    import pyarrow as pa
    from pyiceberg.catalog.rest import RestCatalog

    catalog = RestCatalog("rest", **rest.catalog_properties())
    catalog.create_namespace_if_not_exists("s3data")
    rows = pa.table({"id": pa.array([1, 2], pa.int64())})
    table = catalog.create_table("s3data.t", schema=rows.schema)
    table.append(rows)
    loaded = catalog.load_table("s3data.t")
    assert loaded.metadata_location.startswith(f"{rest.warehouse}/")
    assert loaded.scan().to_arrow().num_rows == 2


def test_rest_catalog_rejects_a_wrong_secret(rest: SeaweedRestCatalog) -> None:
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.exceptions import OAuthError, UnauthorizedError

    wrong = {**rest.catalog_properties(), "credential": f"{rest.access_key}:wrong-secret"}
    with pytest.raises(OAuthError, match="invalid_client"):
        RestCatalog("rest", **wrong)
    anonymous = {k: v for k, v in rest.catalog_properties().items() if k != "credential"}
    with pytest.raises(UnauthorizedError):
        RestCatalog("rest", **anonymous).list_namespaces()
    with pytest.raises(urllib.error.HTTPError) as raised:
        rest.fetch_token(secret="wrong-secret")
    assert raised.value.code == 401


def test_rest_catalog_listens_on_loopback_only(rest: SeaweedRestCatalog) -> None:
    assert rest.process is not None
    assert_loopback_only(rest.process, set(rest.ports.values()))
    assert {port for _, port in listening_addresses(rest.process.pid or 0)} <= set(rest.ports.values())


def test_rest_catalog_stop_frees_every_port(tmp_path: Path) -> None:
    server = SeaweedRestCatalog(tmp_path / "weed").start()
    server.stop()
    assert server.process is not None
    assert_stopped(server.process, list(server.ports.values()))
    leftovers = [p for port in server.ports.values() for p in Path("/tmp").glob(f"seaweedfs-*-{port}.sock")]
    assert not leftovers


def test_nessie_listens_on_loopback_only_and_branches(nessie_server: NessieServer) -> None:
    """The session's Nessie (shared with the catalog tests, so it costs no extra start)."""
    assert nessie_server.process is not None
    assert_loopback_only(nessie_server.process, set(nessie_server.ports.values()))
    assert nessie_server.request("GET", "config")["defaultBranch"] == "main"
    nessie_server.create_branch("server-test")
    names = {ref["name"] for ref in nessie_server.request("GET", "trees")["references"]}
    assert {"main", "server-test"} <= names


# --- YARN ------------------------------------------------------------------------------------------------

def test_yarn_starts_on_loopback_only_and_stops_every_port(tmp_path: Path) -> None:
    """One start (a RUNNING node registered), every daemon port on 127.0.0.1 only, one clean stop.

    Applications on it, in cluster deploy mode, are the end-to-end story's:
    ``tests/integration/test_cluster_mode_on_yarn.py`` runs seven on the session's cluster.
    """
    cluster = YarnCluster(tmp_path / "yarn")
    with cluster:
        rm, nm = cluster.processes["resourcemanager"], cluster.processes["nodemanager"]
        rm_ports = [cluster.ports[role] for role in RESOURCE_MANAGER_PORTS]
        nm_ports = [cluster.ports[role] for role in NODE_MANAGER_PORTS]
        assert_loopback_only(rm, set(rm_ports))
        assert_loopback_only(nm, set(nm_ports))
        assert cluster.apps() == []
    assert_stopped(rm, rm_ports)
    assert_stopped(nm, nm_ports)
    assert not cluster.container_pids(), "a container process outlived the cluster"


def test_yarn_stop_kills_containers_a_dead_node_manager_left(tmp_path: Path) -> None:
    """A container runs in a session of its own: if its NodeManager was SIGKILLed, stop() kills it."""
    container_dir = tmp_path / "yarn" / "nm-local" / "usercache" / "me" / "appcache" / "app_1" / "container_1"
    container_dir.mkdir(parents=True)
    container = subprocess.Popen(  # a launch script and the JVM it started, as the NodeManager runs them
        ["sh", "-c", "sleep 300 & echo $!; wait"],
        cwd=container_dir,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert container.stdout is not None
        child = int(container.stdout.readline())
        cluster = YarnCluster(tmp_path / "yarn")
        assert set(cluster.container_pids()) == {container.pid, child}
        cluster.stop()
        assert container.wait(timeout=10) == -signal.SIGKILL
        assert wait_dead(child)
        assert not cluster.container_pids()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(container.pid, signal.SIGKILL)
        container.wait()


def test_socket_helper_sees_a_wildcard_listener() -> None:
    """Guards the loopback assertions above: the /proc reader must notice a 0.0.0.0 bind."""
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        assert ("0.0.0.0", sock.getsockname()[1]) in listening_addresses(os.getpid())

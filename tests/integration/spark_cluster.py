"""A real Spark standalone cluster (one master, N workers) on 127.0.0.1, for scale-out tests.

Each daemon is started with ``spark-class`` from the Spark runtime on PATH, in its own process
group (:class:`tests.servers.process.ManagedProcess`), on ports picked free by the kernel, with
its own work directory, so a test can prove that executors really ran on the workers (every
application an executor runs for gets an ``app-*`` folder under its worker's work directory).
:func:`standalone_cluster` stops every group again, workers first, also when the test fails,
and checks that no port is left bound.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.servers.ports import LOOPBACK, free_ports, is_port_free
from tests.servers.process import ManagedProcess, ServerError

START_TIMEOUT_SECONDS = 90
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


@dataclass
class Worker:
    """One worker daemon: its process, ports and work directory (where executors leave app dirs)."""

    process: ManagedProcess
    port: int
    webui_port: int
    work_dir: Path

    def app_dirs(self) -> list[Path]:
        """The application folders the worker created, one per application it ran executors for."""
        return sorted(p for p in self.work_dir.glob("app-*") if p.is_dir())

    def executor_logs(self) -> list[Path]:
        """Every executor's stderr (``app-*/<executor id>/stderr``), where its task log goes."""
        return sorted(self.work_dir.glob("app-*/*/stderr"))


@dataclass
class StandaloneCluster:
    """A running master and its workers; ``master_url`` is what a Spark connection points at."""

    master: ManagedProcess
    port: int
    webui_port: int
    workers: list[Worker] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.port}"

    def state(self) -> dict:
        """The master's own view (its web UI's JSON): alive workers, cores, running applications."""
        with urllib.request.urlopen(f"http://{LOOPBACK}:{self.webui_port}/json/", timeout=5) as response:
            return json.load(response)

    def ports(self) -> list[int]:
        return [self.port, self.webui_port, *(p for w in self.workers for p in (w.port, w.webui_port))]


def daemon_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The daemons' environment: loopback only, and the same Spark runtime the driver uses.

    :param base: The driver's environment (by default this process's): its PATH names the Spark
        runtime whose ``spark-class`` starts the daemons.
    """
    env = dict(os.environ if base is None else base)
    env["SPARK_LOCAL_IP"] = LOOPBACK
    # spark-class would otherwise read spark-env.sh from the driver's conf dir; the daemons need none.
    env.pop("SPARK_CONF_DIR", None)
    return env


def _spark_class(env: Mapping[str, str]) -> str:
    found = shutil.which("spark-class", path=env.get("PATH"))
    if not found:
        raise ServerError("spark-class is not on PATH: source scripts/local_env.sh (make test does)")
    return found


def _start_master(workdir: Path, env: dict[str, str]) -> StandaloneCluster:
    port, webui_port = free_ports(2)
    master = ManagedProcess(
        "spark-master",
        [
            _spark_class(env),
            MASTER_CLASS,
            "--host",
            LOOPBACK,
            "--port",
            str(port),
            "--webui-port",
            str(webui_port),
        ],
        log_path=workdir / "master.log",
        cwd=workdir,
        env=env,
    ).start()
    return StandaloneCluster(master=master, port=port, webui_port=webui_port)


def _start_worker(
    cluster: StandaloneCluster, index: int, workdir: Path, env: dict[str, str], cores: int, memory: str
) -> Worker:
    port, webui_port = free_ports(2)
    work_dir = workdir / f"worker-{index}"
    work_dir.mkdir(parents=True)
    process = ManagedProcess(
        f"spark-worker-{index}",
        [
            _spark_class(env),
            WORKER_CLASS,
            "--host",
            LOOPBACK,
            "--port",
            str(port),
            "--webui-port",
            str(webui_port),
            "--cores",
            str(cores),
            "--memory",
            memory,
            "--work-dir",
            str(work_dir),
            cluster.master_url,
        ],
        log_path=workdir / f"worker-{index}.log",
        cwd=work_dir,
        env=env,
    ).start()
    return Worker(process=process, port=port, webui_port=webui_port, work_dir=work_dir)


def _wait_for_master(cluster: StandaloneCluster) -> None:
    cluster.master.wait_until(
        lambda: cluster.state().get("status") == "ALIVE",
        timeout=START_TIMEOUT_SECONDS,
        what="the master's web UI to report ALIVE",
    )


def _wait_for_workers(cluster: StandaloneCluster) -> None:
    def all_registered() -> bool:
        alive = [w for w in cluster.state().get("workers", []) if w.get("state") == "ALIVE"]
        return len(alive) == len(cluster.workers)

    cluster.master.wait_until(
        all_registered, timeout=START_TIMEOUT_SECONDS, what=f"{len(cluster.workers)} workers to register"
    )


def _stop(processes: list[ManagedProcess], ports: list[int]) -> None:
    """Stop every process group (workers first), then prove that nothing kept a port."""
    errors = []
    for process in processes:
        try:
            process.stop()
        except ServerError as error:
            errors.append(str(error))
    still_bound = [port for port in ports if not is_port_free(port)]
    if still_bound:
        errors.append(f"ports still bound after stopping the cluster: {still_bound}")
    if errors:
        raise ServerError("; ".join(errors))


@contextmanager
def standalone_cluster(
    workdir: Path,
    workers: int = 2,
    cores: int = 1,
    memory: str = "1g",
    env: Mapping[str, str] | None = None,
) -> Iterator[StandaloneCluster]:
    """Run a master and ``workers`` workers on 127.0.0.1 for the duration of the ``with`` block.

    :param workdir: Where logs and the workers' work directories go.
    :param workers: How many workers to start.
    :param cores: Cores each worker offers (one executor per worker and application).
    :param memory: Memory each worker offers; executors must ask for no more than this.
    :param env: The driver's environment, if not this process's (another Spark line's PATH).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    env = daemon_environment(env)
    started: list[ManagedProcess] = []
    ports: list[int] = []
    with ExitStack() as cleanup:
        cleanup.callback(lambda: _stop(list(reversed(started)), ports))
        cluster = _start_master(workdir, env)
        started.append(cluster.master)  # registered before any wait, so a failed start is still stopped
        ports.extend(cluster.ports())
        _wait_for_master(cluster)
        for index in range(workers):
            worker = _start_worker(cluster, index, workdir, env, cores, memory)
            cluster.workers.append(worker)
            started.append(worker.process)
            ports.extend((worker.port, worker.webui_port))
        _wait_for_workers(cluster)
        yield cluster


#: Executor settings for a cluster of two one-core workers. Jobs wait until both executors registered
#: (2 cores), so every application's tasks are spread over both workers instead of racing to the first.
CLUSTER_SPARK_DEFAULTS = {
    "spark.executor.memory": "512m",
    "spark.cores.max": "2",
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
}


def spark_conf_dir(target: Path) -> Path:
    """A private SPARK_CONF_DIR: the checkout's loopback defaults plus the cluster's executor sizing."""
    target.mkdir(parents=True, exist_ok=True)
    base = Path(os.environ["SPARK_CONF_DIR"]) / "spark-defaults.conf"
    lines = [base.read_text()] if base.exists() else []
    lines += [f"{key} {value}\n" for key, value in CLUSTER_SPARK_DEFAULTS.items()]
    (target / "spark-defaults.conf").write_text("".join(lines))
    return target


def standalone_connection(cluster: StandaloneCluster, deploy_mode: str = "client") -> dict:
    """The apache-spark provider's ``spark`` connection for the cluster's master."""
    return {"conn_type": "spark", "host": cluster.master_url, "extra": {"deploy-mode": deploy_mode}}

"""Comparison #8: scale-out under the real scheduler, and the worker's memory.

(a) ``batches`` (16) mapped appends into one table at once (``airflow_iceberg_bench_mapped_appends``),
    in spark-submit mode and over Spark Connect, alternating, on one deployment with an executor
    slot for each. The catalog is a JDBC catalog on a private PostgreSQL server
    (:class:`tests.servers.postgres.PostgresServer`): concurrent commits from many JVMs need one
    that swaps table metadata atomically, which a Hadoop catalog on a local file system does not
    across JVMs. The Connect server holds the catalog's password, as a deployment's would. Each run
    writes a fresh table; pyiceberg counts its commits by commit id (:mod:`benchmarks.commits`).
(b) a ``rows``-row append (100 million) on a standalone cluster (a master and two one-core workers,
    :func:`tests.integration.spark_cluster.standalone_cluster`) through the operator under the
    scheduler, alternating with plain Spark writing the same rows as parquet to the same master.
(c) the peak RSS of each task's processes in the worker, sampled throughout
    (:mod:`benchmarks.worker_memory`).

Every side runs on the Connect server's Spark line (4.1 and its Iceberg runtime).
:mod:`benchmarks.scale_out_report` turns the records into the section.
"""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack
from pathlib import Path

from benchmarks.commits import commit_retries, count_commits, gave_up, most_at_once
from benchmarks.deployment import REPO, BenchDeployment
from benchmarks.results import Section
from benchmarks.scale_out_report import MODES, AppendRun, ClusterSample, summarize
from benchmarks.spark_line import spark_line_environment
from benchmarks.throughput import plain_parquet
from benchmarks.worker_memory import WorkerMemorySampler
from benchmarks.workload import rows_query
from benchmarks.workspace import BenchWorkspace
from tests.integration.airflow_runner import spark_connection

CATALOG = "bench"
APPEND_ROWS = 1000
MAPPED_DAG = "airflow_iceberg_bench_mapped_appends"
CLUSTER_DAG = "airflow_iceberg_bench_cluster_append"
DAG_FILE = REPO / "benchmarks" / "dags_scheduler" / "airflow_iceberg_bench_scale_out.py"
CONNECT_SERVER = "Spark Connect server"


def catalog_connection(postgres, warehouse: Path, line: dict[str, str]) -> dict:
    """Catalog ``bench``: Iceberg's JdbcCatalog on PostgreSQL, on the line's runtime; the Connect
    server holds its password (and so its endpoints), spark-submit mode sends its own."""
    from tests.integration.catalog_connections import postgres_connection

    connection = postgres_connection(postgres, warehouse, catalog_name=CATALOG)
    connection["extra"].update(
        spark_version=line["SPARK_LINE"],
        runtime_jar=line["ICEBERG_RUNTIME_JAR"],
        connect_server_credentials=True,
    )
    return connection


def server_catalog_conf(postgres, warehouse: Path) -> dict[str, str]:
    """What the Connect server starts with for catalog ``bench``: its secret and where it connects."""
    prefix = f"spark.sql.catalog.{CATALOG}"
    return {
        f"{prefix}.jdbc.password": postgres.password,
        f"{prefix}.uri": postgres.jdbc_uri,
        f"{prefix}.warehouse": warehouse.as_uri(),
    }


class MappedAppends:
    """(a): one run of the mapped appends in a mode, and what it left."""

    def __init__(self, deployment: BenchDeployment, reader, server, batches: int, memory) -> None:
        self.deployment = deployment
        self.reader = reader
        self.server = server
        self.batches = batches
        self.memory = memory

    def run(self, mode: str, label: str) -> AppendRun:
        table = f"scale.appends_{mode}_{label}"
        run_id = f"bench8a__{mode}__{label}"
        connect = mode == "connect"
        self.deployment.set_connection(
            "spark_default", self.server.connection() if connect else spark_connection()
        )
        server_log_start = self.server.log_path.stat().st_size if connect else 0
        finished = self.deployment.run_dag(
            MAPPED_DAG,
            run_id,
            self.deployment.next_logical_date(),
            {"table": table, "batches": self.batches, "rows": APPEND_ROWS},
            require_success=False,
        )
        appends = [task for task in finished.tasks if task.task_id == "append_batch"]
        [queries] = [task for task in finished.tasks if task.task_id == "batch_queries"]
        ran = [(task.started, task.ended) for task in appends if task.started and task.ended]
        if finished.run.state != "success":
            print(
                f"    {run_id} {finished.run.state}:\n{self.deployment.report(MAPPED_DAG, run_id)}",
                file=sys.stderr,
            )
        summaries = [snapshot.summary.additional_properties for snapshot in self.snapshots(table)]
        if connect:
            with open(self.server.log_path, encoding="utf-8", errors="replace") as log:
                log.seek(server_log_start)
                retry_log = log.read()
        else:
            retry_log = finished.logs
        failed = [task for task in appends if task.state != "success"]
        return AppendRun(
            mode=mode,
            run_id=run_id,
            state=finished.run.state,
            count=count_commits(summaries, run_id, "append_batch", range(self.batches)),
            window=max((end for _, end in ran), default=queries.ended or 0.0) - (queries.ended or 0.0),
            whole=finished.run.seconds,
            most_running=most_at_once(ran),
            retries=commit_retries(retry_log),
            gave_up=sum(
                gave_up(self.deployment.run_logs(MAPPED_DAG, run_id, "append_batch", task.map_index))
                for task in failed
            ),
            task_retries=sum(max(0, task.try_number - 1) for task in appends),
            peaks=tuple(self.memory.peaks[task.ti_id] for task in appends if task.ti_id in self.memory.peaks),
            dag_file_loads=tuple(
                finished.parse_seconds[task.ti_id] for task in appends if task.ti_id in finished.parse_seconds
            ),
        )

    def snapshots(self, table: str) -> list:
        """The table's snapshots as pyiceberg reads them (none when the run never created it)."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.reader.load_table(table).snapshots()
        except NoSuchTableError:
            return []


def cluster_sample(
    deployment: BenchDeployment,
    reader,
    master: str,
    rows: int,
    label: str,
    env: dict[str, str],
    root: Path,
    memory,
) -> ClusterSample:
    """(b): the operator's append of ``rows`` rows and plain Spark's parquet, in an alternating order."""
    table = f"scale.cluster_rows_{label}"
    query = rows_query(rows)

    def operator() -> tuple[float, float, str]:
        finished = deployment.run_dag(
            CLUSTER_DAG,
            f"bench8b__{label}",
            deployment.next_logical_date(),
            {"table": table, "create_query": rows_query(0), "source_query": query},
        )
        [append] = [task for task in finished.tasks if task.task_id == "append_rows"]
        written = int(reader.load_table(table).current_snapshot().summary["total-records"])
        if written != rows:
            raise RuntimeError(f"the cluster append wrote {written} rows, not {rows}")
        return (
            append.ended - append.started,
            finished.probes[append.ti_id].total("spark_submit"),
            append.ti_id,
        )

    def plain() -> float:
        return plain_parquet(master, query, root / "plain-parquet", env=env)

    if int(label) % 2:
        task, spark, ti_id = operator()
        plain_seconds = plain()
    else:
        plain_seconds = plain()
        task, spark, ti_id = operator()
    return ClusterSample(task, spark, plain_seconds, memory.peaks.get(ti_id))


def run(ws: BenchWorkspace, repetitions: int, batches: int, rows: int) -> Section:
    from tests.integration.catalog_connections import POSTGRES_JDBC, postgres_reader
    from tests.integration.spark_cluster import spark_conf_dir, standalone_cluster, standalone_connection
    from tests.servers.postgres import PostgresServer
    from tests.servers.spark_connect import SERVER_SPARK_LINE, SparkConnectServer

    print(
        f"==> #8 scale-out: {batches} mapped appends, {rows:,} rows on a cluster", file=sys.stderr, flush=True
    )
    line = spark_line_environment(SERVER_SPARK_LINE)
    root = ws.root / "scale-out"
    env = {**line, "SPARK_CONF_DIR": str(spark_conf_dir(root / "spark-conf"))}
    slots = str(batches + 2)
    settings = {"AIRFLOW__CORE__PARALLELISM": slots, "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": slots}
    warehouse = root / "warehouse"
    appends: list[AppendRun] = []
    cluster: list[ClusterSample] = []
    with ExitStack() as stack:
        postgres = stack.enter_context(PostgresServer(root / "postgres"))
        deployment = stack.enter_context(
            BenchDeployment.running(root, [DAG_FILE], env=env, settings=settings)
        )
        memory = stack.enter_context(WorkerMemorySampler())
        deployment.set_connection("iceberg_catalog_default", catalog_connection(postgres, warehouse, line))
        reader = postgres_reader(postgres, warehouse, CATALOG)
        with SparkConnectServer(
            root / "spark-connect",
            extra_jars=(Path(POSTGRES_JDBC),),
            conf=server_catalog_conf(postgres, warehouse),
        ) as server:
            memory.named[CONNECT_SERVER] = server.process.pid
            mapped = MappedAppends(deployment, reader, server, batches, memory)
            mapped.run("connect", "warmup")  # the server's first sessions, untimed and not counted
            for repetition in range(1, repetitions + 1):
                for mode in MODES if repetition % 2 else MODES[::-1]:
                    appends.append(mapped.run(mode, str(repetition)))
                    done = appends[-1]
                    print(
                        f"    [{repetition}/{repetitions}] (a) {mode}: {done.count}, {done.window:.1f} s, "
                        f"{done.most_running} at once, {done.retries} commit retries",
                        file=sys.stderr,
                        flush=True,
                    )
        server_peak = memory.named_peaks.get(CONNECT_SERVER)
        plain_env = {**os.environ, **env}  # the daemons, the driver and plain Spark: one Spark line
        with standalone_cluster(
            root / "cluster", workers=2, cores=1, memory="1g", env=plain_env
        ) as spark_cluster:
            deployment.set_connection("spark_default", standalone_connection(spark_cluster))
            for repetition in range(1, repetitions + 1):
                sample = cluster_sample(
                    deployment,
                    reader,
                    spark_cluster.master_url,
                    rows,
                    str(repetition),
                    plain_env,
                    root,
                    memory,
                )
                cluster.append(sample)
                print(
                    f"    [{repetition}/{repetitions}] (b) {rows:,} rows: task {sample.task:.1f} s "
                    f"(Spark {sample.spark:.1f} s), plain parquet {sample.plain:.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
    return summarize(batches, appends, rows, cluster, server_peak)

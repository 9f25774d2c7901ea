"""Comparison #9: publish and tag through pyiceberg in the worker vs the same step as a Spark job.

Both sides are the same operator on the same JDBC catalog (a SQLite file, which pyiceberg and
Iceberg's JdbcCatalog both commit to): ``engine="pyiceberg"`` against ``engine="spark"``
(spark-submit, ``local[2]``). Each sample is one task's ``execute()``, timed inside a fresh
interpreter that has imported the operators first, as a worker's task process has parsed the
DAG: what the task pays to run, including the imports of pyiceberg (or the spark-submit JVM),
without Airflow's own per-task cost, which #1 measures and which both sides pay alike.

Each sample publishes a branch made for it (one commit ahead of ``main``, pinned, dropped after)
and tags the snapshot it published; the result is checked, so a fast wrong answer stops the run.
Samples are interleaved: pyiceberg, Spark, then the other way round on the next repetition.

    python -m benchmarks.metadata_steps [--repetitions N]    # this comparison alone
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

from benchmarks.results import Row, Section, times, verdict
from benchmarks.results import seconds as fmt
from benchmarks.stats import median, spread
from benchmarks.workspace import REPO, BenchWorkspace, last_json_line

TABLE = "bench.metadata_steps"
CATALOG = "lite"
ENGINES = ("pyiceberg", "spark")
STEPS = ("publish", "tag")
#: The issue's target for a metadata-only step through pyiceberg: task run time in the worker.
TARGET_SECONDS = 1.0


class Lake:
    """The bench's SQLite JDBC catalog: its connection for the tasks, and pyiceberg to prepare each sample."""

    def __init__(self, root: Path) -> None:
        from pyiceberg.catalog.sql import SqlCatalog

        from tests.integration.catalog_connections import sqlite_connection

        database, warehouse = root / "metadata-steps.db", root / "metadata-steps-warehouse"
        self.connection = sqlite_connection(database, warehouse, CATALOG)
        self.catalog = SqlCatalog(CATALOG, uri=f"sqlite:///{database}", warehouse=warehouse.as_uri())

    def create(self) -> None:
        import pyarrow as pa

        self.catalog.create_namespace_if_not_exists("bench")
        table = self.catalog.create_table(TABLE, schema=pa.schema([("id", pa.int64())]))
        table.append(pa.table({"id": [0]}))

    def new_branch(self) -> tuple[str, int]:
        """A branch one commit ahead of ``main``, as an audited branch waits to be published."""
        import pyarrow as pa

        table = self.catalog.load_table(TABLE)
        name = f"audit_{uuid.uuid4().hex[:8]}"
        table.manage_snapshots().create_branch(table.current_snapshot().snapshot_id, name).commit()
        table.append(pa.table({"id": [1]}), branch=name)
        return name, self.catalog.load_table(TABLE).refs()[name].snapshot_id


def run(ws: BenchWorkspace, repetitions: int) -> Section:
    print("==> #9 publish and tag: pyiceberg in the worker vs a Spark job", file=sys.stderr)
    lake = Lake(ws.root)
    lake.create()
    env = {**ws.env(), "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT": json.dumps(lake.connection)}
    samples: dict[str, list[float]] = {}
    for repetition in range(1, repetitions + 1):
        order = ENGINES if repetition % 2 else ENGINES[::-1]
        for engine in order:
            branch, snapshot_id = lake.new_branch()
            published = _probe(env, "publish", engine, {"branch": branch, "snapshot_id": snapshot_id})
            tagged = _probe(env, "tag", engine, {"tag": f"eod_{branch}", "snapshot_id": snapshot_id})
            for step, answer in (("publish", published), ("tag", tagged)):
                samples.setdefault(f"{step}_{engine}", []).append(answer["seconds"])
                samples.setdefault(f"{step}_{engine}_cpu", []).append(answer["cpu_seconds"])
                print(
                    f"    [{repetition}/{repetitions}] {step} {engine}: {answer['seconds']:.3f} s "
                    f"(cpu {answer['cpu_seconds']:.2f} s)",
                    file=sys.stderr,
                    flush=True,
                )
        imports = _import_seconds(env)
        samples.setdefault("pyiceberg_imports_cpu", []).append(imports)
        print(f"    [{repetition}/{repetitions}] pyiceberg's imports: cpu {imports:.3f} s", file=sys.stderr)
    return summarize(samples)


def summarize(samples: dict[str, list[float]]) -> Section:
    section = Section(
        9,
        "Publish and tag: pyiceberg in the worker vs a Spark job (spark-submit)",
        "pyiceberg in the worker",
        "Spark job (spark-submit)",
        samples=samples,
    )
    imports = median(samples["pyiceberg_imports_cpu"])
    for step in STEPS:
        ours, spark = median(samples[f"{step}_pyiceberg"]), median(samples[f"{step}_spark"])
        cpu_ours, cpu_spark = median(samples[f"{step}_pyiceberg_cpu"]), median(samples[f"{step}_spark_cpu"])
        section.rows.append(
            Row(
                f"{step}: task run time in the worker (`execute()`)",
                fmt(ours),
                fmt(spark),
                times(ours / spark),
                f"≤ {TARGET_SECONDS:.0f} s",
                verdict(ours <= TARGET_SECONDS),
            )
        )
        section.rows.append(
            Row(
                f"  {step}: CPU time of the task's processes",
                fmt(cpu_ours),
                fmt(cpu_spark),
                times(cpu_ours / cpu_spark),
            )
        )
        if ours > TARGET_SECONDS:
            waited = (
                f" but {fmt(cpu_ours)} of CPU time: the rest is waiting for the cores other processes held"
                if ours > 1.1 * cpu_ours
                else f", all of it CPU time ({fmt(cpu_ours)}): the step waited for no other process"
            )
            section.misses.append(
                f"{step} through pyiceberg took {fmt(ours)} of wall time (spread "
                f"{spread(samples[f'{step}_pyiceberg'])}){waited}. Of that CPU time, importing pyiceberg's "
                f"catalog modules in a fresh task process took {fmt(imports)}; the step's own reads and "
                "commit the remainder"
            )
    section.rows.append(Row("  CPU time of importing pyiceberg's catalog, once per task", fmt(imports)))
    section.notes.append(
        "Same operator, same SQLite JDBC catalog; `engine` picks the path. Each sample is one task's "
        "`execute()` in a fresh interpreter that imported the operators first (as the worker parsed the "
        "DAG): pyiceberg's imports and catalog client, or spark-submit's JVM, are in it; Airflow's fixed "
        "per-task cost (#1) is not, and both paths pay it alike. CPU time counts the task process and "
        "every process it waited for (spark-submit's JVM, the Python driver), which load from other "
        "processes stretches far less than wall time. Ratio: pyiceberg over Spark."
    )
    return section


def _probe(env: dict[str, str], step: str, engine: str, params: dict) -> dict:
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.metadata_steps", "probe", step, engine, json.dumps(params)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        output = (completed.stdout + completed.stderr)[-6000:]
        raise RuntimeError(f"{step} through {engine} failed:\n{output}")
    answer = last_json_line(completed.stdout)
    result = answer["result"]
    done = result.get("already_published", result.get("already_tagged")) is False
    if not done or int(result["snapshot_id"]) != int(params["snapshot_id"]):
        raise RuntimeError(f"{step} through {engine} did not do its work: {result}")
    return answer


def _import_seconds(env: dict[str, str]) -> float:
    """The CPU time a fresh task process spends importing the pyiceberg modules the step loads."""
    code = (
        "import time, airflow_iceberg.operators\n"
        "started = time.process_time()\n"
        "import pyiceberg.catalog.sql, airflow_iceberg.catalog.pyiceberg_refs\n"
        "print(time.process_time() - started)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, check=True
    )
    return float(completed.stdout.strip().splitlines()[-1])


def probe(step: str, engine: str, params: dict) -> None:
    """In a fresh interpreter: build the task as DAG parsing does, then time its ``execute()``."""
    from airflow_iceberg.operators import IcebergPublishOperator, IcebergTagOperator

    if step == "publish":
        op = IcebergPublishOperator(
            task_id="publish",
            table=TABLE,
            branch=params["branch"],
            expected_snapshot_id=params["snapshot_id"],
            drop_branch=True,
            engine=engine,
        )
    else:
        op = IcebergTagOperator(
            task_id="tag", table=TABLE, tag=params["tag"], snapshot_id=params["snapshot_id"], engine=engine
        )
    ti = SimpleNamespace(
        dag_id="airflow_iceberg_bench",
        task_id=step,
        run_id=f"metadata_steps_{uuid.uuid4().hex}",
        map_index=-1,
        try_number=1,
        max_tries=0,
    )
    cpu_before, started = _cpu_seconds(), time.perf_counter()
    result = op.execute({"ti": ti})
    elapsed, cpu = time.perf_counter() - started, _cpu_seconds() - cpu_before
    print(json.dumps({"seconds": elapsed, "cpu_seconds": cpu, "result": result}, default=str))


def _cpu_seconds() -> float:
    """CPU time (user + system) of this process and of every process it waited for (spark-submit's)."""
    return sum(
        usage.ru_utime + usage.ru_stime
        for usage in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
    )


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if args and args[0] == "probe":
        probe(args[1], args[2], json.loads(args[3]))
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.metadata_steps", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--repetitions", type=int, default=3)
    options = parser.parse_args(args)
    from benchmarks.report import console_table

    ws = BenchWorkspace.create()
    try:
        section = run(ws, options.repetitions)
    finally:
        ws.close()
    print("\n" + console_table([section]))
    for note in section.notes + section.misses:
        print(f"\n{note}")
    print(f"\nload average (1/5/15 min): {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

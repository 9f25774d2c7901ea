"""Comparison #3: rows per second appended through the operator vs plain Spark parquet.

Sides, interleaved per repetition and size: ``airflow tasks test`` of an append task whose
source is ``SELECT ... FROM range(n)`` (:mod:`benchmarks.workload`), and a spark-submit of
:mod:`benchmarks.spark_jobs.write_parquet` writing the same query's rows with
``df.write.parquet`` on the same master (``local[2]``) and the same spark-defaults.conf. Both
write snappy-compressed parquet (the bench table sets Iceberg's codec to snappy).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.results import Row, Section, times, verdict
from benchmarks.results import seconds as fmt
from benchmarks.stats import interleave, median
from benchmarks.workload import rows_query
from benchmarks.workspace import BenchWorkspace

TABLE = "bench.throughput"
PLAIN_JOB = Path(__file__).resolve().parent / "spark_jobs" / "write_parquet.py"
TARGET = 0.8


def plain_parquet(master: str, query: str, path: Path, env: dict[str, str] | None = None) -> float:
    """Wall time of one plain ``df.write.parquet`` spark-submit (in ``env``, by default this process's)."""
    argv = [
        "spark-submit",
        "--master",
        master,
        "--name",
        "airflow-iceberg-bench-plain",
        str(PLAIN_JOB),
        query,
        str(path),
    ]
    started = time.perf_counter()
    completed = subprocess.run(
        argv,
        env=dict(env or os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - started
    if completed.returncode != 0:
        raise RuntimeError(f"plain parquet write failed:\n{completed.stdout[-4000:]}")
    return elapsed


def run(ws: BenchWorkspace, repetitions: int, sizes: tuple[int, ...]) -> dict[str, list[float]]:
    print(f"==> #3 throughput: {', '.join(f'{n:,}' for n in sizes)} rows", file=sys.stderr)
    ws.run_task("create_table", table=TABLE, source_query=rows_query(0))
    master = ws.connections["spark_default"]["host"]
    arms = {}
    for rows in sizes:
        query = rows_query(rows)
        arms[f"operator_{rows}"] = lambda q=query: (
            ws.run_task("append_rows", table=TABLE, source_query=q).seconds
        )
        arms[f"plain_{rows}"] = lambda q=query: plain_parquet(master, q, ws.root / "plain-parquet")
    return interleave(arms, repetitions)


def miss_cause(rows: int, operator: float, plain: float, airflow_task_cost: float | None) -> str:
    """Say how much of the gap Airflow's fixed per-task cost explains, and what is left for Iceberg."""
    text = (
        f"{rows:,} rows: operator throughput is {plain / operator:.2f}x plain parquet "
        f"(target {TARGET:.2f}x); "
        f"the task takes {operator - plain:.1f} s longer."
    )
    if airflow_task_cost is None:
        return text
    rest = operator - airflow_task_cost - plain
    return text + (
        f" Airflow's fixed per-task cost (#1, empty task) is {airflow_task_cost:.1f} s of that; "
        "the remaining "
        f"{rest:+.1f} s is the Iceberg write path (the Iceberg runtime jar and catalog in the session, "
        "the commit: manifests, manifest list, metadata.json) and the job's snapshot lookup after it."
    )


def summarize(
    samples: dict[str, list[float]], sizes: tuple[int, ...], airflow_task_cost: float | None
) -> Section:
    section = Section(
        3,
        "Throughput: append through the operator vs plain Spark df.write.parquet",
        "operator append",
        "plain parquet",
        samples=samples,
    )
    for rows in sizes:
        operator, plain = median(samples[f"operator_{rows}"]), median(samples[f"plain_{rows}"])
        section.rows.append(
            Row(
                f"{rows:,} rows: {rows / operator:,.0f} vs {rows / plain:,.0f} rows/s (ratio of rows/s)",
                fmt(operator),
                fmt(plain),
                times(plain / operator),
                f"≥ {TARGET:.2f}x",
                verdict(plain / operator >= TARGET),
            )
        )
        if airflow_task_cost is not None:
            spark_only = operator - airflow_task_cost
            section.rows.append(
                Row(
                    f"  {rows:,} rows without Airflow's fixed per-task cost (#1)",
                    fmt(spark_only),
                    fmt(plain),
                    times(plain / spark_only),
                )
            )
        if plain / operator < TARGET:
            section.misses.append(miss_cause(rows, operator, plain, airflow_task_cost))
    section.notes.append(
        "Ratio = operator rows/s ÷ plain rows/s = plain time ÷ operator time (higher is better)."
    )
    return section

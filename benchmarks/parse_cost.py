"""Comparison #2: what airflow-iceberg adds to DAG parsing, against SparkSubmitOperator alone.

Every measurement runs in a fresh interpreter (:mod:`benchmarks.parse_probe`), interleaved:

- import: ``airflow_iceberg.operators`` timed after ``airflow.sdk`` and the apache-spark
  provider's ``spark_submit`` module are loaded (so it is exactly what we add), beside the
  ``spark_submit`` import itself after ``airflow.sdk`` (for scale);
- DagBag: the daily-orders example DAG file vs the same DAG built from SparkSubmitOperator only
  (``benchmarks/dags_baseline``); the difference of medians is ours. The whole example folder
  (every story DAG) is parsed too, for scale.

Any pyspark or pyiceberg module loaded during a measurement is a broken invariant (FAIL).
"""

from __future__ import annotations

import sys

from benchmarks.results import FAIL, PASS, Row, Section, millis, verdict
from benchmarks.stats import interleave, median
from benchmarks.workspace import REPO, BenchWorkspace, last_json_line

OURS = "airflow_iceberg.operators"
SDK = "airflow.sdk"
SPARK_SUBMIT = "airflow.providers.apache.spark.operators.spark_submit"
EXAMPLE_DAGS = REPO / "dags"
EXAMPLE_DAG = EXAMPLE_DAGS / "iceberg_daily_orders.py"
BASELINE_DAG = REPO / "benchmarks" / "dags_baseline" / "spark_only_daily_orders.py"
TARGET_SECONDS = 0.050


class Probe:
    """Runs the parse probe and remembers every heavy module and DAG import error it saw."""

    def __init__(self, ws: BenchWorkspace) -> None:
        self.ws = ws
        self.heavy: set[str] = set()
        self.errors: dict[str, str] = {}
        self.dag_count = 0

    def __call__(self, kind: str, *args: str) -> float:
        answer = last_json_line(self.ws.run_python("-m", "benchmarks.parse_probe", kind, *args).stdout)
        self.heavy.update(answer["heavy_modules"])
        self.errors.update(answer.get("errors", {}))
        self.dag_count = max(self.dag_count, len(answer.get("dags", [])))
        return float(answer["seconds"])


def run(ws: BenchWorkspace, repetitions: int) -> Section:
    print("==> #2 parse cost: fresh interpreter per measurement", file=sys.stderr)
    probe = Probe(ws)
    samples = interleave(
        {
            "import_ours_after_spark_submit": lambda: probe("import", OURS, SDK, SPARK_SUBMIT),
            "import_spark_submit": lambda: probe("import", SPARK_SUBMIT, SDK),
            "dagbag_example": lambda: probe("dagbag", str(EXAMPLE_DAG)),
            "dagbag_spark_only": lambda: probe("dagbag", str(BASELINE_DAG)),
            "dagbag_all_examples": lambda: probe("dagbag", str(EXAMPLE_DAGS)),
        },
        repetitions,
    )
    return summarize(samples, probe)


def summarize(samples: dict[str, list[float]], probe: Probe) -> Section:
    section = Section(
        2,
        "Parse cost: airflow-iceberg operators and example DAG vs SparkSubmitOperator only",
        "airflow-iceberg",
        "SparkSubmitOperator only",
        samples=samples,
    )
    ours = median(samples["import_ours_after_spark_submit"])
    section.rows.append(
        Row(
            f"import {OURS} (on top of spark_submit) | spark_submit itself",
            millis(ours),
            millis(median(samples["import_spark_submit"])),
            f"+{millis(ours)}",
            f"adds < {millis(TARGET_SECONDS)}",
            verdict(ours < TARGET_SECONDS),
        )
    )
    example, baseline = median(samples["dagbag_example"]), median(samples["dagbag_spark_only"])
    section.rows.append(
        Row(
            f"DagBag: {EXAMPLE_DAG.name} | same DAG with SparkSubmitOperator",
            millis(example),
            millis(baseline),
            f"{'+' if example >= baseline else ''}{millis(example - baseline)}",
            f"adds < {millis(TARGET_SECONDS)}",
            verdict(example - baseline < TARGET_SECONDS),
        )
    )
    every = median(samples["dagbag_all_examples"])
    section.rows.append(Row(f"DagBag: all {probe.dag_count} example DAGs in dags/", millis(every)))
    clean = not probe.heavy and not probe.errors
    section.rows.append(
        Row(
            "pyspark/pyiceberg imported while parsing; DAG import errors",
            ", ".join(sorted(probe.heavy)) or "none",
            "none" if not probe.errors else f"{len(probe.errors)} errors",
            target="none",
            verdict=PASS if clean else FAIL,
        )
    )
    if probe.errors:
        section.notes.append(f"DAG import errors: {probe.errors}")
    section.notes.append(
        "Each sample is a fresh interpreter. The ratio column shows what airflow-iceberg adds: the import "
        "time itself, and the difference of the two DagBag medians."
    )
    if ours >= TARGET_SECONDS or example - baseline >= TARGET_SECONDS:
        section.misses.append(
            f"Parsing adds {millis(ours)} (import) and {millis(example - baseline)} (DagBag difference); "
            "see the samples below for how noisy the machine was."
        )
    return section

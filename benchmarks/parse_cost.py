"""Comparison #2: what importing the operators and parsing a DAG file cost, against plain SparkSubmitOperator.

Every measurement runs in a fresh interpreter (:mod:`benchmarks.parse_probe`), interleaved:

- import: ``airflow_iceberg.operators`` in a fresh interpreter (Airflow's SDK included) against
  ``import airflow.sdk`` alone: the verdict is at most 10% more. The apache-spark provider's
  ``spark_submit`` module, which a DAG file of plain SparkSubmitOperators imports, for scale; and
  ``import airflow.sdk`` without bytecode (an empty ``PYTHONPYCACHEPREFIX``, as on a machine with
  ``PYTHONDONTWRITEBYTECODE=1`` and an install that compiled none), for what bytecode saves;
- DagBag: the daily-orders example DAG file against the same DAG built from SparkSubmitOperator
  only (``benchmarks/dags_baseline``): the verdict is that ours costs less. The whole example
  folder (every story DAG) is parsed too, for scale.

Any module of tests/heavy_modules.py's HEAVY loaded by our import or a DagBag of our DAGs is a
broken invariant (FAIL).
"""

from __future__ import annotations

import shutil
import sys
import tempfile

from benchmarks.results import FAIL, PASS, Row, Section, millis, times, verdict
from benchmarks.stats import interleave, median
from benchmarks.workspace import REPO, BenchWorkspace, last_json_line

OURS = "airflow_iceberg.operators"
SDK = "airflow.sdk"
SPARK_SUBMIT = "airflow.providers.apache.spark.operators.spark_submit"
EXAMPLE_DAGS = REPO / "dags"
EXAMPLE_DAG = EXAMPLE_DAGS / "iceberg_daily_orders.py"
BASELINE_DAG = REPO / "benchmarks" / "dags_baseline" / "spark_only_daily_orders.py"
#: Importing the operators may cost at most this much more than ``import airflow.sdk`` alone.
IMPORT_RATIO_TARGET = 1.10


class Probe:
    """Runs the parse probe and remembers every heavy module and DAG import error ours caused."""

    def __init__(self, ws: BenchWorkspace) -> None:
        self.ws = ws
        self.heavy: set[str] = set()
        self.errors: dict[str, str] = {}
        self.dag_count = 0
        self.no_bytecode = tempfile.mkdtemp(prefix="bench-no-bytecode-")

    def __call__(self, kind: str, *args: str, ours: bool = True, bytecode: bool = True) -> float:
        # An empty cache prefix, never written to: every module compiled from source, as without bytecode.
        env = {} if bytecode else {"PYTHONPYCACHEPREFIX": self.no_bytecode, "PYTHONDONTWRITEBYTECODE": "1"}
        answer = last_json_line(
            self.ws.run_python("-m", "benchmarks.parse_probe", kind, *args, env=env).stdout
        )
        if ours:
            self.heavy.update(answer["heavy_modules"])
            self.errors.update(answer.get("errors", {}))
        self.dag_count = max(self.dag_count, len(answer.get("dags", [])))
        return float(answer["seconds"])


def run(ws: BenchWorkspace, repetitions: int) -> Section:
    print("==> #2 parse cost: fresh interpreter per measurement", file=sys.stderr)
    probe = Probe(ws)
    samples = interleave(
        {
            "import_ours": lambda: probe("import", OURS),
            "import_sdk": lambda: probe("import", SDK, ours=False),
            "import_spark_submit": lambda: probe("import", SPARK_SUBMIT, ours=False),
            "import_sdk_without_bytecode": lambda: probe("import", SDK, ours=False, bytecode=False),
            "dagbag_example": lambda: probe("dagbag", str(EXAMPLE_DAG)),
            "dagbag_spark_only": lambda: probe("dagbag", str(BASELINE_DAG), ours=False),
            "dagbag_all_examples": lambda: probe("dagbag", str(EXAMPLE_DAGS)),
        },
        repetitions,
    )
    shutil.rmtree(probe.no_bytecode, ignore_errors=True)
    return summarize(samples, probe)


def summarize(samples: dict[str, list[float]], probe: Probe) -> Section:
    section = Section(
        2,
        "Parse cost: airflow-iceberg operators and example DAG vs Airflow's SDK and SparkSubmitOperator",
        "airflow-iceberg",
        "baseline",
        samples=samples,
    )
    ours, sdk = median(samples["import_ours"]), median(samples["import_sdk"])
    section.rows.append(
        Row(
            f"import {OURS} | import {SDK} alone (fresh interpreters)",
            millis(ours),
            millis(sdk),
            times(ours / sdk),
            f"<= {times(IMPORT_RATIO_TARGET)}",
            verdict(ours <= IMPORT_RATIO_TARGET * sdk),
        )
    )
    spark_submit = median(samples["import_spark_submit"])
    section.rows.append(
        Row(
            f"import {OURS} | import {SPARK_SUBMIT}",
            millis(ours),
            millis(spark_submit),
            times(ours / spark_submit),
        )
    )
    uncompiled = median(samples["import_sdk_without_bytecode"])
    section.rows.append(
        Row(
            f"import {SDK}: with bytecode | without", millis(sdk), millis(uncompiled), times(sdk / uncompiled)
        )
    )
    example, baseline = median(samples["dagbag_example"]), median(samples["dagbag_spark_only"])
    section.rows.append(
        Row(
            f"DagBag: {EXAMPLE_DAG.name} | same DAG with SparkSubmitOperator",
            millis(example),
            millis(baseline),
            times(example / baseline),
            "< 1.00x",
            verdict(example < baseline),
        )
    )
    every = median(samples["dagbag_all_examples"])
    section.rows.append(Row(f"DagBag: all {probe.dag_count} example DAGs in dags/", millis(every)))
    clean = not probe.heavy and not probe.errors
    section.rows.append(
        Row(
            "heavy modules (tests/heavy_modules.py) imported by ours while parsing; DAG import errors",
            ", ".join(sorted(probe.heavy)) or "none",
            "none" if not probe.errors else f"{len(probe.errors)} errors",
            target="none",
            verdict=PASS if clean else FAIL,
        )
    )
    if probe.errors:
        section.notes.append(f"DAG import errors: {probe.errors}")
    section.notes.append(
        "Each sample is a fresh interpreter; an import's time includes everything it imports. The "
        "operators leave the apache-spark provider (and its Kubernetes client and OpenLineage "
        "listener) to the task that runs spark-submit (docs/how-it-runs.md)."
    )
    if ours > IMPORT_RATIO_TARGET * sdk or example >= baseline:
        section.misses.append(
            f"import {millis(ours)} against {millis(sdk)} for {SDK}; DagBag {millis(example)} against "
            f"{millis(baseline)}; see the samples below for how noisy the machine was."
        )
    return section

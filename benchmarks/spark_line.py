"""The environment of one Spark line (3.5, 4.0, 4.1), as ``scripts/local_env.sh`` sets it.

A worker's Spark is what its ``spark-submit`` on PATH, ``SPARK_HOME`` and the Iceberg runtime jar
say. The benchmarks that compare modes run every side on the same line: they take these
variables from a bash that sourced ``local_env.sh`` with ``SPARK_LINE`` set, so nothing about a
line is written twice.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: What a Spark line changes in the environment (see scripts/local_env.sh).
LINE_VARIABLES = (
    "PATH",
    "SPARK_HOME",
    "SPARK_LINE",
    "SPARK_VENV",
    "PYSPARK_PYTHON",
    "PYSPARK_DRIVER_PYTHON",
    "ICEBERG_RUNTIME_JAR",
    "ICEBERG_RUNTIME_COORDINATE",
)


def spark_line_environment(line: str) -> dict[str, str]:
    """What ``SPARK_LINE=<line> source scripts/local_env.sh`` sets, read from a bash that sourced it."""
    completed = subprocess.run(
        ["bash", "-c", f"export SPARK_LINE={line} && source scripts/local_env.sh && env -0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    env = dict(item.split("=", 1) for item in completed.stdout.split("\0") if "=" in item)
    return {key: env[key] for key in LINE_VARIABLES if key in env}
